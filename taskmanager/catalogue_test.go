package taskmanager

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/testkit/operatorcases"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestTMRefusesExactlyWhatTheJobGraphRefuses runs the operator catalogue's table
// (testkit/operatorcases: every kind, good and bad configurations and wirings) through both
// paths: as a vertex of a JobGraph (graph.Validate) and as the descriptor the JobMaster
// deploys for it. The TM's descriptor validation finds exactly the problems JobGraph
// validation finds on that vertex, word for word; and a real TM, over gRPC, refuses every bad
// case with INVALID_ARGUMENT naming the field, starts nothing for it, and accepts every good
// case.
func TestTMRefusesExactlyWhatTheJobGraphRefuses(t *testing.T) {
	cases := operatorcases.All()
	good := 0
	for _, c := range cases {
		if c.Good() {
			good++
		}
	}
	attempt := func(i int) string { return fmt.Sprintf("%032x", i+1) }

	for i, c := range cases {
		want := jobGraphProblems(t, c)
		got := tddProblems(c.Descriptor(attempt(i), 0), 1, nil)
		if !slices.Equal(got, want) {
			t.Errorf("%s: the TM finds %q, JobGraph validation %q", c.Name, got, want)
		}
		if c.Good() != (len(want) == 0) {
			t.Errorf("%s: good %v, JobGraph validation finds %q", c.Name, c.Good(), want)
		}
	}

	jm := startJM(t)
	tm := newTM(t, "tm1", jm, func(cfg *Config) { cfg.Slots = good })
	cl := client(t, tm)
	slot := int32(0)
	var accepted []string
	for i, c := range cases {
		d := c.Descriptor(attempt(i), slot)
		d.AttemptNumber = int32(i) // every case is a newer attempt of vertex v's subtask 0
		_, err := cl.SubmitTask(t.Context(), &pb.SubmitTaskRequest{Epoch: 1, Task: d})
		if c.Good() {
			if err != nil {
				t.Errorf("%s: a real TM refused a good case: %v", c.Name, err)
				continue
			}
			accepted = append(accepted, d.AttemptId)
			slot++
			continue
		}
		msg := status.Convert(err).Message()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(msg, c.Field+": ") || !strings.Contains(msg, c.Msg) {
			t.Errorf("%s: a real TM answered %v, want INVALID_ARGUMENT naming %q", c.Name, err, c.Want())
		}
	}
	if n := len(tm.Tasks()); n != len(accepted) {
		t.Errorf("%d tasks started for %d accepted cases: %v", n, len(accepted), tm.Tasks())
	}
	for _, a := range accepted {
		if _, err := cl.CancelTask(t.Context(), &pb.CancelTaskRequest{Epoch: 1, JobId: operatorcases.JobID, AttemptId: a}); err != nil {
			t.Errorf("cancel %s: %v", a, err)
		}
	}
	waitFor(t, 20*time.Second, "every slot free", func() (bool, string) {
		return tm.FreeSlots() == good, fmt.Sprintf("%d of %d free", tm.FreeSlots(), good)
	})
}

// jobGraphProblems validates the case's JobGraph and returns the problems on the case's vertex
// in the "field: message" form with the field relative to the vertex; it fails on a problem
// anywhere else.
func jobGraphProblems(t *testing.T, c operatorcases.Case) []string {
	t.Helper()
	err := graph.Validate(c.JobGraph(), graph.DefaultLimits())
	if err == nil {
		return nil
	}
	var ve *graph.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("%s: Validate = %v", c.Name, err)
	}
	prefix := fmt.Sprintf("vertices[%d]", operatorcases.VertexIndex)
	var out []string
	for _, p := range ve.Problems {
		rel, ok := strings.CutPrefix(p.Field, prefix)
		if !ok || (rel != "" && !strings.HasPrefix(rel, ".")) {
			t.Fatalf("%s: a problem outside the case's vertex: %s", c.Name, p)
		}
		out = append(out, graph.Problem{Field: strings.TrimPrefix(rel, "."), Message: p.Message}.String())
	}
	return out
}
