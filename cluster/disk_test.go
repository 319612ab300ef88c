package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/jmcluster/jmcluster/internal/failpoint"
)

// TestDiskFaultsNeverAcknowledgeWithoutPersistence: three replicas on real bolt files take
// writes while their disks are slow, then fail every write before it is made, then make every
// write and report it failed. A write acknowledged to its client must survive killing every
// replica and restarting them from their data dirs; a failing disk must never acknowledge a
// write (its client gets an error, and the outcome of such a write is unknown: it may or may
// not be there after the restart); nothing committed before the faults is lost.
//
// hashicorp/raft's default timings, not the fast test ones: with a 100 ms leader lease a loaded
// machine (a slow disk write on top of CPU starvation) lost the lease during the slow-disk
// writes, which then failed as "leadership lost", not for the disk.
func TestDiskFaultsNeverAcknowledgeWithoutPersistence(t *testing.T) {
	nodes := startStaticWith(t, 3, nil, func(c *Config) {
		d := DefaultConfig()
		c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = d.HeartbeatTimeout, d.ElectionTimeout, d.LeaderLeaseTimeout
	})
	leader := establishedLeader(t, nodes, 1)
	mustApply(t, leader.Node, "before")
	waitValues(t, nodes, []string{"before"})

	acked := []string{"before"}
	var unacked []string
	for _, fault := range []struct {
		spec     string
		writes   int
		ackedAll bool // every write must succeed (a slow disk), else none may
	}{
		{"pause(disk-write)=30ms", 5, true},
		{"disk-fail-before-write", 3, false},
		{"disk-fail-after-write", 3, false},
	} {
		// A leader that commits, before the fault.
		ready := "ready-for-" + fault.spec
		waitFor(t, "a leader that commits "+ready, func() (bool, string) {
			leader = establishedLeader(t, nodes, 1)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			res, err := applyValue(ctx, leader.Node, ready)
			if err == nil && res.Err != nil {
				err = res.Err
			}
			if err != nil {
				return false, fmt.Sprintf("%s: %v", leader.ID(), err)
			}
			return true, ""
		})
		acked = append(acked, ready)
		if err := failpoint.Configure(fault.spec); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < fault.writes; i++ {
			v := fmt.Sprintf("%s-%d", strings.TrimPrefix(strings.SplitN(fault.spec, "=", 2)[0], "pause("), i)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			res, err := applyValue(ctx, leader.Node, v)
			cancel()
			if err == nil && res.Err != nil {
				err = res.Err
			}
			switch {
			case err == nil && !fault.ackedAll:
				t.Fatalf("%s: write %q acknowledged by a disk that fails every write", fault.spec, v)
			case err != nil && fault.ackedAll:
				t.Fatalf("%s: write %q failed on a slow but working disk: %v", fault.spec, v, err)
			case err == nil:
				acked = append(acked, v)
			default:
				t.Logf("%s: %q refused: %v", fault.spec, v, err)
				unacked = append(unacked, v)
			}
		}
		failpoint.Reset()
	}

	restarted := restartAll(t, nodes)
	leader = establishedLeader(t, restarted, 2)
	mustApply(t, leader.Node, "after")
	waitFor(t, "every acknowledged write on every restarted replica, in order", func() (bool, string) {
		var seen []string
		ok := true
		for _, r := range restarted {
			got := r.fsm.Values()
			seen = append(seen, fmt.Sprintf("%s=%v", r.ID(), got))
			// The acknowledged writes in their order, the refused ones possibly among them.
			var kept []string
			for _, v := range got {
				if !slices.Contains(unacked, v) {
					kept = append(kept, v)
				}
			}
			ok = ok && slices.Equal(kept, append(slices.Clone(acked), "after"))
		}
		return ok, strings.Join(seen, " ")
	})
}

// currentLeader waits a few election timeouts for an established leader and returns it, or nil.
func currentLeader(nodes []*testNode) *testNode {
	deadline := time.Now().Add(5 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		for _, tn := range nodes {
			if !tn.closed.Load() && tn.Established() {
				return tn
			}
		}
		<-tick.C
	}
	return nil
}

// restartAll kills every replica at once and restarts each from its data dir on the same
// addresses.
func restartAll(t *testing.T, nodes []*testNode) []*testNode {
	t.Helper()
	var restarted []*testNode
	for _, tn := range nodes {
		tn.stop()
	}
	for _, tn := range nodes {
		cfg := tn.cfg
		cfg.RaftBindAddr = tn.RaftAddr()
		r := newTestNode(t, cfg, listen(t, tn.GRPCAddr()))
		r.setPeers(tn.cfg.Peers)
		restarted = append(restarted, r)
	}
	for _, r := range restarted {
		if err := r.Start(context.Background()); err != nil {
			t.Fatalf("restart %s: %v", r.ID(), err)
		}
	}
	return restarted
}

// mountTmpfs mounts a tmpfs of the given size on a fresh directory and unmounts it when the
// test ends (after the nodes using it have stopped: cleanups run last-in first-out).
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root (CI runs as root)")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Fatalf("mount a %s tmpfs on %s: %v", size, dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// TestDiskFullNeverAcknowledges: every replica keeps its Raft data on a small tmpfs of its
// own. Writes of 64 KiB go in until the disks are full; from then on writes fail with errors,
// and none is acknowledged that is not there after the space comes back (the tmpfs is
// remounted larger, as an operator frees space). The cluster then takes writes again, and
// after every replica is killed and restarted from its data dir each holds every acknowledged
// write in order.
func TestDiskFullNeverAcknowledges(t *testing.T) {
	const size = "4m"
	nodes, dirs := startOnTmpfs(t, size, nil)
	payload := strings.Repeat("x", 64<<10)
	var acked, refused []string
	fullAt := -1
	for i := 0; i < 200 && (fullAt < 0 || i < fullAt+5); i++ {
		v := fmt.Sprintf("%03d-%s", i, payload)
		// The leader may have stepped down after a failed write; ask whoever leads now. Once
		// the disks are full there may be none: an election writes the term and the vote.
		leader := currentLeader(nodes)
		if leader == nil {
			if fullAt < 0 {
				fullAt = i
			}
			break
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		res, err := applyValue(ctx, leader.Node, v)
		cancel()
		if err == nil && res.Err != nil {
			err = res.Err
		}
		if err != nil {
			if fullAt < 0 {
				fullAt = i
				t.Logf("write %d refused once the disks filled: %v", i, err)
			}
			refused = append(refused, v)
			continue
		}
		acked = append(acked, v)
	}
	if fullAt < 0 {
		t.Fatalf("200 writes of 64 KiB fit on %s disks: the disks never filled", size)
	}
	t.Logf("%d writes acknowledged, %d refused after the disks filled at write %d", len(acked), len(refused), fullAt)

	// Space comes back.
	for _, d := range dirs {
		if err := syscall.Mount("tmpfs", d, "tmpfs", syscall.MS_REMOUNT, "size=256m"); err != nil {
			t.Fatalf("remount %s larger: %v", d, err)
		}
	}
	waitFor(t, "a write accepted once space is back", func() (bool, string) {
		leader := currentLeader(nodes)
		if leader == nil {
			return false, "no established leader"
		}
		if err := tryApply(leader.Node, "after"); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	// And it was on disk: every replica dies and restarts from its data dir.
	nodes = restartAll(t, nodes)
	establishedLeader(t, nodes, 2)
	waitFor(t, "every acknowledged write on every restarted replica, in order", func() (bool, string) {
		var seen []string
		ok := true
		for _, tn := range nodes {
			var kept []string
			n := 0
			for _, v := range tn.fsm.Values() {
				n++
				if !slices.Contains(refused, v) {
					kept = append(kept, v)
				}
			}
			seen = append(seen, fmt.Sprintf("%s: %d values", tn.ID(), n))
			// "after" may be there more than once (a retried write whose first try committed).
			kept = slices.Compact(kept)
			ok = ok && slices.Equal(kept, append(slices.Clone(acked), "after"))
		}
		return ok, strings.Join(seen, " ")
	})
}

// TestFullDiskStandsForNoElection: the leader's disk fills up. Its next write fails and it
// steps down (hashicorp/raft does that); without more, the followers, which still name it
// leader, would vote it back, and it would fail again, election after election. A replica
// whose write failed asks for no votes for diskFailHoldoff: a healthy replica becomes leader
// and takes writes, and the replica with the full disk is not elected again while it is full.
// The replica whose disk fills (jm1) has election timings five times shorter than the others',
// so it is always the first to stand after it steps down: without the rule it wins every time.
func TestFullDiskStandsForNoElection(t *testing.T) {
	nodes, dirs := startOnTmpfs(t, "8m", func(i int, cfg *Config) {
		if i > 0 {
			cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = time.Second, time.Second, 500*time.Millisecond
		}
	})
	full := nodes[0]
	waitFor(t, full.ID()+" leads", func() (bool, string) {
		l := currentLeader(nodes)
		if l == nil {
			return false, "no leader"
		}
		if l != full {
			_ = l.raft.LeadershipTransferToServer(raft.ServerID(full.ID()), raft.ServerAddress(full.RaftAddr())).Error()
			return false, l.ID() + " leads"
		}
		return true, ""
	})
	mustApply(t, full.Node, "before")

	// Every leader change, as a healthy replica sees it.
	var watcher *testNode
	for _, tn := range nodes {
		if tn != full {
			watcher = tn
			break
		}
	}
	type seen struct {
		at     time.Time
		leader raft.ServerID
	}
	var mu sync.Mutex
	var leaders []seen
	obs := make(chan raft.Observation, 256)
	observer := raft.NewObserver(obs, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	watcher.raft.RegisterObserver(observer)
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case o := <-obs:
				mu.Lock()
				leaders = append(leaders, seen{time.Now(), o.Data.(raft.LeaderObservation).LeaderID})
				mu.Unlock()
			case <-stop:
				return
			}
		}
	}()
	defer func() { watcher.raft.DeregisterObserver(observer); close(stop); <-watched }()

	fill(t, filepath.Join(dirs[0], "filler"))
	payload := strings.Repeat("x", 64<<10)
	var failedAt time.Time
	for i := 0; failedAt.IsZero(); i++ {
		if i == 50 {
			t.Fatalf("50 writes of 64 KiB went into a full disk")
		}
		if err := tryApply(full.Node, fmt.Sprintf("full-%d-%s", i, payload)); err != nil {
			failedAt = time.Now()
			t.Logf("write %d on the full disk failed: %v", i, err)
		}
	}
	var next *testNode
	waitFor(t, "a healthy replica leads and takes a write", func() (bool, string) {
		next = currentLeader(nodes)
		if next == nil {
			return false, "no established leader"
		}
		if next == full {
			return false, full.ID() + " (its disk full) leads"
		}
		if err := tryApply(next.Node, "after"); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	t.Logf("%s leads %v after the full disk's failed write", next.ID(), time.Since(failedAt).Round(time.Millisecond))
	mu.Lock()
	defer mu.Unlock()
	var after []string
	for _, l := range leaders {
		if l.at.After(failedAt) {
			after = append(after, string(l.leader))
			if l.leader == raft.ServerID(full.ID()) {
				t.Fatalf("%s, whose disk is full, was elected leader again (leaders seen by %s since the failed write: %v)", full.ID(), watcher.ID(), after)
			}
		}
	}
	t.Logf("leaders seen by %s since the failed write: %v", watcher.ID(), after)
	if full.raft.State() == raft.Leader {
		t.Fatalf("%s, whose disk is full, leads", full.ID())
	}
}

// startOnTmpfs starts three replicas, each with its data dir on a tmpfs of its own of the
// given size; tune, when set, adjusts replica i's config first.
func startOnTmpfs(t *testing.T, size string, tune func(i int, cfg *Config)) ([]*testNode, []string) {
	t.Helper()
	dirs := make([]string, 3)
	nodes := make([]*testNode, 3)
	peers := make([]Peer, 3)
	for i := range nodes {
		dirs[i] = mountTmpfs(t, size)
		cfg := nodeConfig(t, fmt.Sprintf("jm%d", i+1))
		cfg.DataDir = filepath.Join(dirs[i], "data")
		if tune != nil {
			tune(i, &cfg)
		}
		nodes[i] = newTestNode(t, cfg, listen(t, "127.0.0.1:0"))
		peers[i] = Peer{ID: nodes[i].ID(), RaftAddr: nodes[i].RaftAddr(), GRPCAddr: nodes[i].GRPCAddr()}
	}
	for _, tn := range nodes {
		tn.setPeers(peers)
		if err := tn.Start(context.Background()); err != nil {
			t.Fatalf("start %s: %v", tn.ID(), err)
		}
	}
	return nodes, dirs
}

// tryApply applies v on n within 3 s; the error is the apply's or the FSM's.
func tryApply(n *Node, v string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	res, err := applyValue(ctx, n, v)
	if err == nil && res.Err != nil {
		err = res.Err
	}
	return err
}

// fill writes path until its file system has no byte left.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, size := range []int{1 << 20, 4 << 10, 1} {
		buf := make([]byte, size)
		for {
			if _, err := f.Write(buf); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("fill %s: %v", path, err)
				}
				break
			}
		}
	}
}
