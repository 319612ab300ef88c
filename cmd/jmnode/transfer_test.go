package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// raftHeartbeatTimeout is hashicorp/raft's default HeartbeatTimeout, which the JobMasters keep
// without --fast-raft.
const raftHeartbeatTimeout = time.Second

// TestTransferLeadershipKeepsTasks: with hashicorp/raft's default timings, `jmnode raft
// transfer-leadership` (to any voter, then --to a named one, each sent to a follower, which
// forwards it) makes a new leader that begins its reconciliation within two Raft heartbeat
// timeouts of the call (the leader's committed timestamp), keeps every task of a streaming job
// running (no attempt changes), and refuses a transfer to itself or to an unknown server.
func TestTransferLeadershipKeepsTasks(t *testing.T) {
	// Not parallel: it bounds a latency (two Raft heartbeat timeouts) that other tests' load stretches.
	if testing.Short() {
		t.Skip("builds jmnode and runs processes")
	}
	d := newProcessCluster(t, defaultRaftProcs)
	before := submitChain(t, d, "transfer", 3)
	ctx := context.Background()
	for round, to := range []string{"", "named"} {
		leader, err := d.waitLeader(ctx, "", 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		follower, target := "", ""
		for _, p := range d.JMs {
			if p.Name != leader.LeaderId {
				if follower == "" {
					follower = p.Addrs.GRPC
				} else {
					target = p.Name
				}
			}
		}
		args := []string{"raft", "transfer-leadership", "--addr", follower, "--timeout", "10s"}
		if to != "" {
			args = append(args, "--to", target)
		}
		called := time.Now()
		out := captureStdout(t, func() error { return run(args) })
		if !strings.Contains(out, "leadership moved from "+leader.LeaderId) {
			t.Fatalf("round %d: %q", round, out)
		}
		var rec *pb.ReconciliationRecord
		var now *pb.ClusterStatusResponse
		if err := d.waitFor(ctx, 30*time.Second, "the new leader's completed reconciliation", func(cs *pb.ClusterStatusResponse) bool {
			for _, r := range cs.Reconciliations {
				if r.Epoch > leader.Epoch && r.Outcome == "completed" && cs.LeaderId == r.LeaderId {
					rec, now = r, cs
					return true
				}
			}
			return false
		}); err != nil {
			t.Fatal(err)
		}
		if to != "" && now.LeaderId != target {
			t.Fatalf("round %d: --to %s, but %s leads", round, target, now.LeaderId)
		}
		took := time.UnixMilli(rec.StartedAt).Sub(called)
		t.Logf("round %d: %s -> %s; reconciliation began %s after the call (%s), %s", round, leader.LeaderId, now.LeaderId,
			took.Round(time.Millisecond), strings.TrimSpace(out), recCounts(rec.GetCounts()))
		if took > 2*raftHeartbeatTimeout {
			t.Fatalf("round %d: the new leader began reconciling %s after the transfer was asked for; want within two heartbeat timeouts (%s)", round, took, 2*raftHeartbeatTimeout)
		}
		if c := rec.GetCounts(); c.GetKeptRunning() != 9 || c.GetMissing() != 0 || c.GetFailed() != 0 {
			t.Fatalf("round %d: reconciliation %s; want 9 kept running", round, recCounts(c))
		}
	}
	after, err := d.waitJob(ctx, before.JobGraph.JobId, 10*time.Second, allRunning)
	if err != nil {
		t.Fatal(err)
	}
	if diff := compareAttempts(before, after); len(diff) > 0 || after.Restarts != 0 {
		t.Fatalf("attempts changed across two transfers: %v (restarts %d)", diff, after.Restarts)
	}

	leader, err := d.waitLeader(ctx, "", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ to, want string }{{leader.LeaderId, "already leads"}, {"jm9", "no such server"}} {
		err := runCLI([]string{"raft", "transfer-leadership", "--to", c.to, "--addr", leader.LeaderGrpcAddress, "--timeout", "5s"})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("transfer --to %s: %v; want %q", c.to, err, c.want)
		}
	}
}
