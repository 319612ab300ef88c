package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/internal/proccluster"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// waitReconciledAfter waits for a leader other than those in gone whose reconciliation after
// epoch completed, and checks it kept all n executions running.
func waitReconciledAfter(t *testing.T, d *procs, epoch uint64, gone []string, n int64) *pb.ClusterStatusResponse {
	t.Helper()
	var rec *pb.ReconciliationRecord
	var now *pb.ClusterStatusResponse
	if err := d.waitFor(context.Background(), 60*time.Second, "a new leader with a completed reconciliation", func(cs *pb.ClusterStatusResponse) bool {
		if cs.LeaderId == "" || slices.Contains(gone, cs.LeaderId) || cs.Epoch <= epoch || cs.Reconciling {
			return false
		}
		for _, r := range cs.Reconciliations {
			if r.Epoch > epoch && r.Outcome == "completed" && r.LeaderId == cs.LeaderId {
				rec, now = r, cs
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatal(err)
	}
	if c := rec.GetCounts(); c.GetKeptRunning() != n || c.GetMissing() != 0 || c.GetFailed() != 0 {
		t.Fatalf("reconciliation at epoch %d: %s; want %d kept running", rec.Epoch, recCounts(c), n)
	}
	return now
}

// TestFiveJobMastersSurviveTwoKills: five JobMasters (--bootstrap-expect 5), default Raft
// timings: the leader and a second JobMaster are killed with SIGKILL; the three left elect a
// leader, which keeps all 9 tasks of a streaming job running, and accepts writes.
func TestFiveJobMastersSurviveTwoKills(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds jmnode and runs processes")
	}
	o := defaultRaftProcs
	o.JMs = 5
	d := newProcessCluster(t, o)
	before := submitChain(t, d, "five", 3)
	leader, err := d.waitLeader(context.Background(), "", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	victims := []string{leader.LeaderId}
	for _, p := range d.JMs {
		if p.Name != leader.LeaderId && len(victims) < 2 {
			victims = append(victims, p.Name)
		}
	}
	for _, v := range victims {
		if err := d.Proc(v).Kill(10 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	now := waitReconciledAfter(t, d, leader.Epoch, victims, 9)
	t.Logf("killed %v; %s leads at epoch %d with 3 of 5", victims, now.LeaderId, now.Epoch)
	after, err := d.waitJob(context.Background(), before.JobGraph.JobId, 10*time.Second, allRunning)
	if err != nil {
		t.Fatal(err)
	}
	if diff := compareAttempts(before, after); len(diff) > 0 {
		t.Fatalf("attempts changed: %v", diff)
	}
	submitChain(t, d, "after", 1) // the three left take writes
}

// TestReplaceADeadJobMaster: a JobMaster is killed and its disk counted lost; `jmnode raft
// remove` takes it out of the configuration, and a new JobMaster with a new id, empty data and
// --join is added to the two left. The three then survive a leader kill with every task kept.
func TestReplaceADeadJobMaster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds jmnode and runs processes")
	}
	d := newProcessCluster(t, defaultRaftProcs)
	before := submitChain(t, d, "replace", 3)
	ctx := context.Background()
	leader, err := d.waitLeader(ctx, "", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var dead *proccluster.Proc
	for _, p := range d.JMs {
		if p.Name != leader.LeaderId {
			dead = p
		}
	}
	if err := dead.Kill(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := runCLI([]string{"raft", "remove", dead.Name, "--addr", leader.LeaderGrpcAddress, "--timeout", "10s"}); err != nil {
		t.Fatalf("raft remove %s: %v", dead.Name, err)
	}

	// jm4: new id, new ports, empty data dir, joining the two left.
	ports, err := proccluster.FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	var join, gossip []string
	for _, p := range d.JMs {
		if p != dead {
			join, gossip = append(join, p.Addrs.GRPC), append(gossip, p.Addrs.Gossip)
		}
	}
	dir := t.TempDir()
	args := append([]string{"jobmaster", "--id", "jm4", "--data-dir", filepath.Join(dir, "data"),
		"--raft-addr", ports[0], "--grpc-addr", ports[1], "--http-addr", "", "--gossip-addr", ports[2],
		"--gossip-join", strings.Join(gossip, ","), "--join", strings.Join(join, ",")}, defaultRaftProcs.JMFlags...)
	logf, err := os.Create(filepath.Join(dir, "jm4.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(d.Bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			t.Logf("jm4's log:\n%s", strings.Join(lines[max(0, len(lines)-40):], "\n"))
		}
	})
	lc := d.client(leader.LeaderGrpcAddress)
	defer lc.cc.Close()
	var peers *pb.RaftPeersResponse
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		peers, err = lc.operator().RaftPeers(ctx, &pb.RaftPeersRequest{})
		cancel()
		if err == nil && len(peers.Peers) == 3 && slices.ContainsFunc(peers.Peers, func(p *pb.RaftPeer) bool { return p.Id == "jm4" }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("jm4 not a voter after 60 s: %v %v", peers, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("%s removed, jm4 joined: %v", dead.Name, peers.Peers)

	// The new three survive a leader kill with every task kept.
	if err := d.Proc(leader.LeaderId).Kill(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	now := waitReconciledAfter(t, d, leader.Epoch, []string{leader.LeaderId, dead.Name}, 9)
	t.Logf("%s killed; %s leads at epoch %d", leader.LeaderId, now.LeaderId, now.Epoch)
	after, err := d.waitJob(ctx, before.JobGraph.JobId, 10*time.Second, allRunning)
	if err != nil {
		t.Fatal(err)
	}
	if diff := compareAttempts(before, after); len(diff) > 0 {
		t.Fatalf("attempts changed: %v", diff)
	}
}

// waitVoters waits until a running JobMaster's Raft configuration has exactly the voters ids.
func waitVoters(t *testing.T, d *procs, ids ...string) {
	t.Helper()
	slices.Sort(ids)
	deadline := time.Now().Add(60 * time.Second)
	var last []string
	for time.Now().Before(deadline) {
		for _, p := range d.JMs {
			if !p.Running() || !slices.Contains(ids, p.Name) {
				continue
			}
			c := d.client(p.Addrs.GRPC)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			peers, err := c.operator().RaftPeers(ctx, &pb.RaftPeersRequest{})
			cancel()
			c.cc.Close()
			if err != nil {
				continue
			}
			last = last[:0]
			for _, s := range peers.Peers {
				if s.Suffrage == "voter" {
					last = append(last, s.Id)
				}
			}
			slices.Sort(last)
			if slices.Equal(last, ids) {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("voters %v after 60 s, want %v", last, ids)
}

// TestAddAndRemoveJobMastersOnline: while a streaming job runs, with default Raft timings, two
// new JobMasters join (five voters), a follower and then the leader itself are removed with
// `jmnode raft remove` and stopped (three voters, two of them new), and the new leader is then
// killed: the two left elect a leader. Every leader change reconciles all 9 tasks as kept
// running; no attempt changes, no restart is counted, and the checksum sinks see no gap and no
// duplicate.
func TestAddAndRemoveJobMastersOnline(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds jmnode and runs processes")
	}
	d := newProcessCluster(t, defaultRaftProcs)
	before := submitChain(t, d, "online", 3)
	id := before.JobGraph.JobId
	ctx := context.Background()
	leader, err := d.waitLeader(ctx, "", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"jm4", "jm5"} {
		p, err := d.AddJobMaster(name, d.dir, defaultRaftProcs.JMFlags...)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
	}
	waitVoters(t, d, "jm1", "jm2", "jm3", "jm4", "jm5")
	t.Logf("jm4 and jm5 joined; %s leads at epoch %d", leader.LeaderId, leader.Epoch)

	var follower string
	for _, p := range []string{"jm1", "jm2", "jm3"} {
		if p != leader.LeaderId {
			follower = p
			break
		}
	}
	if err := runCLI([]string{"raft", "remove", follower, "--addr", leader.LeaderGrpcAddress, "--timeout", "10s"}); err != nil {
		t.Fatalf("raft remove %s: %v", follower, err)
	}
	d.Proc(follower).Stop(10 * time.Second)
	var left []string
	for _, p := range d.JMs {
		if p.Name != follower {
			left = append(left, p.Name)
		}
	}
	waitVoters(t, d, left...)
	t.Logf("%s removed and stopped", follower)

	// The leader removes itself: it commits the configuration without itself and steps down.
	if err := runCLI([]string{"raft", "remove", leader.LeaderId, "--addr", leader.LeaderGrpcAddress, "--timeout", "10s"}); err != nil {
		t.Fatalf("raft remove of the leader %s: %v", leader.LeaderId, err)
	}
	gone := []string{follower, leader.LeaderId}
	now := waitReconciledAfter(t, d, leader.Epoch, gone, 9)
	d.Proc(leader.LeaderId).Stop(10 * time.Second)
	left = slices.DeleteFunc(left, func(n string) bool { return n == leader.LeaderId })
	waitVoters(t, d, left...)
	t.Logf("the leader %s removed itself; %s leads at epoch %d; voters %v", leader.LeaderId, now.LeaderId, now.Epoch, left)

	// Three voters, two of them new: they survive a leader kill.
	if err := d.Proc(now.LeaderId).Kill(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	last := waitReconciledAfter(t, d, now.Epoch, append(gone, now.LeaderId), 9)
	t.Logf("%s killed; %s leads at epoch %d", now.LeaderId, last.LeaderId, last.Epoch)

	after, err := d.waitJob(ctx, id, 30*time.Second, allRunning)
	if err != nil {
		t.Fatal(err)
	}
	if diff := compareAttempts(before, after); len(diff) > 0 {
		t.Fatalf("attempts changed: %v", diff)
	}
	if after.Restarts != before.Restarts {
		t.Fatalf("restarts %d -> %d", before.Restarts, after.Restarts)
	}
	sunk := d.sinkTotals(id).count
	if err := d.waitSink(ctx, id, sunk+10); err != nil {
		t.Fatal(err)
	}
	if tot := d.sinkTotals(id); tot.gaps != 0 || tot.dups != 0 {
		t.Fatalf("checksum sinks: %+v", tot)
	}
}

// TestDeadServerCleanupKeepsTheMinimumQuorum: five JobMasters with --cleanup-dead-servers 3s
// and --min-quorum 3, default Raft timings, a streaming job running. Two followers are killed,
// one after the other: the leader removes each from the Raft configuration once gossip has
// reported it dead for 3 s. A third follower killed is kept (three voters is the minimum),
// which the leader logs, and the two live voters of three still lead and take writes; the job
// keeps its attempts.
func TestDeadServerCleanupKeepsTheMinimumQuorum(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds jmnode and runs processes")
	}
	const after = 3 * time.Second
	o := defaultRaftProcs
	o.JMs = 5
	o.JMFlags = append(slices.Clone(o.JMFlags), "--cleanup-dead-servers", after.String(), "--min-quorum", "3")
	d := newProcessCluster(t, o)
	before := submitChain(t, d, "cleanup", 3)
	ctx := context.Background()
	leader, err := d.waitLeader(ctx, "", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var followers, voters []string
	for _, p := range d.JMs {
		voters = append(voters, p.Name)
		if p.Name != leader.LeaderId {
			followers = append(followers, p.Name)
		}
	}
	for _, f := range followers[:2] {
		killed := time.Now()
		if err := d.Proc(f).Kill(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		voters = slices.DeleteFunc(voters, func(n string) bool { return n == f })
		waitVoters(t, d, voters...)
		took := time.Since(killed)
		if took < after {
			t.Fatalf("%s removed %s after its kill, before it was dead for %s", f, took, after)
		}
		t.Logf("%s killed; removed after %s (cleanup after %s of gossip death)", f, took.Round(time.Millisecond), after)
	}
	third := followers[2]
	if err := d.Proc(third).Kill(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", waitLog(t, d.Proc(leader.LeaderId), 60*time.Second, "dead server kept", "server="+third, "min_quorum=3"))
	waitVoters(t, d, voters...)
	jg := testcluster.StreamingChain("after-cleanup", 1, 10, 0)
	jg.JobId = newJobID()
	c := d.client(leader.LeaderGrpcAddress)
	defer c.cc.Close()
	if err := c.call(15*time.Second, func(ctx context.Context) error {
		_, err := c.client().SubmitJob(ctx, &pb.SubmitJobRequest{JobGraph: jg})
		return err
	}); err != nil {
		t.Fatalf("a write on two live voters of three: %v", err)
	}
	after2, err := d.waitJob(ctx, before.JobGraph.JobId, 30*time.Second, allRunning)
	if err != nil {
		t.Fatal(err)
	}
	if diff := compareAttempts(before, after2); len(diff) > 0 {
		t.Fatalf("attempts changed: %v", diff)
	}
}
