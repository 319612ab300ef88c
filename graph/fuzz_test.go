package graph

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// fuzzMaxChannels bounds the expanded size of a graph the fuzz target builds: Validate does not
// bound it (CheckSize in limits.go does, on the leader before commit), and a valid 1024 x 1024
// ALL_TO_ALL edge alone is a million input channels, which would only make the fuzzer slow.
const fuzzMaxChannels = 1 << 16

// FuzzJobSpec parses bytes the way `jmnode job submit` reads a job file (protojson into a
// JobGraph), validates them as SubmitJob does (a missing job id is assigned first) and builds
// the ExecutionGraph. Properties: nothing panics; a refusal is a *ValidationError with at
// least one problem, each naming a field or saying what is wrong; when Validate accepts,
// BuildExecutionGraph succeeds with one ExecutionVertex per subtask, and FailoverRegions
// covers every one of them. Seeds: testdata/fuzz/FuzzJobSpec.
func FuzzJobSpec(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		var jg pb.JobGraph
		if err := (protojson.UnmarshalOptions{}).Unmarshal(b, &jg); err != nil {
			return
		}
		if jg.JobId == "" {
			jg.JobId = "0123456789abcdef0123456789abcdef"
		}
		err := Validate(&jg, DefaultLimits())
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) || len(ve.Problems) == 0 || !errors.Is(err, ErrInvalidJobGraph) {
				t.Fatalf("Validate refused without problems: %v", err)
			}
			for _, p := range ve.Problems {
				if p.Message == "" {
					t.Fatalf("problem without a message: %+v", p)
				}
			}
			return
		}
		execs, chans := expandedSize(&jg)
		if chans > fuzzMaxChannels {
			return
		}
		eg, err := BuildExecutionGraph(&jg)
		if err != nil {
			t.Fatalf("Validate accepted a graph BuildExecutionGraph refuses: %v", err)
		}
		n := 0
		for _, v := range eg.GetVertices() {
			n += len(v.GetSubtasks())
		}
		if n != execs {
			t.Fatalf("built %d execution vertices, want %d", n, execs)
		}
		regions, err := FailoverRegions(&jg)
		if err != nil {
			t.Fatalf("Validate accepted a graph FailoverRegions refuses: %v", err)
		}
		covered := 0
		for _, r := range regions {
			covered += len(r.Members)
		}
		if covered != execs {
			t.Fatalf("failover regions cover %d of %d execution vertices", covered, execs)
		}
	})
}

// expandedSize returns the number of executions and input channels jg expands to.
func expandedSize(jg *pb.JobGraph) (execs, chans int) {
	par := map[string]int{}
	for _, v := range jg.Vertices {
		par[v.Id] = int(v.Parallelism)
		execs += int(v.Parallelism)
	}
	for _, e := range jg.Edges {
		if e.Distribution == pb.Distribution_DISTRIBUTION_ALL_TO_ALL {
			chans += par[e.Source] * par[e.Target]
		} else {
			chans += par[e.Target]
		}
	}
	return execs, chans
}
