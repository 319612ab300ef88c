package reconcile

import (
	"testing"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestSinkCommits: what the reports say of the committing sinks: every TM that listed its
// executions, and per job and TM the oldest checkpoint a committing sink committed; an
// as-expected answer lists nothing and says nothing of its sinks.
func TestSinkCommits(t *testing.T) {
	sink := func(job, attempt string, committed uint64) *pb.ExecutionReport {
		return &pb.ExecutionReport{JobId: job, AttemptId: attempt, CommitsOutput: true, CommittedCheckpointId: committed}
	}
	reports := map[string]*Report{
		"tm1": {TMID: "tm1", Addr: "tm1:1", Executions: []*pb.ExecutionReport{
			sink("j", "s0", 9), sink("j", "s1", 8), {JobId: "j", AttemptId: "src0"}, sink("k", "k0", 0)}},
		"tm2": {TMID: "tm2", Addr: "tm2:1", Executions: []*pb.ExecutionReport{{JobId: "j", AttemptId: "src1"}}},
		"tm3": {TMID: "tm3", Addr: "tm3:1", AsExpected: true, Expected: 4},
	}
	c := sinkCommits(reports)
	if !c.Listed["tm1:1"] || !c.Listed["tm2:1"] || c.Listed["tm3:1"] || len(c.Listed) != 2 {
		t.Fatalf("listed %v, want tm1 and tm2 (tm3 answered as expected)", c.Listed)
	}
	if got := c.Lowest["j"]; len(got) != 1 || got["tm1:1"] != 8 {
		t.Fatalf("job j: %v, want tm1 at 8 (the older of its two sinks)", got)
	}
	if got, ok := c.Lowest["k"]["tm1:1"]; !ok || got != 0 {
		t.Fatalf("job k: %v, want tm1 at 0 (a sink that committed none)", c.Lowest["k"])
	}
}
