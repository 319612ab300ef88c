package taskmanager

import (
	"testing"

	"github.com/jmcluster/jmcluster/internal/failpoint"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestDisableFencingAcceptsAStaleEpoch: with the failpoint disable-fencing, a TaskManager that
// has adopted epoch 5 starts and cancels tasks for calls carrying epoch 4 (the deposed leader
// the fault suite's self-test stands in for) and keeps epoch 5; TestEpochFencing shows the same
// calls refused in an intact build.
func TestDisableFencingAcceptsAStaleEpoch(t *testing.T) {
	jm := startJM(t)
	tm := newTM(t, "tm1", jm, nil)
	c := client(t, tm)
	jm.setEpoch(5)
	report(t, c, &pb.RequestReportRequest{Epoch: 5, LeaderId: "jm", LeaderGrpcAddress: jm.addr})

	failpoint.Set(t, failpoint.DisableFencing.Name())
	submit(t, c, 4, source("job", "src", 0, 1, "old", 0, unbounded))
	jm.waitState(t, "old", running)
	resp, err := c.CancelTask(t.Context(), &pb.CancelTaskRequest{Epoch: 4, JobId: "job", AttemptId: "old"})
	if err != nil || resp.GetState() != canceled {
		t.Fatalf("CancelTask with the stale epoch 4: %v %v", resp, err)
	}
	if tm.Epoch() != 5 {
		t.Fatalf("epoch %d after stale calls, want 5 kept", tm.Epoch())
	}
}
