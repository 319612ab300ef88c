package taskmanager_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/testkit/wasmbuild"
	"github.com/jmcluster/jmcluster/transport/pb"
	"github.com/jmcluster/jmcluster/wasmhost"
)

func init() { wasmhost.SetCacheDir(wasmbuild.CacheDir()) }

var (
	wasmOnce    sync.Once
	wasmModules map[string][]byte
)

// storeWasm builds the test modules once and stores those of names in the cluster's artifact
// store (as `jmnode artifact put`), from which the TaskManagers fetch them; it returns their
// hashes by name.
func storeWasm(t *testing.T, c *testcluster.Cluster, names ...string) map[string]string {
	t.Helper()
	wasmOnce.Do(func() { wasmModules = wasmbuild.MustRead("kinds", "loop", "alloc", "boom", "big", "importer") })
	out := map[string]string{}
	for _, n := range names {
		c.PutArtifact(t, nil, wasmModules[n])
		out[n] = wasmhost.Sum(wasmModules[n])
	}
	return out
}

// wasmChain is StreamingChain with its map a wasm MAP of function in the module of sha, and no
// restart.
func wasmChain(name, sha, function string, timeoutMs int64) *pb.JobGraph {
	jg := testcluster.StreamingChain(name, 1, 2000, 0)
	jg.Vertices[1].Operator = &pb.Operator{Kind: &pb.Operator_Wasm{Wasm: &pb.WasmOperator{
		Artifact: sha, Function: function, Kind: pb.WasmKind_WASM_KIND_MAP, CallTimeoutMs: timeoutMs,
	}}}
	jg.RestartStrategy = &pb.RestartStrategy{Kind: pb.RestartKind_RESTART_KIND_NONE}
	return jg
}

// submitToLeader submits jg to the leader (a cluster of one JobMaster has no follower).
func submitToLeader(t *testing.T, c *testcluster.Cluster, jg *pb.JobGraph) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.Client(c.Leader()).SubmitJob(ctx, &pb.SubmitJobRequest{JobGraph: jg})
	if err != nil {
		t.Fatalf("submit %s: %v", jg.Name, err)
	}
	return resp.JobId
}

// causes are the failure causes of a job's executions, current and past.
func causes(rec *pb.JobRecord) string {
	var out []string
	for _, ev := range testcluster.Executions(rec) {
		if c := ev.GetCurrent().GetFailureCause(); c != "" {
			out = append(out, ev.GetCurrent().GetFailureCause())
		}
		for _, h := range ev.GetHistory() {
			if h.GetFailureCause() != "" {
				out = append(out, h.GetFailureCause())
			}
		}
	}
	return strings.Join(out, " | ")
}

// TestHostileWasmModulesFailOnlyTheirTask: on one TaskManager, a wasm job that loops forever,
// one that allocates 4 GiB, one that panics and one that emits a record over the TM's maximum
// record size each FAIL with a cause naming the module, the function and what happened (or
// the record size limit); a wasm job beside them on the same TM keeps running with the same
// attempts, and so does the TM.
func TestHostileWasmModulesFailOnlyTheirTask(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{JMs: 1, TMs: 1, Slots: 16})
	sha := storeWasm(t, c, "kinds", "loop", "alloc", "boom", "big")
	good := submitToLeader(t, c, wasmChain("good", sha["kinds"], "echo", 0))
	before := testcluster.Attempts(c.WaitJob(good, "the good wasm job RUNNING", 60*time.Second, testcluster.AllRunning))

	hostile := []struct {
		module, function string
		want             []string
	}{
		{"loop", "spin", []string{"function spin: the call ran over its time limit of 500ms (call_timeout_ms) and was stopped"}},
		{"alloc", "hog", []string{"function hog: wasm error: unreachable; its stderr: fatal error: out of memory"}},
		{"boom", "boom", []string{"function boom: wasm error: unreachable; its stderr: panic: boom: the function gave up"}},
		{"big", "grow", []string{"over the TaskManager's maximum record size 1048576 bytes (MaxRecordSize, --max-record-size)"}},
	}
	ids := map[string]string{}
	for _, h := range hostile {
		timeout := int64(500)
		if h.module == "big" {
			timeout = 0 // the default: its allocations take their time on a loaded machine
		}
		ids[h.module] = submitToLeader(t, c, wasmChain(h.module, sha[h.module], h.function, timeout))
	}
	for _, h := range hostile {
		rec := c.WaitJob(ids[h.module], h.module+" FAILED", 90*time.Second, func(r *pb.JobRecord) bool {
			return r.GetStatus() == pb.JobStatus_JOB_STATUS_FAILED
		})
		got := causes(rec) + " | " + tmCauses(c, ids[h.module])
		want := h.want
		if h.module != "big" {
			want = append(want, "module "+sha[h.module][:12])
		}
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: causes %q, want %q in them", h.module, got, w)
			}
		}
		t.Logf("%s: %s", h.module, got)
	}
	rec := c.Job(good)
	if !testcluster.AllRunning(rec) {
		t.Fatalf("the good job after the hostile ones: %s", testcluster.Describe(rec))
	}
	if ch := testcluster.Changed(before, testcluster.Attempts(rec)); len(ch) != 0 {
		t.Fatalf("the good job restarted: %v", ch)
	}
}

// tmCauses are the failure causes of a job's tasks as the TaskManagers keep them (the job's
// record may hold a downstream task's failure instead, when it reached the leader first).
func tmCauses(c *testcluster.Cluster, job string) string {
	var out []string
	for _, tm := range c.TMs {
		for _, ti := range tm.A.TM.Tasks() {
			if ti.JobID == job && ti.FailureCause != "" {
				out = append(out, ti.VertexID+": "+ti.FailureCause)
			}
		}
	}
	return strings.Join(out, " | ")
}

// TestRefusedWasmModules proves the TaskManager's own refusal of a module (defence in depth
// behind the JobMaster's check at submit, which reads only a module's imports and exports:
// jobmaster's TestModuleRefusedAtSubmit). wasmhost.Validate, the TaskManager's check, refuses
// a module importing env.foo and a file that is not WebAssembly naming the cause. A module
// that passes the JobMaster's check but does not compile (its code does not validate: the
// check does not read code) is accepted at submit, and its task fails at its start on the
// TaskManager naming the module and that it does not compile.
func TestRefusedWasmModules(t *testing.T) {
	wasmOnce.Do(func() { wasmModules = wasmbuild.MustRead("kinds", "loop", "alloc", "boom", "big", "importer") })
	err := wasmhost.Validate(wasmModules["importer"])
	if err == nil || !strings.Contains(err.Error(), "imports env.foo, which the host does not offer") {
		t.Errorf("importer: %v", err)
	}
	if err := wasmhost.Validate([]byte("PK\x03\x04 a zip")); err == nil || !strings.Contains(err.Error(), "not a WebAssembly module") {
		t.Errorf("a zip: %v", err)
	}
	bad := wasmbuild.Shape{Functions: []string{"map"}, InvalidCode: true}.Bytes()
	if err := wasmhost.Check(bad, "map"); err != nil {
		t.Fatalf("the module of invalid code fails the JobMaster's check (%v): the test would not reach the TaskManager", err)
	}
	c := testcluster.New(t, testcluster.Options{JMs: 1, TMs: 1})
	sha := wasmhost.Sum(bad)
	c.PutArtifact(t, nil, bad)
	id := submitToLeader(t, c, wasmChain("invalid-code", sha, "map", 0))
	rec := c.WaitJob(id, "invalid-code FAILED", 60*time.Second, func(r *pb.JobRecord) bool {
		return r.GetStatus() == pb.JobStatus_JOB_STATUS_FAILED
	})
	want := "module " + sha[:12] + " does not compile"
	got := causes(rec) + " | " + tmCauses(c, id)
	if !strings.Contains(got, want) {
		t.Errorf("causes %q, want %q in them", got, want)
	}
	t.Logf("causes: %s", got)
}

// TestWasmBatchOfAQuietStreamHandedOn: a wasm task whose input goes quiet without ending hands
// on the records it holds once the first has waited WasmBatchDelay (the TaskManager flushes it
// while the task waits for input), not at the next record. The job: an event generator of two
// splits, one emitting ten events and ending, the other idle and never ending, ALL_TO_ALL into
// one wasm MAP (echo), into a sink: the map's input never ends, so only that flush brings the
// ten records to the sink.
func TestWasmBatchOfAQuietStreamHandedOn(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{JMs: 1, TMs: 1, Slots: 4})
	sha := storeWasm(t, c, "kinds")
	jg := &pb.JobGraph{
		Name: "quiet", Type: pb.JobType_JOB_TYPE_STREAMING,
		Vertices: []*pb.JobVertex{
			{Id: "source", Parallelism: 2, Operator: &pb.Operator{Kind: &pb.Operator_EventGenerator{EventGenerator: &pb.EventGenerator{Seed: 3, Count: 10, Keys: 4, IdleSplits: 1}}}},
			{Id: "map", Parallelism: 1, Operator: &pb.Operator{Kind: &pb.Operator_Wasm{Wasm: &pb.WasmOperator{Artifact: sha["kinds"], Function: "echo", Kind: pb.WasmKind_WASM_KIND_MAP}}}},
			{Id: "sink", Parallelism: 1, Operator: &pb.Operator{Kind: &pb.Operator_LogSink{LogSink: &pb.LogSink{}}}},
		},
		Edges: []*pb.JobEdge{
			{Source: "source", Target: "map", Distribution: pb.Distribution_DISTRIBUTION_ALL_TO_ALL, ResultType: pb.ResultType_RESULT_TYPE_PIPELINED},
			{Source: "map", Target: "sink", Distribution: pb.Distribution_DISTRIBUTION_FORWARD, ResultType: pb.ResultType_RESULT_TYPE_PIPELINED},
		},
		RestartStrategy: &pb.RestartStrategy{Kind: pb.RestartKind_RESTART_KIND_NONE},
	}
	id := submitToLeader(t, c, jg)
	testcluster.WaitFor(t, time.Minute, "the ten events at the sink", func() (bool, string) {
		var sink, mapIn int64
		for _, io := range c.TMs[0].A.TM.TaskIOs() {
			switch {
			case io.JobID != id:
			case io.VertexID == "sink":
				sink += io.RecordsIn
			case io.VertexID == "map":
				mapIn += io.RecordsIn
			}
		}
		return sink == 10, fmt.Sprintf("map read %d, sink read %d", mapIn, sink)
	})
	if rec := c.Job(id); rec.GetStatus() != pb.JobStatus_JOB_STATUS_RUNNING {
		t.Fatalf("the job is %s, not RUNNING (its idle split never ends)", rec.GetStatus())
	}
}
