package taskmanager

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// witness is a JobMaster follower as a TM sees it: it answers ClusterStatus naming the
// leader's address ("" during a leader gap).
type witness struct {
	pb.UnimplementedClientServiceServer
	addr string

	mu     sync.Mutex
	leader string
	epoch  uint64
	// hold, when set, makes ClusterStatus calls wait until it is closed; they then answer with
	// the leader and epoch they saw when they came in.
	hold chan struct{}
}

func startWitness(t *testing.T, leader string) *witness {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w := &witness{addr: l.Addr().String(), leader: leader, epoch: 1} // the leader's committed epoch
	s := grpc.NewServer()
	pb.RegisterClientServiceServer(s, w)
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return w
}

func (w *witness) ClusterStatus(context.Context, *pb.ClusterStatusRequest) (*pb.ClusterStatusResponse, error) {
	w.mu.Lock()
	if h := w.hold; h != nil {
		leader, epoch := w.leader, w.epoch
		w.mu.Unlock()
		<-h
		return &pb.ClusterStatusResponse{NodeId: "follower", LeaderGrpcAddress: leader, Epoch: epoch}, nil
	}
	defer w.mu.Unlock()
	return &pb.ClusterStatusResponse{NodeId: "follower", LeaderGrpcAddress: w.leader, Epoch: w.epoch}, nil
}

// TestFenceWhenCutOffFromALiveLeader: the leader stops answering this TM while a follower still
// names it as the established leader. The leader will declare the TM lost and redeploy its
// tasks, so the TM cancels them itself after FenceTimeout, well inside the grace.
func TestFenceWhenCutOffFromALiveLeader(t *testing.T) {
	jm := startJM(t)
	w := startWitness(t, jm.addr)
	tm := newTM(t, "tm1", jm, func(c *Config) {
		c.JobMasters = []string{w.addr}
		c.FenceTimeout = 300 * time.Millisecond
		c.ShutdownTimeout = 100 * time.Millisecond
	})
	submit(t, client(t, tm), 1, source("job", "src", 0, 1, "a", 0, unbounded))
	jm.waitState(t, "a", running)
	jm.srv.Stop() // the TM can no longer reach the leader; the follower still names it
	waitFor(t, 10*time.Second, "the TM to fence itself", func() (bool, string) {
		ti, _ := findTask(tm, "a")
		return ti.State == canceled && tm.FreeSlots() == 4, fmt.Sprintf("%+v free=%d", ti, tm.FreeSlots())
	})
}

// TestNoFenceDuringALeaderGap: the leader is gone and no JobMaster names another one (a leader
// gap): the TM keeps its tasks running past FenceTimeout, for the leader grace.
func TestNoFenceDuringALeaderGap(t *testing.T) {
	jm := startJM(t)
	w := startWitness(t, jm.addr)
	tm := newTM(t, "tm1", jm, func(c *Config) {
		c.JobMasters = []string{w.addr}
		c.FenceTimeout = 100 * time.Millisecond
	})
	submit(t, client(t, tm), 1, source("job", "src", 0, 1, "a", 0, unbounded))
	jm.waitState(t, "a", running)
	w.mu.Lock()
	w.leader = "" // the followers know no leader
	w.mu.Unlock()
	jm.srv.Stop()
	before := tm.fence.fenceChecks.Load()
	waitFor(t, 10*time.Second, "three fence checks after the fence timeout", func() (bool, string) {
		n := tm.fence.fenceChecks.Load() - before
		return n >= 3, fmt.Sprintf("%d checks", n)
	})
	if ti, _ := findTask(tm, "a"); ti.State != running {
		t.Fatalf("task stopped during a leader gap: %+v", ti)
	}
}

// TestFenceWhenANewLeaderCannotReachTheTM: a newer leader is named but never reaches this TM
// (it will fail the TM's tasks after its report deadline): the TM fences FenceTimeout after it
// first saw that leader named.
func TestFenceWhenANewLeaderCannotReachTheTM(t *testing.T) {
	jm := startJM(t)
	w := startWitness(t, jm.addr)
	tm := newTM(t, "tm1", jm, func(c *Config) {
		c.JobMasters = []string{w.addr}
		c.FenceTimeout = 200 * time.Millisecond
		c.ShutdownTimeout = 100 * time.Millisecond
	})
	submit(t, client(t, tm), 1, source("job", "src", 0, 1, "a", 0, unbounded))
	jm.waitState(t, "a", running)
	jm.srv.Stop()
	w.mu.Lock()
	w.leader, w.epoch = "127.0.0.1:1", 5 // a new leader this TM cannot reach
	w.mu.Unlock()
	waitFor(t, 10*time.Second, "the TM to fence itself", func() (bool, string) {
		ti, _ := findTask(tm, "a")
		return ti.State == canceled, fmt.Sprintf("%+v checks=%d", ti, tm.fence.fenceChecks.Load())
	})
}

// TestNoFenceWhenALeaderReachesTheTMDuringTheCheck: the TM, cut off for FenceTimeout, asks a
// follower whether a live leader exists; while it waits for the answer a new leader reaches it
// (its RequestReport). The follower's late answer names the old leader, but the TM has just
// been reached, so it must not fence. Before the fix it cancelled every task here, right after
// reporting them to the new leader.
func TestNoFenceWhenALeaderReachesTheTMDuringTheCheck(t *testing.T) {
	jm := startJM(t)
	// A pool of this TM alone: once the new leader's call was its last contact, its own answer
	// confirms the outage that follows (without a pool it would fence, unable to confirm one).
	jm.pool = &pb.PoolView{Version: 1, Revision: 1, Peers: []*pb.PoolPeer{{TmId: "tm1"}}}
	w := startWitness(t, jm.addr)
	tm := newTM(t, "tm1", jm, func(c *Config) {
		c.JobMasters = []string{w.addr}
		c.FenceTimeout = 2 * time.Second // also bounds the check's wait for the follower
		c.ShutdownTimeout = 100 * time.Millisecond
	})
	cl := client(t, tm)
	submit(t, cl, 1, source("job", "src", 0, 1, "a", 0, unbounded))
	jm.waitState(t, "a", running)
	// The leader has the update; the TM must also have its answer before the leader goes: a
	// message still in the outbox would go to the witness once the TM takes it for the leader,
	// which serves no JobMasterService (on a loaded machine the answer was lost to the stop).
	waitFor(t, 10*time.Second, "the TM's outbox empty", func() (bool, string) {
		return tm.outbox.len() == 0, fmt.Sprintf("%d messages", tm.outbox.len())
	})
	hold := make(chan struct{})
	w.mu.Lock()
	w.hold = hold
	w.mu.Unlock()
	jm.srv.Stop()
	before := tm.fence.fenceChecks.Load()
	waitFor(t, 10*time.Second, "a fence check asking the follower", func() (bool, string) {
		return tm.fence.fenceChecks.Load() > before, fmt.Sprintf("%d checks", tm.fence.fenceChecks.Load()-before)
	})
	// The new leader reaches the TM while the check waits for the follower.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := cl.RequestReport(ctx, &pb.RequestReportRequest{Epoch: tm.Epoch() + 1, LeaderId: "jm2", LeaderGrpcAddress: w.addr})
	if err != nil {
		t.Fatal(err)
	}
	for {
		c, err := stream.Recv()
		if err != nil {
			t.Fatalf("report: %v", err)
		}
		if c.Last {
			break
		}
	}
	w.mu.Lock()
	w.hold, w.leader = nil, "" // later answers: no leader known
	w.mu.Unlock()
	close(hold)
	waitFor(t, 10*time.Second, "two more fence checks", func() (bool, string) {
		return tm.fence.fenceChecks.Load()-before >= 3, fmt.Sprintf("%d checks", tm.fence.fenceChecks.Load()-before)
	})
	if ti, _ := findTask(tm, "a"); ti.State != running {
		t.Fatalf("the TM fenced although a leader reached it during the check: %+v", ti)
	}
}

// TestNoFenceWhileTheNamedLeaderAnswers: the leader this TM met refuses its heartbeats (it lost
// and regained Raft leadership and has not established its new term yet) while it is still
// named with the TM's epoch. The TM can reach it, so it is not cut off and must not fence; the
// leader reaches it with RequestReport once established. Before the fix the TM cancelled every
// task when this window outlasted its fence timeout on a busy machine.
func TestNoFenceWhileTheNamedLeaderAnswers(t *testing.T) {
	jm := startJM(t)
	tm := newTM(t, "tm1", jm, func(c *Config) {
		c.JobMasters = []string{jm.addr}
		c.FenceTimeout = 200 * time.Millisecond
		c.ShutdownTimeout = 100 * time.Millisecond
	})
	submit(t, client(t, tm), 1, source("job", "src", 0, 1, "a", 0, unbounded))
	jm.waitState(t, "a", running)
	jm.mu.Lock()
	jm.notLeader = true
	jm.mu.Unlock()
	before := tm.fence.fenceChecks.Load()
	waitFor(t, 10*time.Second, "three fence checks while the named leader refuses heartbeats", func() (bool, string) {
		n := tm.fence.fenceChecks.Load() - before
		return n >= 3, fmt.Sprintf("%d checks", n)
	})
	if ti, _ := findTask(tm, "a"); ti.State != running {
		t.Fatalf("the TM fenced although the named leader answers it: %+v", ti)
	}
}

// TestFenceChecksUseTheTimeoutInForce: a TM started with its own fence timeout off (0) fences
// with the one its leader sends in the registration answer, so its checks that ask the
// JobMasters for the leader are bounded by the timeout in force, not by the TM's own 0 (an
// expired deadline: no check could ever name the leader it is cut off from).
func TestFenceChecksUseTheTimeoutInForce(t *testing.T) {
	jm := startJM(t)
	jm.rule = &pb.RegisterTaskManagerResponse{FenceTimeoutMs: 300}
	w := startWitness(t, jm.addr)
	tm := newTM(t, "tm1", jm, func(c *Config) {
		c.JobMasters = []string{w.addr}
		c.FenceTimeout = 0
	})
	waitFor(t, 10*time.Second, "the leader's fence timeout adopted", func() (bool, string) {
		tm.fence.mu.Lock()
		defer tm.fence.mu.Unlock()
		return tm.fence.fenceTimeoutLocked() == 300*time.Millisecond, tm.fence.fenceTimeoutLocked().String()
	})
	if addr, _ := tm.fence.establishedLeader(context.Background()); addr != jm.addr {
		t.Fatalf("establishedLeader = %q, want the leader the witness names, %q", addr, jm.addr)
	}
	if err := tm.fence.probe(context.Background(), w.addr); err != nil {
		t.Fatalf("probe of a JobMaster that answers: %v", err)
	}
}
