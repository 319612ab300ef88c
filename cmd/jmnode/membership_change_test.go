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
	if err := run([]string{"raft", "remove", dead.Name, "--addr", leader.LeaderGrpcAddress, "--timeout", "10s"}); err != nil {
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
