package jobmaster_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/jobmaster"
	tc "github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/testkit/wasmbuild"
	"github.com/jmcluster/jmcluster/transport/pb"
	"github.com/jmcluster/jmcluster/wasmhost"
)

// TestModuleRefusedAtSubmit: on three JobMasters, a job whose wasm vertex names a stored
// artifact that is not WebAssembly, one naming the importer module (it imports env.foo) and
// one naming the kinds module with a function it does not export are each refused at submit,
// INVALID_ARGUMENT naming the vertex, the module's short hash and the cause (the function,
// and those the module exports); a second submit of one is refused alike (the leader's
// verdict, kept). Nothing of a refused job is in any replica's state, and no job names the
// artifacts. A job naming a function the module exports is accepted, and so is a PROCESS
// vertex of a module without jm_timer (the TaskManager does not require it at a task's
// start).
func TestModuleRefusedAtSubmit(t *testing.T) {
	c := tc.New(t, tc.Options{JMs: 3})
	mods := wasmbuild.MustRead("importer", "kinds")
	text := []byte("a text file, not a module\n")
	store := map[string][]byte{"text": text, "importer": mods["importer"], "kinds": mods["kinds"]}
	sha := map[string]string{}
	for name, b := range store {
		sha[name] = wasmhost.Sum(b)
		putArtifact(t, c, c.Follower(), b)
	}
	job := func(name, artifact, function string, kind pb.WasmKind) *pb.JobGraph {
		jg := wasmChain(name, artifact)
		jg.JobId = jobmaster.NewJobID()
		jg.Vertices[1].Operator.GetWasm().Function = function
		jg.Vertices[1].Operator.GetWasm().Kind = kind
		return jg
	}
	const mapKind = pb.WasmKind_WASM_KIND_MAP
	refused := []struct {
		jg   *pb.JobGraph
		want []string
	}{
		{job("text", sha["text"], "map", mapKind), []string{`vertex "map"`, sha["text"][:12], `not a WebAssembly module: it starts with "a text f"`}},
		{job("importer", sha["importer"], "call", mapKind), []string{`vertex "map"`, sha["importer"][:12], "imports env.foo, which the host does not offer"}},
		{job("nosuch", sha["kinds"], "nosuch", mapKind), []string{`vertex "map"`, sha["kinds"][:12], `does not export the function "nosuch" (wasm.function); it exports `, "upper", "echo"}},
	}
	cl := c.Client(c.Follower())
	for round := range 2 {
		for _, r := range refused {
			_, err := cl.SubmitJob(ctxT(t), &pb.SubmitJobRequest{JobGraph: r.jg})
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("%s (round %d): %v, want INVALID_ARGUMENT", r.jg.Name, round, err)
			}
			for _, w := range r.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s (round %d): %v, want %q in it", r.jg.Name, round, err, w)
				}
			}
			if round == 0 {
				t.Logf("%s: %v", r.jg.Name, status.Convert(err).Message())
			}
		}
	}

	ok, err := cl.SubmitJob(ctxT(t), &pb.SubmitJobRequest{JobGraph: job("upper", sha["kinds"], "upper", mapKind)})
	if err != nil {
		t.Fatalf("a job naming a function the module exports: %v", err)
	}
	noTimer, noTimerSHA := moduleBytes(0, 0) // exports map, not jm_timer
	putArtifact(t, c, c.Follower(), noTimer)
	process := job("process", noTimerSHA, "map", pb.WasmKind_WASM_KIND_PROCESS)
	process.Vertices[0].Operator.GetSequenceSource().Keys = 4
	process.Edges[0].Distribution = pb.Distribution_DISTRIBUTION_ALL_TO_ALL
	if _, err := cl.SubmitJob(ctxT(t), &pb.SubmitJobRequest{JobGraph: process}); err != nil {
		t.Fatalf("a PROCESS vertex of a module without jm_timer: %v", err)
	}
	for _, j := range c.Live() {
		tc.WaitFor(t, 30*time.Second, j.ID+" applying the accepted jobs", func() (bool, string) {
			_, a := j.A.State.Job(ok.JobId)
			_, b := j.A.State.Job(process.JobId)
			return a && b, fmt.Sprint(j.A.State.JobIDs())
		})
		for _, r := range refused {
			if _, found := j.A.State.Job(r.jg.JobId); found {
				t.Errorf("%s holds the refused job %s", j.ID, r.jg.JobId)
			}
		}
		arts, _ := j.A.State.Artifacts()
		for _, a := range arts {
			if (a.SHA256 == sha["text"] || a.SHA256 == sha["importer"]) && len(a.Jobs) > 0 {
				t.Errorf("%s: artifact %s is named by %v", j.ID, a.SHA256[:12], a.Jobs)
			}
		}
	}
}
