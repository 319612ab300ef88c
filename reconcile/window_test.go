package reconcile_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	tc "github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// The reconciliation window on a test cluster: what the closed gate refuses meanwhile, and
// which TaskManagers the collection waits for.

// TestUpdateRefusedDuringReconciliationAppliedOnce: while the gate is closed (the window held
// open by a silent TM), a TM's UpdateTaskExecutionState is refused with RECONCILING and a
// retry-after; the TM keeps it in its outbox and retries; after the commit it is applied
// exactly once.
func TestUpdateRefusedDuringReconciliationAppliedOnce(t *testing.T) {
	c := tc.New(t, tc.Options{JMs: 3, TMs: 4, Slots: 6, ReportDeadline: 5 * time.Second, HeartbeatTimeout: 4 * time.Second})
	id, rec := runningJob(t, c, silentTMJob("gate"))
	silent := pickTM(t, c, rec)
	affected := regionsOn(rec, silent.ID)
	before := tc.Attempts(rec)
	var victim tc.Attempt
	var other tc.Attempt
	for _, k := range []string{"sink[0]", "sink[1]", "sink[2]"} {
		if a := before[k]; !affected[subtaskOf(k)] && a.TM != silent.ID {
			victim = a
		}
	}
	for _, a := range before {
		if a.TM != silent.ID && a.ID != victim.ID {
			other = a
		}
	}
	if victim.ID == "" {
		t.Fatalf("no sink outside the silent TM's regions: %v", before)
	}
	vtm := c.TMByID(victim.TM)

	c.KillJM(c.Leader())
	c.SilenceTM(silent)
	l := c.ReconcilingLeader(20 * time.Second)
	epoch := l.A.JM.Epoch()
	tc.WaitFor(t, 5*time.Second, victim.TM+" reported to the new leader", func() (bool, string) {
		return vtm.A.TM.Epoch() == epoch && vtm.A.TM.Leader() == l.GRPCAddr, fmt.Sprintf("epoch %d leader %s", vtm.A.TM.Epoch(), vtm.A.TM.Leader())
	})
	if !l.A.JM.Reconciling() {
		t.Fatal("the gate opened before the test could send an update")
	}

	// A TM RPC while the gate is closed: refused with the distinct status and a retry-after.
	jmc := pb.NewJobMasterServiceClient(c.Conn(l.GRPCAddr))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_, err := jmc.UpdateTaskExecutionState(ctx, &pb.UpdateTaskExecutionStateRequest{
		TmId: other.TM, JobId: id, AttemptId: other.ID, State: stRunning, Sequence: 1 << 40,
	})
	cancel()
	if !transport.IsReconciling(err) {
		t.Fatalf("update during reconciliation: %v, want the RECONCILING refusal", err)
	}
	if d, ok := transport.RetryAfter(err); !ok || d <= 0 {
		t.Fatalf("the refusal carries no retry-after: %v", err)
	}

	// The task fails during the window: its TM's update waits in the outbox.
	if err := vtm.A.TM.FailTask(victim.ID, "injected while the leader reconciles"); err != nil {
		t.Fatal(err)
	}
	tc.WaitFor(t, 5*time.Second, "the FAILED update held in the outbox while the gate is closed", func() (bool, string) {
		return vtm.A.TM.OutboxLen() > 0, fmt.Sprintf("outbox %d", vtm.A.TM.OutboxLen())
	})
	if !l.A.JM.Reconciling() {
		t.Fatal("the gate opened before the update could be refused")
	}
	r := c.Reconciliation(l, epoch, "completed", 20*time.Second)
	if r.Counts.Failed+r.Counts.Canceled > int64(3*len(affected))-countOn(rec, silent.ID) {
		t.Fatalf("the reconciliation saw the injected failure (it came after the report): %v", r.Counts)
	}
	tc.WaitFor(t, 10*time.Second, "the outbox drained", func() (bool, string) {
		return vtm.A.TM.OutboxLen() == 0, fmt.Sprintf("outbox %d", vtm.A.TM.OutboxLen())
	})
	after := c.WaitJob(id, "the injected failure applied", 20*time.Second, func(rec *pb.JobRecord) bool {
		e := tc.FindExecution(rec, victim.ID)
		return e != nil && e.State == stFailed
	})
	e := tc.FindExecution(after, victim.ID)
	failed := 0
	for _, st := range e.StateTimestamps {
		if st.State == stFailed {
			failed++
		}
	}
	if failed != 1 || !strings.Contains(e.FailureCause, "injected") {
		t.Fatalf("the attempt has %d FAILED timestamps (want exactly 1) and cause %q: %v", failed, e.FailureCause, e.StateTimestamps)
	}
	// Only the failed sink's region and the silent TM's regions restart.
	affected[subtaskOf(keyOf(before, victim.ID))] = true
	final := c.WaitJob(id, "the job RUNNING again", 30*time.Second, func(rec *pb.JobRecord) bool {
		return running(rec) && tc.Attempts(rec)[keyOf(before, victim.ID)].ID != victim.ID
	})
	checkOnlyRegionsRestarted(t, before, tc.Attempts(final), affected)
}

func keyOf(as map[string]tc.Attempt, attemptID string) string {
	for k, a := range as {
		if a.ID == attemptID {
			return k
		}
	}
	return ""
}

// TestReconciliationWaitsForTMsGossipWronglyReportsDead: every replica's gossip view wrongly
// holds every TaskManager dead (a busy host misses memberlist's probes) when the leader is
// killed. The new leader still asks them, and since their report requests succeed it waits for
// the reports: every execution is kept. Before the fix the collector skipped gossip-dead TMs at
// once, found nobody to wait for, and failed all nine executions as missing.
func TestReconciliationWaitsForTMsGossipWronglyReportsDead(t *testing.T) {
	c := tc.New(t, tc.Options{JMs: 3, TMs: 3})
	id, rec := runningJob(t, c, tc.StreamingChain("gossip-wrong", 3, 100, 0))
	before := tc.Attempts(rec)
	l1 := c.Leader()
	for _, j := range c.Live() {
		for _, tm := range c.TMs {
			j.A.JM.Registry().SetGossip(tm.ID, "dead")
		}
	}
	c.KillJM(l1)
	l2 := c.Leader()
	r := c.Reconciliation(l2, l2.A.JM.Epoch(), "completed", 20*time.Second)
	if r.Counts.KeptRunning != 9 || r.Counts.Missing != 0 || r.Counts.TmsMissing != 0 {
		t.Fatalf("reconciliation counts %v, want all 9 kept running", r.Counts)
	}
	after := c.WaitJob(id, "the job RUNNING", 20*time.Second, running)
	if changed := tc.Changed(before, tc.Attempts(after)); len(changed) != 0 {
		t.Fatalf("attempts changed across the failover: %v", changed)
	}
}

// checkPhases: a completed record's phases are in order, by the leader's clock.
func checkPhases(t *testing.T, r *pb.ReconciliationRecord) {
	t.Helper()
	at := []int64{r.StartedAt, r.CollectedAt, r.MergedAt, r.JobsCommittedAt, r.EndedAt}
	for i := 1; i < len(at); i++ {
		if at[i] < at[i-1] || at[i] == 0 {
			t.Fatalf("phases out of order (started, collected, merged, jobs committed, ended): %v", at)
		}
	}
}

// TestReconciliationDoesNotWaitForIdleTMs: a TM that holds no committed attempt is asked for a
// report but not waited for. One such TM stops answering (its gossip membership stays alive,
// so gossip does not call it dead) and the leader is killed: the new leader opens its gate
// long before the report deadline, and the job keeps every attempt. Before, the collector
// waited for every TM it asked and kept the gate closed until the deadline.
func TestReconciliationDoesNotWaitForIdleTMs(t *testing.T) {
	const deadline = 40 * time.Second
	c := tc.New(t, tc.Options{JMs: 3, TMs: 4, ReportDeadline: deadline})
	id, rec := runningJob(t, c, tc.StreamingChain("idle-tm", 1, 100, 0))
	before := tc.Attempts(rec)
	var idle *tc.TM
	for _, tm := range c.TMs {
		if len(regionsOn(rec, tm.ID)) == 0 {
			idle = tm
		}
	}
	if idle == nil {
		t.Fatalf("every TM holds an attempt: %v", before)
	}
	c.SilenceTM(idle)
	l1 := c.Leader()
	c.KillJM(l1)
	l2 := c.Leader() // waits 20 s at most for the gate: half the report deadline
	r := c.Reconciliation(l2, l2.A.JM.Epoch(), "completed", 20*time.Second)
	if took := time.Duration(r.CollectedAt-r.StartedAt) * time.Millisecond; took >= deadline/2 {
		t.Fatalf("collection took %s, the report deadline is %s: the leader waited for the idle TM", took, deadline)
	}
	for _, rep := range r.Reports {
		if rep.TmId == idle.ID && rep.Outcome == "missing" {
			t.Fatalf("the idle TM was waited for until collection ended: %v", r.Reports)
		}
	}
	if r.Counts.KeptRunning != 3 || r.Counts.Missing != 0 || r.Counts.TmsMissing != 0 {
		t.Fatalf("reconciliation counts %v, want all 3 kept running", r.Counts)
	}
	after := c.WaitJob(id, "the job RUNNING", 20*time.Second, running)
	if changed := tc.Changed(before, tc.Attempts(after)); len(changed) != 0 {
		t.Fatalf("attempts changed across the failover: %v", changed)
	}
}
