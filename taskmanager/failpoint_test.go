package taskmanager

import (
	"testing"

	"github.com/jmcluster/jmcluster/internal/failpoint"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestDisableFencingAcceptsAStaleEpoch: with the failpoint disable-fencing, a TaskManager that
// has adopted epoch 5 starts and cancels tasks for calls carrying epoch 4 (the deposed leader
// the fault suite's self-test stands in for) and keeps epoch 5; TestEpochFencing shows the same
// calls refused in an intact build. The start event of such a task records the stale epoch of
// its call (deploy_epoch 4) and the one the TM had seen (fence_epoch 5): what the fault
// suite's no-concurrent-attempts counts as a stale deploy; a task from the current leader
// has the two equal.
func TestDisableFencingAcceptsAStaleEpoch(t *testing.T) {
	jm := startJM(t)
	var events syncBuffer
	tm := newTM(t, "tm1", jm, func(c *Config) { c.EventLog = &events })
	c := client(t, tm)
	jm.setEpoch(5)
	report(t, c, &pb.RequestReportRequest{Epoch: 5, LeaderId: "jm", LeaderGrpcAddress: jm.addr})
	submit(t, c, 5, source("job2", "src", 0, 1, "current", 1, unbounded))
	jm.waitState(t, "current", running)

	failpoint.Set(t, failpoint.DisableFencing.Name())
	submit(t, c, 4, source("job", "src", 0, 1, "old", 0, unbounded))
	jm.waitState(t, "old", running)
	starts := map[string]Event{}
	for _, e := range events.events(t) {
		if e.Event == "start" {
			starts[e.AttemptID] = e
		}
	}
	if e := starts["current"]; e.DeployEpoch != 5 || e.FenceEpoch != 5 {
		t.Fatalf("start of the current leader's task: deploy_epoch %d fence_epoch %d, want 5 and 5", e.DeployEpoch, e.FenceEpoch)
	}
	if e := starts["old"]; e.DeployEpoch != 4 || e.FenceEpoch != 5 {
		t.Fatalf("start of the stale leader's task: deploy_epoch %d fence_epoch %d, want 4 and 5", e.DeployEpoch, e.FenceEpoch)
	}
	resp, err := c.CancelTask(t.Context(), &pb.CancelTaskRequest{Epoch: 4, JobId: "job", AttemptId: "old"})
	if err != nil || resp.GetState() != canceled {
		t.Fatalf("CancelTask with the stale epoch 4: %v %v", resp, err)
	}
	if tm.Epoch() != 5 {
		t.Fatalf("epoch %d after stale calls, want 5 kept", tm.Epoch())
	}
}
