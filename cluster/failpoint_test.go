package cluster

import (
	"fmt"
	"testing"

	"github.com/jmcluster/jmcluster/internal/failpoint"
)

// TestBeforeLeaderStopKeepsTheDeposedLeadersWorkRunning: with pause(before-leader-stop) a
// leader that Raft deposed keeps its leader work (the context EstablishLeadership got) running
// until the hook is released; another replica leads meanwhile. This is the window the fault
// suite's disable-fencing build uses: what the deposed leader still sends, the TaskManagers'
// fencing must refuse.
func TestBeforeLeaderStopKeepsTheDeposedLeadersWorkRunning(t *testing.T) {
	nodes := startStatic(t, 3, nil)
	old := establishedLeader(t, nodes, 1)
	ctx := old.hooks.leaderCtx()
	failpoint.Set(t, "pause(before-leader-stop)")
	if err := old.raft.LeadershipTransfer().Error(); err != nil {
		t.Fatalf("leadership transfer: %v", err)
	}
	// The hook is the process's: on a loaded machine the next leader may lose its leadership
	// too and wait beside the old one, so at least one waits (and old is no longer leader).
	waitFor(t, "the deposed leader paused in before-leader-stop", func() (bool, string) {
		return failpoint.Waiting(failpoint.BeforeLeaderStop) >= 1 && !old.IsLeader(),
			fmt.Sprintf("waiting %d, state %s", failpoint.Waiting(failpoint.BeforeLeaderStop), old.State())
	})
	next := establishedLeader(t, nodes, 2)
	if next == old {
		t.Fatalf("%s leads again", old.ID())
	}
	if ctx.Err() != nil || old.IsLeader() {
		t.Fatalf("while paused: leader work context %v, old node leader %v", ctx.Err(), old.IsLeader())
	}
	failpoint.Release(failpoint.BeforeLeaderStop)
	waitFor(t, "the deposed leader's work stopped", func() (bool, string) {
		_, revoked := old.hooks.snapshot()
		return ctx.Err() != nil && revoked == 1, fmt.Sprintf("context %v, revoked %d", ctx.Err(), revoked)
	})
}
