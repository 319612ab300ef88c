package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestSnapshotSaveAndInspect: `jmnode snapshot save`, sent to a follower, saves the leader's
// state (a running streaming job among it) and `snapshot inspect` shows it, restoring the file
// offline; a damaged file is refused by both inspect and a JobMaster's restore.
func TestSnapshotSaveAndInspect(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds jmnode and runs processes")
	}
	d := newProcessCluster(t, defaultRaftProcs)
	rec := submitChain(t, d, "snap", 3)
	leader, err := d.waitLeader(context.Background(), "", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	follower := ""
	for _, p := range d.JMs {
		if p.Name != leader.LeaderId {
			follower = p.Addrs.GRPC
		}
	}
	path := filepath.Join(t.TempDir(), "state.snap")
	out := captureStdout(t, func() error { return run([]string{"snapshot", "save", path, "--addr", follower, "--timeout", "10s"}) })
	if !strings.Contains(out, "saved the state at index") || !strings.Contains(out, "from "+leader.LeaderId) {
		t.Fatalf("snapshot save: %q", out)
	}
	out = captureStdout(t, func() error { return run([]string{"snapshot", "inspect", path}) })
	id := rec.JobGraph.JobId
	if !strings.Contains(out, id) || !strings.Contains(out, "JOB_STATUS_RUNNING") {
		t.Fatalf("snapshot inspect does not show the running job %s:\n%s", id, out)
	}
	js := captureStdout(t, func() error { return run([]string{"snapshot", "inspect", path, "--json"}) })
	var s fsm.SnapshotSummary
	if err := json.Unmarshal([]byte(js), &s); err != nil {
		t.Fatalf("inspect --json: %v\n%s", err, js)
	}
	found := false
	for _, j := range s.Jobs {
		found = found || (j.ID == id && j.Running == 9 && j.Executions == 9)
	}
	if !found || s.Index == 0 || s.Epoch == 0 || s.Records["job"] != len(s.Jobs) || s.Records["header"] != 1 {
		t.Fatalf("inspect --json: %+v", s)
	}
	t.Logf("saved at index %d, epoch %d: %d jobs, %d bytes; records %v", s.Index, s.Epoch, len(s.Jobs), s.Bytes, s.Records)

	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.snap")
	if err := os.WriteFile(bad, b[:len(b)-7], 0o644); err != nil {
		t.Fatal(err)
	}
	if err := runCLI([]string{"snapshot", "inspect", bad}); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("inspect of a truncated file: %v", err)
	}
	if err := runCLI([]string{"snapshot", "inspect", "/etc/hostname"}); err == nil || !strings.Contains(err.Error(), "not a jmcluster snapshot") {
		t.Fatalf("inspect of another file: %v", err)
	}
}

// TestSnapshotRestoreOntoAWipedCluster: a snapshot is saved while a streaming job runs, the
// leader is killed (the TaskManagers then see an epoch above the file's), and every JobMaster is
// killed and its data directory wiped. Started again empty, the JobMasters elect a Raft leader
// that does not establish leadership (its state is behind the TaskManagers' epoch: reconciling
// would cancel every task) and says so in `jmnode status`; the tasks keep running.
// `jmnode snapshot restore` brings the state back: the leader establishes an epoch above every
// one the TaskManagers have seen and its reconciliation keeps all 9 tasks running, with the
// same attempts, and the checksum sinks see no gap and no duplicate.
func TestSnapshotRestoreOntoAWipedCluster(t *testing.T) {
	// Not parallel: under load the wiped JobMasters can elect and establish before a TaskManager's
	// gossip shows its epoch (docs/testing.md, "Parallel tests").
	if testing.Short() {
		t.Skip("builds jmnode and runs processes")
	}
	d := newProcessCluster(t, defaultRaftProcs)
	before := submitChain(t, d, "restore", 3)
	id := before.JobGraph.JobId
	ctx := context.Background()
	leader, err := d.waitLeader(ctx, "", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "state.snap")
	if err := runCLI([]string{"snapshot", "save", path, "--addr", leader.LeaderGrpcAddress, "--timeout", "10s"}); err != nil {
		t.Fatal(err)
	}
	if err := d.Proc(leader.LeaderId).Kill(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	now := waitReconciledAfter(t, d, leader.Epoch, []string{leader.LeaderId}, 9)
	t.Logf("saved at epoch %d; the TaskManagers have seen epoch %d since", leader.Epoch, now.Epoch)
	if err := d.waitSink(ctx, id, 1); err != nil {
		t.Fatal(err)
	}

	for _, p := range d.JMs {
		if p.Running() {
			if err := p.Kill(10 * time.Second); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.RemoveAll(p.DataDir); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range d.JMs {
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
	}
	var behind *pb.ClusterStatusResponse
	if err := d.waitFor(ctx, 60*time.Second, "a Raft leader that reports its state behind the TaskManagers", func(cs *pb.ClusterStatusResponse) bool {
		if cs.StateBehind != "" {
			behind = cs
		}
		return behind != nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %s", behind.NodeId, behind.StateBehind)
	if behind.LeaderGrpcAddress != "" || behind.Epoch >= now.Epoch {
		t.Fatalf("the wiped cluster established a leader: %v", behind)
	}
	out := captureStdout(t, func() error { return run([]string{"status", "--addr", d.Proc(behind.NodeId).Addrs.GRPC}) })
	if !strings.Contains(out, "NOT ESTABLISHED") || !strings.Contains(out, "snapshot restore") {
		t.Fatalf("jmnode status on the leader of the wiped cluster:\n%s", out)
	}
	// While the state is lost, the tasks keep running.
	sunk := d.sinkTotals(id).count
	if err := d.waitSink(ctx, id, sunk+10); err != nil {
		t.Fatal(err)
	}

	var follower string
	for _, p := range d.JMs {
		if p.Name != behind.NodeId {
			follower = p.Addrs.GRPC
		}
	}
	out = captureStdout(t, func() error {
		return run([]string{"snapshot", "restore", path, "--addr", follower, "--timeout", "30s"})
	})
	t.Logf("snapshot restore:\n%s", out)
	if !strings.Contains(out, "9 executions, 9 kept running") {
		t.Fatalf("snapshot restore did not report the 9 tasks kept:\n%s", out)
	}
	restored, err := d.waitLeader(ctx, "", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if restored.Epoch <= now.Epoch {
		t.Fatalf("the restored leader's epoch %d is not above the %d the TaskManagers had seen", restored.Epoch, now.Epoch)
	}
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
	sunk = d.sinkTotals(id).count
	if err := d.waitSink(ctx, id, sunk+10); err != nil {
		t.Fatal(err)
	}
	if tot := d.sinkTotals(id); tot.gaps != 0 || tot.dups != 0 {
		t.Fatalf("checksum sinks: %+v", tot)
	}
	t.Logf("restored at epoch %d (the TaskManagers had seen %d): 9 of 9 kept, attempts unchanged", restored.Epoch, now.Epoch)
}
