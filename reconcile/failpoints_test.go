package reconcile_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/internal/failpoint"
	tc "github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// The planted bugs of reconciliation, each shown to do what the fault suite's self-test
// relies on (docs/testing.md, "Deliberately broken builds").

// TestStuckReconcilingNeverCommits: with the failpoint stuck-reconciling, a new leader
// begins a reconciliation and never ends it: for three report deadlines (a reconciliation is
// bounded by one, plus its commit) its gate stays closed and the job RECONCILING. Once the
// failpoint is off, the next leader reconciles with no restart.
func TestStuckReconcilingNeverCommits(t *testing.T) {
	deadline := time.Second
	c := tc.New(t, tc.Options{JMs: 3, TMs: 3, ReportDeadline: deadline})
	id, rec := runningJob(t, c, tc.StreamingChain("stuck", 2, 100, 0))
	before := tc.Attempts(rec)
	failpoint.Set(t, failpoint.StuckReconciling.Name())

	l1 := c.Leader()
	c.KillJM(l1)
	l2 := c.ReconcilingLeader(20 * time.Second)
	e2 := l2.A.JM.Epoch()
	c.Reconciliation(l2, e2, "in_progress", 5*time.Second)
	until := time.Now().Add(3 * deadline)
	for time.Now().Before(until) {
		for _, j := range c.Live() {
			begun := false // a follower may not have applied the begin record yet
			for _, r := range j.A.State.Reconciliations() {
				if r.Epoch >= e2 && r.Outcome != "in_progress" {
					t.Fatalf("%s holds the reconciliation of epoch %d %s", j.ID, r.Epoch, r.Outcome)
				}
				begun = begun || r.Epoch == e2
			}
			if got, ok := j.A.State.Job(id); ok && begun && got.Status != pb.JobStatus_JOB_STATUS_RECONCILING {
				t.Fatalf("%s: job %s while the reconciliation is stuck", j.ID, graph.JobStatusName(got.Status))
			}
			if j.A.JM.Active() && !j.A.JM.Reconciling() {
				t.Fatalf("%s opened its gate without committing a reconciliation", j.ID)
			}
		}
		<-time.After(20 * time.Millisecond)
	}

	failpoint.Reset()
	c.StartJM(l1)
	tc.WaitFor(t, 10*time.Second, l1.ID+" caught up", func() (bool, string) {
		return l1.A.State.LeaderEpoch() >= e2, fmt.Sprintf("epoch %d", l1.A.State.LeaderEpoch())
	})
	c.KillJM(l2)
	c.CompletedAfter(e2, 30*time.Second)
	after := c.WaitJob(id, "the job RUNNING after an intact reconciliation", 30*time.Second, running)
	if changed := tc.Changed(before, tc.Attempts(after)); len(changed) != 0 || after.Restarts != 0 {
		t.Fatalf("restarts %d, changed attempts %v: want none", after.Restarts, changed)
	}
}

// TestRestartOnFailoverRestartsEveryTask: with the failpoint restart-on-failover, a new leader
// fails every execution instead of keeping what the TaskManagers report (what Flink does
// today): every execution gets a new attempt and the job counts a restart, where
// TestLeaderKillStreamingJob shows none in an intact build.
func TestRestartOnFailoverRestartsEveryTask(t *testing.T) {
	c := tc.New(t, tc.Options{JMs: 3, TMs: 3})
	id, rec := runningJob(t, c, tc.StreamingChain("restart-all", 2, 100, 0))
	before := tc.Attempts(rec)
	failpoint.Set(t, failpoint.RestartOnFailover.Name())

	l1 := c.Leader()
	e1 := l1.A.JM.Epoch()
	c.KillJM(l1)
	r := c.CompletedAfter(e1, 30*time.Second)
	after := c.WaitJob(id, "the job RUNNING with every execution on a new attempt", 30*time.Second, func(rec *pb.JobRecord) bool {
		return running(rec) && len(tc.Changed(before, tc.Attempts(rec))) == len(before)
	})
	if after.Restarts == 0 {
		t.Fatalf("restarts 0 after a restart on failover: %s", tc.Describe(after))
	}
	var causes []string
	for _, h := range after.History {
		causes = append(causes, h.Cause)
	}
	if !strings.Contains(strings.Join(causes, ";"), "failpoint restart-on-failover") {
		t.Fatalf("no status names the failpoint: %v", causes)
	}
	t.Logf("reconciliation of epoch %d: %v; %s", r.Epoch, r.Counts, tc.Describe(after))
}

// TestRedeployIntoASlotAnEndedAttemptHoldsCountsNoRestart: with restart-on-failover the new
// leader fails every execution but cancels nothing, so the old attempts still hold their slots
// when the regions restart. A TM refuses a new attempt into such a slot; the leader cancels
// the attempt the graph no longer owns and commits the refused one CANCELED, so the region
// deploys again without counting a restart. Before, every refusal failed the new attempt and
// counted a restart, and on a loaded machine (the heartbeats that reveal the old attempts come late) the
// strategy ran out and the job FAILED (TestRestartOnFailoverRestartsEveryTask, 2 in 20 runs).
func TestRedeployIntoASlotAnEndedAttemptHoldsCountsNoRestart(t *testing.T) {
	c := tc.New(t, tc.Options{JMs: 3, TMs: 3})
	// Sources only: each region is one task, so a refused one is the region's only member and
	// nothing else fails with it.
	jg := tc.StreamingChain("busy-slot", 3, 100, 0)
	jg.Vertices, jg.Edges = jg.Vertices[:1], nil
	jg.RestartStrategy = &pb.RestartStrategy{Kind: pb.RestartKind_RESTART_KIND_FIXED_DELAY, Attempts: 5, DelayMs: 10}
	id, rec := runningJob(t, c, jg)
	before := tc.Attempts(rec)
	failpoint.Set(t, failpoint.RestartOnFailover.Name())
	l1 := c.Leader()
	e1 := l1.A.JM.Epoch()
	c.KillJM(l1)
	c.CompletedAfter(e1, 30*time.Second)
	after := c.WaitJob(id, "the job RUNNING on new attempts, or ended", 30*time.Second, func(rec *pb.JobRecord) bool {
		return (running(rec) && len(tc.Changed(before, tc.Attempts(rec))) == len(before)) || graph.IsGloballyTerminal(rec.Status)
	})
	// A refusal into a busy slot fails no attempt: the refused ones are CANCELED, naming the
	// cancelled occupant, and the job runs.
	refused, failedBusy := 0, 0
	for _, ev := range tc.Executions(after) {
		for _, e := range append(append([]*pb.Execution(nil), ev.History...), ev.Current) {
			if strings.Contains(e.GetFailureCause(), "is busy with attempt") {
				refused++
				if e.GetState() != pb.ExecutionState_EXECUTION_STATE_CANCELED {
					failedBusy++
				}
			}
		}
	}
	if !running(after) || failedBusy > 0 {
		t.Fatalf("after a restart on failover into busy slots: %s; %d of %d refused attempts not CANCELED; want RUNNING, every refused attempt CANCELED", tc.Describe(after), failedBusy, refused)
	}
	t.Logf("%d attempts refused into busy slots, all CANCELED; %s", refused, tc.Describe(after))
}
