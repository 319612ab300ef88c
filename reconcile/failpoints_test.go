package reconcile_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/internal/failpoint"
	tc "github.com/jmcluster/jmcluster/internal/testcluster"
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
