package jobmaster_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/testkit/testcluster"
)

// TestGossipDeathContradictedByHeartbeatsRestartsNothing: gossip marks a live TaskManager dead
// (memberlist does this to a busy member that misses its probes), but the TM keeps
// heartbeating to the leader. Direct contact wins: the TM is not declared lost and no task
// restarts. Before the fix the leader failed every execution on the TM at its next tick.
func TestGossipDeathContradictedByHeartbeatsRestartsNothing(t *testing.T) {
	c := newCluster(t)
	id := c.Submit(testcluster.StreamingChain("gossip-false-death", 3, 100, 0))
	rec := waitAllRunning(t, c, id)
	before := testcluster.Attempts(rec)
	l := c.Leader()
	victim := before["map[0]"].TM

	// What the gossip feed does on a memberlist dead event.
	l.A.JM.Registry().SetGossip(victim, "dead")
	marked, _ := l.A.JM.Registry().Get(victim)
	iv := l.A.JM.Config().HeartbeatInterval
	testcluster.WaitFor(t, 20*time.Second, fmt.Sprintf("%s heartbeating for three intervals after gossip called it dead", victim), func() (bool, string) {
		tm, _ := l.A.JM.Registry().Get(victim)
		if tm.Lost {
			t.Fatalf("%s declared lost although it heartbeats: %+v", victim, tm)
		}
		return tm.LastSeen.Sub(marked.GossipAt) > 3*iv, fmt.Sprintf("last seen %s after the dead mark", tm.LastSeen.Sub(marked.GossipAt))
	})
	if tm, _ := l.A.JM.Registry().Get(victim); tm.Lost || tm.GoneByGossip() {
		t.Fatalf("%s lost=%v gone=%v after heartbeats contradicted gossip", victim, tm.Lost, tm.GoneByGossip())
	}
	if changed := testcluster.Changed(before, testcluster.Attempts(c.Job(id))); len(changed) != 0 {
		t.Fatalf("attempts changed after a false gossip death: %v", changed)
	}
}
