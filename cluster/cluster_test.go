package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/transport/pb"
)

func TestStaticPeersElectLeaderWithEpochOne(t *testing.T) {
	nodes := startStatic(t, 3, nil)
	leader := establishedLeader(t, nodes, 1)
	if got := leader.Epoch(); got != 1 {
		t.Fatalf("leader epoch = %d, want 1", got)
	}
	waitFor(t, "hook called with epoch 1", func() (bool, string) {
		est, _ := leader.hooks.snapshot()
		return slices.Equal(est, []uint64{1}), fmt.Sprint(est)
	})
	waitFor(t, "epoch 1 committed on every node", func() (bool, string) {
		seen := ""
		ok := true
		for _, tn := range nodes {
			e := tn.fsm.Epoch()
			seen += fmt.Sprintf("%s=%d/%s ", tn.ID(), e.GetEpoch(), e.GetLeaderId())
			ok = ok && e.GetEpoch() == 1 && e.GetLeaderId() == leader.ID()
		}
		return ok, seen
	})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	// Writes go through the leader; a domain error comes back in Result.Err.
	mustApply(t, leader.Node, "a")
	res, err := applyValue(ctx, leader.Node, "reject")
	if err != nil || res.Err == nil || res.Index == 0 {
		t.Fatalf("rejected command: res=%+v err=%v, want a Result with Err and Index", res, err)
	}
	waitValues(t, nodes, []string{"a"})

	for _, f := range followers(nodes, leader) {
		if _, err := applyValue(ctx, f.Node, "b"); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("apply on follower %s: err = %v, want ErrNotLeader", f.ID(), err)
		}
		if err := f.VerifyLeader(ctx); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("verify leader on follower %s: err = %v, want ErrNotLeader", f.ID(), err)
		}
		id, addr, err := f.LeaderGRPCAddr(ctx)
		if err != nil || id != leader.ID() || addr != leader.GRPCAddr() {
			t.Fatalf("LeaderGRPCAddr on %s = %q %q %v, want %q %q", f.ID(), id, addr, err, leader.ID(), leader.GRPCAddr())
		}
		conn, lid, err := f.LeaderConn(ctx)
		if err != nil || lid != leader.ID() {
			t.Fatalf("LeaderConn on %s = %q %v", f.ID(), lid, err)
		}
		info, err := pb.NewOperatorServiceClient(conn).NodeInfo(ctx, &pb.NodeInfoRequest{})
		if err != nil || info.GetId() != leader.ID() || !info.GetHasState() {
			t.Fatalf("NodeInfo through the leader connection = %v %v", info, err)
		}
		again, _, err := f.LeaderConn(ctx)
		if err != nil || again != conn {
			t.Fatalf("LeaderConn not cached: %p vs %p (%v)", again, conn, err)
		}
	}
	if err := leader.VerifyLeader(ctx); err != nil {
		t.Fatalf("verify leader on leader: %v", err)
	}
	if err := leader.Barrier(ctx); err != nil {
		t.Fatalf("barrier: %v", err)
	}

	peers, err := nodes[0].Peers()
	if err != nil {
		t.Fatal(err)
	}
	leaders := 0
	for _, p := range peers {
		if p.GetSuffrage() != "voter" || p.GetGrpcAddress() == "" {
			t.Fatalf("peer %v: want a voter with a gRPC address", p)
		}
		if p.GetLeader() {
			leaders++
			if p.GetId() != leader.ID() {
				t.Fatalf("peer %s flagged leader, want %s", p.GetId(), leader.ID())
			}
		}
	}
	if len(peers) != 3 || leaders != 1 {
		t.Fatalf("peers = %v, want 3 with one leader", peers)
	}
	if st := leader.Stats(); st["epoch"] != "1" || st["established"] != "true" || st["state"] != "Leader" {
		t.Fatalf("leader stats: epoch=%s established=%s state=%s", st["epoch"], st["established"], st["state"])
	}

	// A graceful shutdown revokes, hands leadership over, and the next leader fences epoch 2.
	if err := leader.Shutdown(); err != nil {
		t.Fatalf("shutdown leader: %v", err)
	}
	if _, revoked := leader.hooks.snapshot(); revoked != 1 {
		t.Fatalf("leader revoked %d times on shutdown, want 1", revoked)
	}
	next := establishedLeader(t, followers(nodes, leader), 2)
	if next.Epoch() != 2 {
		t.Fatalf("next leader epoch = %d, want 2", next.Epoch())
	}
}

func TestKillLeaderNewEpochAndRestartCatchesUp(t *testing.T) {
	nodes := startStatic(t, 3, nil)
	old := establishedLeader(t, nodes, 1)
	mustApply(t, old.Node, "before")
	waitValues(t, nodes, []string{"before"})

	if err := old.Kill(); err != nil {
		t.Fatalf("kill %s: %v", old.ID(), err)
	}
	old.srv.Stop()
	if _, revoked := old.hooks.snapshot(); revoked != 1 {
		t.Fatalf("killed leader revoked %d times, want 1", revoked)
	}
	alive := followers(nodes, old)
	leader := establishedLeader(t, alive, 2)
	if leader.Epoch() <= 1 {
		t.Fatalf("new leader epoch %d, want > 1", leader.Epoch())
	}
	mustApply(t, leader.Node, "after")
	waitValues(t, alive, []string{"before", "after"})

	// Restart the killed node on the same addresses and data dir; it must not bootstrap again
	// and must catch up from the leader.
	cfg := old.cfg
	cfg.RaftBindAddr = old.RaftAddr()
	restarted := newTestNode(t, cfg, listen(t, old.GRPCAddr()))
	if !restarted.Info().GetHasState() {
		t.Fatal("restarted node has no raft state")
	}
	if err := restarted.Start(context.Background()); err != nil {
		t.Fatalf("restart: %v", err)
	}
	all := append(alive, restarted)
	mustApply(t, leader.Node, "rejoined")
	waitValues(t, all, []string{"before", "after", "rejoined"})
	waitFor(t, "restarted node sees the new epoch", func() (bool, string) {
		e := restarted.fsm.Epoch()
		return e.GetEpoch() == leader.Epoch() && e.GetLeaderId() == leader.ID(), fmt.Sprint(e)
	})
	// Raft counts an entry applied once the FSM's apply of its batch returned: the values can
	// be seen a moment before the index moves.
	waitFor(t, "restarted node's applied index above 0", func() (bool, string) {
		got := restarted.AppliedIndex()
		return got > 0, fmt.Sprint(got)
	})
}

func TestHookErrorStepsDown(t *testing.T) {
	var failed atomic.Bool
	failFirst := func(uint64) error {
		if failed.CompareAndSwap(false, true) {
			return errors.New("hook refuses")
		}
		return nil
	}
	nodes := startStatic(t, 3, func(int) *recHooks { return &recHooks{fail: failFirst} })

	var first *testNode
	waitFor(t, "a failed hook", func() (bool, string) {
		for _, tn := range nodes {
			if est, _ := tn.hooks.snapshot(); len(est) > 0 && est[0] == 1 {
				first = tn
				return true, ""
			}
		}
		return false, "no hook call with epoch 1"
	})
	leader := establishedLeader(t, nodes, 2)
	if leader == first {
		t.Fatalf("%s failed its hook but leads again at epoch %d", first.ID(), leader.Epoch())
	}
	waitFor(t, "the failed leader revoked", func() (bool, string) {
		_, revoked := first.hooks.snapshot()
		return revoked == 1 && !first.Established() && !first.IsLeader(),
			fmt.Sprintf("revoked=%d established=%v state=%s", revoked, first.Established(), first.State())
	})
	est, _ := leader.hooks.snapshot()
	if len(est) != 1 || est[0] != leader.Epoch() {
		t.Fatalf("new leader hooks = %v, want [%d]", est, leader.Epoch())
	}
}

func TestSingleNodeRestartAdvancesEpoch(t *testing.T) {
	cfg := nodeConfig(t, "solo")
	cfg.BootstrapExpect = 1
	tn := newTestNode(t, cfg, listen(t, "127.0.0.1:0"))
	if tn.Info().GetHasState() {
		t.Fatal("fresh node reports raft state")
	}
	if err := tn.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := tn.Start(context.Background()); err == nil {
		t.Fatal("second Start succeeded")
	}
	establishedLeader(t, []*testNode{tn}, 1)
	mustApply(t, tn.Node, "x")
	id, index, err := tn.Snapshot()
	if err != nil || id == "" || index == 0 {
		t.Fatalf("snapshot = %q %d %v", id, index, err)
	}
	mustApply(t, tn.Node, "y")
	if err := tn.Shutdown(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if err := tn.Shutdown(); err != nil {
		t.Fatalf("second shutdown: %v", err)
	}
	tn.srv.Stop()
	if _, err := applyValue(context.Background(), tn.Node, "z"); !errors.Is(err, ErrShutdown) {
		t.Fatalf("apply after shutdown: %v, want ErrShutdown", err)
	}

	cfg = tn.cfg
	cfg.RaftBindAddr = tn.RaftAddr()
	again := newTestNode(t, cfg, listen(t, "127.0.0.1:0"))
	if err := again.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	leader := establishedLeader(t, []*testNode{again}, 2)
	if leader.Epoch() != 2 {
		t.Fatalf("epoch after restart = %d, want 2", leader.Epoch())
	}
	waitValues(t, []*testNode{again}, []string{"x", "y"})
}
