package testcluster_test

import (
	"fmt"
	"testing"
	"time"

	tc "github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestSimTMsThatRegisterFollowANewLeader: simulated TMs started with the JobMasters' addresses
// register with a three-replica cluster, get a job of 12 executions deployed through
// SubmitTasks and report them RUNNING; the leader is killed, and the new leader's
// reconciliation keeps every execution with its attempt (none cancelled), after which every
// TM has registered with it.
func TestSimTMsThatRegisterFollowANewLeader(t *testing.T) {
	c := tc.New(t, tc.Options{JMs: 3})
	var addrs []string
	for _, j := range c.JMs {
		addrs = append(addrs, j.GRPCAddr)
	}
	sims := tc.StartSimTMs(t, 3, tc.SimOptions{JobMasters: addrs, Slots: 4})
	id := c.Submit(tc.ForwardChain("live", 3, 4))
	l1 := c.Leader()
	tc.WaitFor(t, 30*time.Second, "12 executions RUNNING", func() (bool, string) {
		running, total := tc.RunningCount(l1, id)
		return total == 12 && running == 12, fmt.Sprintf("%d of %d RUNNING", running, total)
	})
	rec, _ := l1.A.State.Job(id)
	before := tc.Attempts(rec)

	e1 := l1.A.JM.Epoch()
	c.KillJM(l1)
	r := c.CompletedAfter(e1, 30*time.Second)
	if got := r.GetCounts(); got.GetKeptRunning() != 12 || got.GetReports() != 3 {
		t.Fatalf("reconciliation at epoch %d: %v, want 12 kept running from 3 reports", r.Epoch, got)
	}
	l2 := c.Leader()
	rec, _ = l2.A.State.Job(id)
	if changed := tc.Changed(before, tc.Attempts(rec)); len(changed) > 0 {
		t.Fatalf("attempts changed: %v", changed)
	}
	tc.WaitFor(t, 30*time.Second, "every simulated TM registered with "+l2.ID, func() (bool, string) {
		for _, s := range sims {
			_, leader, epoch, registered := s.Leader()
			if leader != l2.ID || epoch != l2.A.JM.Epoch() || !registered {
				return false, fmt.Sprintf("%s follows %q at epoch %d, registered %v", s.ID, leader, epoch, registered)
			}
		}
		return true, ""
	})
	var held []int
	for _, s := range sims {
		n, running := s.Tasks()
		if n != running || s.Cancels.Load() != 0 {
			t.Fatalf("%s holds %d tasks, %d RUNNING, %d cancels", s.ID, n, running, s.Cancels.Load())
		}
		held = append(held, n)
	}
	if sum := held[0] + held[1] + held[2]; sum != 12 {
		t.Fatalf("the TMs hold %v tasks, want 12 in all", held)
	}
}

// TestSimTMsHoldDeployedAttemptsThroughAFailover: simulated TMs that never call a JobMaster
// hold the 12 executions DeployOnSims committed on them; the leader is killed, and the new
// leader's reconciliation keeps every one from their reports. The TM that answers as a
// TaskManager does answers as expected; the one started with WholeReports lists its 6
// executions. Neither is asked to cancel, and both adopt the new epoch.
func TestSimTMsHoldDeployedAttemptsThroughAFailover(t *testing.T) {
	c := tc.New(t, tc.Options{JMs: 3})
	answer := tc.StartSimTMs(t, 1, tc.SimOptions{})[0]
	whole := tc.StartSimTMs(t, 1, tc.SimOptions{WholeReports: true, Prefix: "whole"})[0]
	sims := []*tc.SimTM{answer, whole}
	id := c.Submit(tc.ForwardChain("held", 3, 4))
	l1 := c.Leader()
	tc.WaitFor(t, 30*time.Second, "the job RUNNING (waiting for slots)", func() (bool, string) {
		st := pb.JobStatus_JOB_STATUS_UNSPECIFIED
		l1.A.State.WithJob(id, func(rec *pb.JobRecord) { st = rec.Status })
		return st == pb.JobStatus_JOB_STATUS_RUNNING, st.String()
	})
	if n := c.DeployOnSims(l1, id, sims, 0); n != 12 {
		t.Fatalf("deployed %d attempts, want 12", n)
	}
	if running, total := tc.RunningCount(l1, id); running != 12 || total != 12 {
		t.Fatalf("%d of %d RUNNING after the deployment, want 12", running, total)
	}

	e1 := l1.A.JM.Epoch()
	c.KillJM(l1)
	r := c.CompletedAfter(e1, 30*time.Second)
	if got := r.GetCounts(); got.GetKeptRunning() != 12 || got.GetReports() != 2 || got.GetCanceled() != 0 {
		t.Fatalf("reconciliation at epoch %d: %v, want 12 kept running from 2 reports", r.Epoch, got)
	}
	for _, rep := range r.GetReports() {
		if rep.GetOutcome() != "reported" || rep.GetExecutions() != 6 || rep.GetAsExpected() != (rep.GetTmId() == answer.ID) {
			t.Errorf("report of %s: %v; want 6 executions, as expected only from %s", rep.GetTmId(), rep, answer.ID)
		}
	}
	for _, s := range sims {
		held, running := s.Tasks()
		if s.Reports.Load() < 1 || s.Cancels.Load() != 0 || s.Epoch() != r.GetEpoch() || held != 6 || running != 6 {
			t.Errorf("%s: %d reports, %d cancels, epoch %d (want %d), holds %d tasks, %d RUNNING",
				s.ID, s.Reports.Load(), s.Cancels.Load(), s.Epoch(), r.GetEpoch(), held, running)
		}
	}
	if whole.MaxChunkBytes.Load() <= answer.MaxChunkBytes.Load() {
		t.Errorf("largest chunk: %d bytes from %s (whole reports), %d from %s (as expected)",
			whole.MaxChunkBytes.Load(), whole.ID, answer.MaxChunkBytes.Load(), answer.ID)
	}
}
