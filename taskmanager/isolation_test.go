package taskmanager

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// poolRig is three real TMs over loopback, each with one running task and each registered with
// its own stand-in leader (all of the same epoch and pool), so that one TM's leader contact can
// be cut while the others keep theirs.
type poolRig struct {
	jms []*testJM
	tms []*TaskManager
}

const (
	rigFence    = 300 * time.Millisecond
	rigInterval = 50 * time.Millisecond
	rigTimeout  = 300 * time.Millisecond
)

// newPoolRig starts the TMs; addrs, when set, changes the pool addresses one TM is given
// (index -> the view it gets), to cut it off from its peers.
func newPoolRig(t *testing.T, views map[int]*pb.PoolView) *poolRig {
	t.Helper()
	r := &poolRig{}
	var peers []*pb.PoolPeer
	for i := range 3 {
		jm := startJM(t)
		jm.rule = &pb.RegisterTaskManagerResponse{FenceTimeoutMs: rigFence.Milliseconds(), PoolQueryIntervalMs: rigInterval.Milliseconds(), PoolQueryTimeoutMs: rigTimeout.Milliseconds()}
		tm := newTM(t, fmt.Sprintf("tm%d", i+1), jm, func(c *Config) {
			c.JobMasters = []string{jm.addr}
			c.FenceTimeout = time.Hour // the leader's value must win
			c.LeaderGrace = 10 * time.Minute
			c.ShutdownTimeout = 100 * time.Millisecond
		})
		r.jms, r.tms = append(r.jms, jm), append(r.tms, tm)
		peers = append(peers, &pb.PoolPeer{TmId: tm.cfg.ID, GrpcAddress: tm.cfg.AdvertiseGRPC})
	}
	for i, jm := range r.jms {
		v := &pb.PoolView{Version: 1, Revision: 1, Peers: peers}
		if views[i] != nil {
			v = views[i]
		}
		jm.mu.Lock()
		jm.pool = v
		jm.mu.Unlock()
	}
	for i, tm := range r.tms {
		attempt := fmt.Sprintf("a%d", i+1)
		submit(t, client(t, tm), 1, source("job", "src", int32(i), 3, attempt, 0, unbounded))
		r.jms[i].waitState(t, attempt, running)
	}
	for _, tm := range r.tms {
		waitFor(t, 10*time.Second, tm.cfg.ID+" to learn the pool and the leader's fence timeout", func() (bool, string) {
			tm.fence.mu.Lock()
			defer tm.fence.mu.Unlock()
			return tm.fence.pool.version == 1 && tm.fence.fenceTimeoutLocked() == rigFence, fmt.Sprintf("pool version %d, fence %v", tm.fence.pool.version, tm.fence.fenceTimeoutLocked())
		})
	}
	return r
}

func (r *poolRig) state(i int) pb.ExecutionState {
	ti, _ := findTask(r.tms[i], fmt.Sprintf("a%d", i+1))
	return ti.State
}

func (r *poolRig) states() string {
	var out []string
	for i, tm := range r.tms {
		out = append(out, fmt.Sprintf("%s:%v checks=%d", tm.cfg.ID, r.state(i), tm.fence.poolChecks.Load()))
	}
	return strings.Join(out, " ")
}

// TestTasksSurviveAJobMasterOutageWithThePool: every leader is gone and every TM can still
// reach the others. Each asks the pool past its fence timeout, finds a majority with no leader
// contact either — a JobMaster outage — and keeps its task.
func TestTasksSurviveAJobMasterOutageWithThePool(t *testing.T) {
	r := newPoolRig(t, nil)
	for _, jm := range r.jms {
		jm.srv.Stop()
	}
	waitFor(t, 20*time.Second, "five pool checks on every TM", func() (bool, string) {
		for _, tm := range r.tms {
			if tm.fence.poolChecks.Load() < 5 {
				return false, r.states()
			}
		}
		return true, ""
	})
	for i := range r.tms {
		if st := r.state(i); st != running {
			t.Fatalf("a task stopped during a JobMaster outage: %s", r.states())
		}
	}
}

// TestTMCutOffFromTheLeaderFencesThroughThePool: one TM loses its leader (and reaches no
// JobMaster at all) while the other two keep theirs. Its pool query finds members that reached
// the leader of its own epoch: it cancels its task. The others keep theirs.
func TestTMCutOffFromTheLeaderFencesThroughThePool(t *testing.T) {
	r := newPoolRig(t, nil)
	r.jms[0].srv.Stop()
	waitFor(t, 20*time.Second, "tm1 to fence itself", func() (bool, string) {
		return r.state(0) == canceled, r.states()
	})
	if r.state(1) != running || r.state(2) != running {
		t.Fatalf("the TMs that kept their leader stopped: %s", r.states())
	}
	if why := cancelNote(r.tms[0], "a1"); !strings.Contains(why, "reached the leader of epoch 1") {
		t.Fatalf("tm1's cause %q does not name the pool member that reached the leader", why)
	}
}

// TestTMThatReachesNothingFences: one TM loses its leader and cannot reach any other member of
// the pool (its view has their addresses wrong, as a partition would): no majority confirms an
// outage, so it cancels its task.
func TestTMThatReachesNothingFences(t *testing.T) {
	dead := &pb.PoolView{Version: 1, Revision: 1, Peers: []*pb.PoolPeer{{TmId: "tm1", GrpcAddress: "127.0.0.1:1"}, {TmId: "tm2", GrpcAddress: "127.0.0.1:1"}, {TmId: "tm3", GrpcAddress: "127.0.0.1:1"}}}
	r := newPoolRig(t, map[int]*pb.PoolView{0: dead})
	for _, jm := range r.jms {
		jm.srv.Stop() // an outage for the others: they keep running
	}
	waitFor(t, 20*time.Second, "tm1 to fence itself", func() (bool, string) {
		return r.state(0) == canceled, r.states()
	})
	if why := cancelNote(r.tms[0], "a1"); !strings.Contains(why, "only 1 of the 3 pool members confirm a JobMaster outage") {
		t.Fatalf("tm1's cause %q", why)
	}
	waitFor(t, 20*time.Second, "five pool checks on tm2 and tm3", func() (bool, string) {
		return r.tms[1].fence.poolChecks.Load() >= 5 && r.tms[2].fence.poolChecks.Load() >= 5, r.states()
	})
	if r.state(1) != running || r.state(2) != running {
		t.Fatalf("tm2 and tm3 see an outage and must keep running: %s", r.states())
	}
}

// TestNewerLeaderGetsTheFenceTimeoutFromItsFirstContact: after an outage a new leader (epoch 2)
// reaches tm2 and tm3 but never tm1. tm1 learns of it from the pool and keeps its task for the
// fence timeout counted from that leader's first contact, then cancels it.
func TestNewerLeaderGetsTheFenceTimeoutFromItsFirstContact(t *testing.T) {
	r := newPoolRig(t, nil)
	r.jms[0].srv.Stop()
	for _, jm := range r.jms[1:] {
		jm.setEpoch(2) // a new term reaches tm2 and tm3 (their next heartbeat adopts it)
	}
	waitFor(t, 20*time.Second, "tm1 to fence itself", func() (bool, string) {
		return r.state(0) == canceled, r.states()
	})
	if why := cancelNote(r.tms[0], "a1"); !strings.Contains(why, "the leader of epoch 2 reached pool members") {
		t.Fatalf("tm1's cause %q", why)
	}
}

// cancelNote is why the TM cancelled the attempt ("" when it did not).
func cancelNote(tm *TaskManager, attempt string) string {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	if t := tm.table.tasks[attempt]; t != nil {
		return t.cancelNote
	}
	return ""
}
