package jobmaster_test

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/internal/failpoint"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestPendingCheckpointThroughLeaderFailover: the leader is killed while a checkpoint is
// pending. The new leader completes it when every subtask's acknowledgement is in the FSM or
// in the TaskManagers' reports, aborts it otherwise, never completes it twice, and goes on
// triggering with the next id. No task restarts.
func TestPendingCheckpointThroughLeaderFailover(t *testing.T) {
	cases := []struct {
		name string
		// hold pauses the old leader where the case needs it and returns the pending id.
		hold     func(t *testing.T, c *testcluster.Cluster, jobID string, at map[string]testcluster.Attempt) (uint64, *failpoint.Hook)
		complete bool
		reason   string
	}{
		{
			name: "before the barriers",
			hold: func(t *testing.T, c *testcluster.Cluster, jobID string, _ map[string]testcluster.Attempt) (uint64, *failpoint.Hook) {
				return pendingHeldBeforeTrigger(t, c, jobID), failpoint.BeforeTriggerCheckpoint
			},
			reason: "leader changed before every task acknowledged (0 of 6 subtasks acknowledged",
		},
		{
			name: "with some acknowledgements",
			hold: func(t *testing.T, c *testcluster.Cluster, jobID string, at map[string]testcluster.Attempt) (uint64, *failpoint.Hook) {
				ck := pendingHeldBeforeTrigger(t, c, jobID)
				src0 := at["source[0]"]
				if resp, err := ackAs(t, c, src0.TM, jobID, ck, testAck(jobID, ck, "source", 0, src0.Number)); err != nil || !resp.Accepted {
					t.Fatalf("ack: %v %v", resp, err)
				}
				return ck, failpoint.BeforeTriggerCheckpoint
			},
			reason: "leader changed before every task acknowledged (1 of 6 subtasks acknowledged",
		},
		{
			name: "with every acknowledgement in the reports only",
			hold: func(t *testing.T, c *testcluster.Cluster, jobID string, _ map[string]testcluster.Attempt) (uint64, *failpoint.Hook) {
				failpoint.Set(t, "pause("+failpoint.BeforeAckCheckpoint.Name()+")")
				// Every task acknowledged to its TM: each TM's latest acknowledgement is the
				// pending checkpoint, none committed.
				var ck uint64
				testcluster.WaitFor(t, 20*time.Second, "every task's acknowledgement held before its commit", func() (bool, string) {
					cp := checkpointsOf(c, jobID)
					if len(cp.GetPending()) != 1 || len(cp.Pending[0].Acks) != 0 {
						return false, describeCheckpoints(cp)
					}
					ck = cp.Pending[0].Id
					acked := 0
					for _, tm := range c.TMs {
						for _, r := range tmReport(t, c, tm) {
							if r.JobId == jobID && r.LatestAckedCheckpointId == ck && r.LatestCheckpointAck != nil {
								acked++
							}
						}
					}
					return acked == 6, fmt.Sprintf("%d tasks acknowledged %d; %s", acked, ck, describeCheckpoints(cp))
				})
				return ck, failpoint.BeforeAckCheckpoint
			},
			complete: true,
		},
		{
			name: "with every acknowledgement committed, before the completion",
			hold: func(t *testing.T, c *testcluster.Cluster, jobID string, _ map[string]testcluster.Attempt) (uint64, *failpoint.Hook) {
				failpoint.Set(t, "pause("+failpoint.BeforeCompleteCheckpoint.Name()+")")
				waitPaused(t, failpoint.BeforeCompleteCheckpoint, 1)
				cp := checkpointsOf(c, jobID)
				if len(cp.GetPending()) != 1 || len(cp.Pending[0].Acks) != 6 {
					t.Fatalf("completion held, but the record is %s", describeCheckpoints(cp))
				}
				return cp.Pending[0].Id, failpoint.BeforeCompleteCheckpoint
			},
			complete: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := checkpointCluster(t)
			id := c.Submit(checkpointedChain("failover", &pb.CheckpointConfig{IntervalMs: 100, TimeoutMs: 60_000, Retained: 10}))
			rec := waitAllRunning(t, c, id)
			before := testcluster.Attempts(rec)
			ck, hook := tc.hold(t, c, id, before)
			completedBefore := checkpointsOf(c, id).GetCompletedCount()

			old := c.Leader()
			e1 := old.A.JM.Epoch()
			c.KillJM(old)
			failpoint.Release(hook) // the killed leader's paused pass ended with its term
			var l2 *testcluster.JM
			testcluster.WaitFor(t, 30*time.Second, "a new leader with its gate open", func() (bool, string) {
				l2 = c.Leader()
				return l2.A.JM.Epoch() > e1, fmt.Sprintf("%s epoch %d", l2.ID, l2.A.JM.Epoch())
			})

			cp := waitCheckpoints(t, c, id, fmt.Sprintf("checkpoint %d ended, and a later one completed", ck), 30*time.Second, func(cp *pb.JobCheckpoints) bool {
				n := len(cp.GetCompleted())
				return !slices.Contains(ids(cp.GetPending()), ck) && n > 0 && cp.Completed[n-1].Id > ck
			})
			var ended *pb.CheckpointRecord
			for _, r := range append(slices.Clone(cp.Completed), cp.Aborted...) {
				if r.Id == ck {
					ended = r
				}
			}
			switch {
			case ended == nil:
				t.Fatalf("checkpoint %d is neither in the completed nor in the aborted list: %s", ck, describeCheckpoints(cp))
			case tc.complete && ended.Status != pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED:
				t.Fatalf("checkpoint %d %s (%q), want COMPLETED", ck, ended.Status, ended.AbortReason)
			case !tc.complete && (ended.Status != pb.CheckpointStatus_CHECKPOINT_STATUS_ABORTED || !strings.HasPrefix(ended.AbortReason, tc.reason)):
				t.Fatalf("checkpoint %d %s (%q), want ABORTED %q", ck, ended.Status, ended.AbortReason, tc.reason)
			}
			if ended.Epoch != e1 {
				t.Errorf("checkpoint %d has epoch %d, triggered at %d", ck, ended.Epoch, e1)
			}
			// Every later checkpoint is the new leader's, with a higher id; ids are each
			// accounted for once.
			for _, r := range append(slices.Clone(cp.Completed), cp.Aborted...) {
				if r.Id > ck && r.Epoch <= e1 {
					t.Errorf("checkpoint %d after %d has epoch %d", r.Id, ck, r.Epoch)
				}
			}
			if n := cp.CompletedCount + cp.AbortedCount + uint64(len(cp.Pending)); n != cp.NextCheckpointId-1 {
				t.Errorf("ids 1..%d given, %d accounted for: %s", cp.NextCheckpointId-1, n, describeCheckpoints(cp))
			}
			if tc.complete && cp.CompletedCount < completedBefore+1 {
				t.Errorf("completed count %d, was %d", cp.CompletedCount, completedBefore)
			}
			if changed := testcluster.Changed(before, testcluster.Attempts(c.Job(id))); len(changed) != 0 {
				t.Fatalf("tasks restarted through the failover: %v", changed)
			}
		})
	}
}

// tmReport asks a TaskManager for its whole report, as a leader of the current epoch would
// (naming no leader, so the TM's view of the leader does not change).
func tmReport(t *testing.T, c *testcluster.Cluster, tm *testcluster.TM) []*pb.ExecutionReport {
	t.Helper()
	stream, err := tmClient(c, tm).RequestReport(ctxT(t), &pb.RequestReportRequest{Epoch: c.Leader().A.JM.Epoch()})
	if err != nil {
		t.Fatalf("report of %s: %v", tm.ID, err)
	}
	var out []*pb.ExecutionReport
	for {
		chunk, err := stream.Recv()
		if err != nil {
			if err != io.EOF {
				t.Fatalf("report of %s: %v", tm.ID, err)
			}
			return out
		}
		out = append(out, chunk.Executions...)
	}
}
