package testcluster_test

import (
	"fmt"
	"testing"
	"time"

	tc "github.com/jmcluster/jmcluster/testkit/testcluster"
)

// TestLiveSimsDeployAndFollowANewLeader: simulated TMs that only speak the protocol register
// with a three-replica cluster, get a job of 12 executions deployed through SubmitTasks and
// report them RUNNING; the leader is killed, and the new leader's reconciliation keeps every
// execution with its attempt (none cancelled), after which every TM has registered with it.
func TestLiveSimsDeployAndFollowANewLeader(t *testing.T) {
	c := tc.New(t, tc.Options{JMs: 3})
	var addrs []string
	for _, j := range c.JMs {
		addrs = append(addrs, j.GRPCAddr)
	}
	sims := tc.StartLiveSims(t, 3, 4, addrs)
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
