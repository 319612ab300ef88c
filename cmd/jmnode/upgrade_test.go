package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/internal/proccluster"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// waitLog waits until a process's log holds every one of the strings on one line.
func waitLog(t *testing.T, p *proccluster.Proc, limit time.Duration, all ...string) string {
	t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile(p.LogPath)
		for _, l := range strings.Split(string(b), "\n") {
			ok := true
			for _, s := range all {
				ok = ok && strings.Contains(l, s)
			}
			if ok {
				return l
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s's log has no line with %q after %s; last lines:\n%s", p.Name, all, limit, p.LogTail(20))
	return ""
}

// waitSameState waits until every running JobMaster reports the same applied index and
// returns their state hash there.
func waitSameState(t *testing.T, d *procs) (string, uint64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last []string
	for time.Now().Before(deadline) {
		last = last[:0]
		var hash string
		var index uint64
		same := true
		for _, p := range d.JMs {
			if !p.Running() {
				continue
			}
			c := d.client(p.Addrs.GRPC)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			h, err := c.operator().StateHash(ctx, &pb.StateHashRequest{})
			cancel()
			c.cc.Close()
			if err != nil {
				same = false
				last = append(last, p.Name+": "+err.Error())
				continue
			}
			last = append(last, fmt.Sprintf("%s %.12s@%d", p.Name, h.Hash, h.AppliedIndex))
			if hash == "" {
				hash, index = h.Hash, h.AppliedIndex
			} else if h.Hash != hash || h.AppliedIndex != index {
				same = false
			}
		}
		if same && hash != "" {
			return hash, index
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the JobMasters' states did not agree within 30 s: %v", last)
	return "", 0
}

// TestMixedVersionReplicasSkipAnIgnorableCommand: a cluster of real processes of two versions.
// jm1 runs a later build (-tags jmnext) that knows one command more and, once it establishes
// leadership, writes it marked ignorable; jm2 and jm3 run this build. Leadership is moved to
// jm1 and it writes the command; the older replicas skip it (their logs say so, naming the
// type) and apply everything after it: a job submitted next is on all three, whose state
// hashes agree at one applied index. Leadership moved back to an older replica takes writes,
// and the streaming job keeps its 9 tasks and attempts throughout.
func TestMixedVersionReplicasSkipAnIgnorableCommand(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds jmnode twice and runs processes")
	}
	d := newProcessClusterOf(t, defaultRaftProcs, func(dir string, nodes []proccluster.Node) {
		nodes[0].Bin = buildJmnode(t, "jmnext")
	})
	before := submitChain(t, d, "mixed", 3)
	ctx := context.Background()
	leader, err := d.waitLeader(ctx, "", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if leader.LeaderId != "jm1" {
		if err := runCLI([]string{"raft", "transfer-leadership", "--to", "jm1", "--addr", leader.LeaderGrpcAddress, "--timeout", "10s"}); err != nil {
			t.Fatal(err)
		}
		waitReconciledAfter(t, d, leader.Epoch, []string{"jm2", "jm3"}, 9)
	}
	line := waitLog(t, d.Proc("jm1"), 30*time.Second, "wrote an ignorable command of a newer version", "type=1000")
	t.Logf("jm1 (jmnext): %s", line)
	for _, name := range []string{"jm2", "jm3"} {
		t.Logf("%s: %s", name, waitLog(t, d.Proc(name), 30*time.Second, "skipping unknown ignorable command", "type=1000"))
	}

	// Everything after the command applies on every replica.
	c := d.client(d.Proc("jm2").Addrs.GRPC)
	defer c.cc.Close()
	jg := testcluster.StreamingChain("after-the-note", 1, 10, 0)
	jg.JobId = newJobID()
	if err := c.call(15*time.Second, func(ctx context.Context) error {
		_, err := c.client().SubmitJob(ctx, &pb.SubmitJobRequest{JobGraph: jg})
		return err
	}); err != nil {
		t.Fatalf("submit through an older replica to the newer leader: %v", err)
	}
	if _, err := d.waitJob(ctx, jg.JobId, 30*time.Second, allRunning); err != nil {
		t.Fatal(err)
	}
	hash, index := waitSameState(t, d)
	t.Logf("all three replicas at index %d, hash %s", index, hash[:12])

	// An older replica leads again and takes writes.
	now, err := d.waitLeader(ctx, "", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := runCLI([]string{"raft", "transfer-leadership", "--to", "jm2", "--addr", now.LeaderGrpcAddress, "--timeout", "10s"}); err != nil {
		t.Fatal(err)
	}
	back := waitReconciledAfter(t, d, now.Epoch, []string{"jm1", "jm3"}, 12)
	if err := c.call(15*time.Second, func(ctx context.Context) error {
		_, err := c.client().CancelJob(ctx, &pb.CancelJobRequest{JobId: jg.JobId})
		return err
	}); err != nil {
		t.Fatalf("a write on the older leader %s: %v", back.LeaderId, err)
	}
	after, err := d.waitJob(ctx, before.JobGraph.JobId, 30*time.Second, allRunning)
	if err != nil {
		t.Fatal(err)
	}
	if diff := compareAttempts(before, after); len(diff) > 0 {
		t.Fatalf("attempts changed: %v", diff)
	}
	waitSameState(t, d)
}

// TestMixedVersionReconcilesWithWholeRecords: a rolling upgrade past command level 1. jm3 runs
// the release before it (-tags jmprev: it gossips FSM level 0 and has no applier for
// RECONCILE_KEPT, which would stop it). A leader of this build reconciles with whole records
// only, says why in its log, and jm3 applies every entry: the three state hashes agree and the
// job keeps its tasks and attempts. jm3 is then upgraded in place (stopped, restarted on the same
// data with this build); once gossip carries its level 1, the next failover commits kept
// ranges and no whole records, and all three replicas still agree.
func TestMixedVersionReconcilesWithWholeRecords(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds jmnode twice and runs processes")
	}
	var current string
	d := newProcessClusterOf(t, defaultRaftProcs, func(dir string, nodes []proccluster.Node) {
		nodes[2].Bin = buildJmnode(t, "jmprev")
		current = buildJmnode(t)
	})
	const tasks = 12
	before := submitChain(t, d, "rolling", 4)
	ctx := context.Background()

	// failover moves leadership to a replica of this build other than the leader and returns
	// the new leader's "committed" line for its epoch.
	failover := func() string {
		t.Helper()
		leader, err := d.waitLeader(ctx, "", 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		to := "jm1"
		if leader.LeaderId == "jm1" {
			to = "jm2"
		}
		if err := runCLI([]string{"raft", "transfer-leadership", "--to", to, "--addr", leader.LeaderGrpcAddress, "--timeout", "10s"}); err != nil {
			t.Fatal(err)
		}
		now := waitReconciledAfter(t, d, leader.Epoch, []string{leader.LeaderId, "jm3"}, tasks)
		return waitLog(t, d.Proc(now.LeaderId), 30*time.Second, "committed", fmt.Sprintf("epoch=%d", now.Epoch), "reconciled graph committed")
	}

	line := failover()
	t.Logf("with jm3 at level 0: %s", line)
	if !strings.Contains(line, fmt.Sprintf("%d whole records, 0 kept ranges", tasks)) || !strings.Contains(line, "does not gossip that it applies RECONCILE_KEPT") {
		t.Fatalf("a leader with a level-0 replica did not commit whole records only: %s", line)
	}
	if !d.Proc("jm3").Running() {
		t.Fatalf("jm3 (the older build) stopped:\n%s", d.Proc("jm3").LogTail(30))
	}
	hash, index := waitSameState(t, d)
	t.Logf("all three replicas at index %d, hash %.12s", index, hash)

	// Upgrade jm3 in place.
	jm3 := d.Proc("jm3")
	jm3.Stop(10 * time.Second)
	jm3.SetBin(current)
	if err := jm3.Start(); err != nil {
		t.Fatal(err)
	}
	waitGossipedLevel(t, d, "jm3", fsm.CommandLevel)

	line = failover()
	t.Logf("with every replica at level %d: %s", fsm.CommandLevel, line)
	if !strings.Contains(line, "0 whole records,") || strings.Contains(line, "whole records only") || strings.Contains(line, " 0 kept ranges") {
		t.Fatalf("with every replica upgraded the leader did not commit kept ranges only: %s", line)
	}
	waitSameState(t, d)
	after, err := d.waitJob(ctx, before.JobGraph.JobId, 30*time.Second, allRunning)
	if err != nil {
		t.Fatal(err)
	}
	if diff := compareAttempts(before, after); len(diff) > 0 {
		t.Fatalf("attempts changed: %v", diff)
	}
}

// waitGossipedLevel waits until every running JobMaster's gossip view has JobMaster id alive
// with the given FSM level.
func waitGossipedLevel(t *testing.T, d *procs, id string, level int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last []string
	for time.Now().Before(deadline) {
		last = last[:0]
		ok := true
		for _, p := range d.JMs {
			if !p.Running() {
				continue
			}
			c := d.client(p.Addrs.GRPC)
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			resp, err := c.operator().Members(cctx, &pb.MembersRequest{})
			cancel()
			c.cc.Close()
			seen := "absent"
			for _, m := range resp.GetMembers() {
				if m.Meta["id"] == id && m.Role == "jobmaster" {
					seen = m.State + " level " + m.Meta["fsm_level"]
				}
			}
			if err != nil {
				seen = err.Error()
			}
			last = append(last, p.Name+" sees "+id+" "+seen)
			ok = ok && seen == fmt.Sprintf("alive level %d", level)
		}
		if ok {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s is not gossiped alive at FSM level %d after 30 s: %v", id, level, last)
}
