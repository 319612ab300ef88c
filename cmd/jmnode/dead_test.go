package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/internal/proccluster"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// The process tests of "dead is dead" (a TM whose process is gone is proven dead by the
// refused connections to its gRPC port, not by gossip's suspicion timeout) and of liveness
// timers that restart when a leader comes back (jobmaster/liveness.go).

// logLine is the first line of a process log containing every one of subs, and its time (the
// log's own timestamp); ok is false when there is none.
func logLine(t *testing.T, path string, subs ...string) (line string, at time.Time, ok bool) {
	t.Helper()
	lines := logLines(t, path, subs...)
	if len(lines) == 0 {
		return "", time.Time{}, false
	}
	return lines[0].text, lines[0].at, true
}

type timedLine struct {
	text string
	at   time.Time
}

// logLines lists the lines of a process log containing every one of subs, with their times.
func logLines(t *testing.T, path string, subs ...string) []timedLine {
	t.Helper()
	var out []timedLine
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
next:
	for sc.Scan() {
		l := sc.Text()
		for _, s := range subs {
			if !strings.Contains(l, s) {
				continue next
			}
		}
		ts, _, _ := strings.Cut(l, " ")
		at, err := time.Parse("2006-01-02T15:04:05.000Z0700", ts)
		if err != nil {
			t.Fatalf("%s: no timestamp on %q: %v", path, l, err)
		}
		out = append(out, timedLine{l, at})
	}
	return out
}

// submitChain submits a streaming chain of three vertices that restarts freely and waits until
// every task runs; checkpointed with ckpt, if one is given (the cluster needs --checkpoint-dir).
func submitChain(t *testing.T, d *procs, name string, parallelism int32, ckpt ...*pb.CheckpointConfig) *pb.JobRecord {
	t.Helper()
	ctx := context.Background()
	leader, err := d.waitLeader(ctx, "", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.waitTMs(ctx, 30*time.Second, 3, 0); err != nil {
		t.Fatal(err)
	}
	jg := testcluster.StreamingChain(name, parallelism, 50, 0)
	jg.JobId = newJobID()
	jg.RestartStrategy = &pb.RestartStrategy{Kind: pb.RestartKind_RESTART_KIND_FIXED_DELAY, Attempts: 100, DelayMs: 100}
	if len(ckpt) > 0 {
		jg.CheckpointConfig = ckpt[0]
	}
	lc := d.client(leader.LeaderGrpcAddress)
	defer lc.cc.Close()
	if err := lc.call(15*time.Second, func(ctx context.Context) error {
		_, err := lc.client().SubmitJob(ctx, &pb.SubmitJobRequest{JobGraph: jg})
		return err
	}); err != nil {
		t.Fatalf("submit: %v", err)
	}
	rec, err := d.waitJob(ctx, jg.JobId, 60*time.Second, allRunning)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// busiestTM is the TM that holds the most current attempts (the first by name on a tie).
func busiestTM(rec *pb.JobRecord) string {
	count := map[string]int{}
	for _, a := range testcluster.Attempts(rec) {
		count[a.TM]++
	}
	victim := ""
	for tm, n := range count {
		if victim == "" || n > count[victim] || (n == count[victim] && tm < victim) {
			victim = tm
		}
	}
	return victim
}

// regionsOf lists, sorted, the subtasks ("vertex[i]") of every failover region that holds a
// current attempt placed on tm: what losing tm must restart, and nothing else.
func regionsOf(t *testing.T, rec *pb.JobRecord, tm string) []string {
	t.Helper()
	regions, err := graph.FailoverRegions(rec.JobGraph)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range regions {
		holds := false
		for _, m := range r.Members {
			ev := graph.FindVertex(rec.ExecutionGraph, m.VertexID, m.Subtask)
			holds = holds || ev.GetCurrent().GetSlot().GetTmId() == tm
		}
		if holds {
			for _, m := range r.Members {
				out = append(out, fmt.Sprintf("%s[%d]", m.VertexID, m.Subtask))
			}
		}
	}
	sort.Strings(out)
	return out
}

// endedAttempts lists the given attempts as the record's history ended them.
func endedAttempts(rec *pb.JobRecord, ids map[string]bool) []*pb.Execution {
	var out []*pb.Execution
	for _, ev := range testcluster.Executions(rec) {
		for _, h := range ev.History {
			if ids[h.AttemptId] {
				out = append(out, h)
			}
		}
	}
	return out
}

// TestKilledTaskManagerLostByRefusedConnections runs real processes: a TM holding tasks is
// killed (SIGKILL) with the leader alive. The leader proves it dead by the refused connections
// to its gRPC port: the loss is logged and committed with a cause that says so, before gossip
// reports the TM gone, and exactly the failover regions holding its attempts restart.
func TestKilledTaskManagerLostByRefusedConnections(t *testing.T) {
	t.Parallel()
	d := newProcessCluster(t, fastProcs)
	ctx := context.Background()
	before := submitChain(t, d, "killed-tm", 3)
	leader, err := d.waitLeader(ctx, "", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	victim := busiestTM(before)
	want := regionsOf(t, before, victim)
	onVictim := map[string]bool{}
	for _, a := range testcluster.Attempts(before) {
		if a.TM == victim {
			onVictim[a.ID] = true
		}
	}
	jm := d.Proc(leader.LeaderId)
	killed := time.Now()
	if err := d.Proc(victim).Kill(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	after, err := d.waitJob(ctx, before.JobGraph.JobId, 60*time.Second, func(r *pb.JobRecord) bool {
		for _, a := range testcluster.Attempts(r) {
			if a.TM == victim {
				return false
			}
		}
		return allRunning(r)
	})
	if err != nil {
		t.Fatal(err)
	}
	line, lost, ok := logLine(t, jm.LogPath, "task manager lost", "tm="+victim)
	if !ok {
		t.Fatalf("%s logged no loss of %s:\n%s", jm.Name, victim, jm.LogTail(80))
	}
	if !strings.Contains(line, "connection refused") {
		t.Fatalf("%s lost, but not by refused connections: %s", victim, line)
	}
	// Each attempt on the victim failed with that cause — or was cancelled first, by the
	// restart of its region that a peer's report of a broken input stream began.
	refused := 0
	for _, e := range endedAttempts(after, onVictim) {
		switch {
		case e.State == pb.ExecutionState_EXECUTION_STATE_FAILED && strings.Contains(e.FailureCause, "connection refused"):
			refused++
		case e.State == pb.ExecutionState_EXECUTION_STATE_CANCELED:
		default:
			t.Errorf("an attempt of %s ended %s with %q, want FAILED by the refused connections (or CANCELED by its region's restart)", victim, graph.ExecutionStateName(e.State), e.FailureCause)
		}
	}
	t.Logf("%d of the %d attempts on %s failed with the loss's cause (the others, if any, were cancelled by their region's restart first)", refused, len(onVictim), victim)
	// Memberlist's dead event: the leader logs it when gossip reports the TM gone.
	if _, gone, ok := logLine(t, jm.LogPath, "gossip reports a task manager gone", "tm="+victim); ok && !gone.After(lost) {
		t.Fatalf("gossip reported %s gone at %s, not after its loss at %s", victim, gone.Format(time.StampMilli), lost.Format(time.StampMilli))
	} else if ok {
		t.Logf("gossip reported %s gone %v after the loss", victim, gone.Sub(lost).Round(time.Millisecond))
	}
	changed := testcluster.Changed(testcluster.Attempts(before), testcluster.Attempts(after))
	if !slices.Equal(changed, want) {
		t.Fatalf("restarted %v, want exactly the regions holding %s's attempts: %v", changed, victim, want)
	}
	t.Logf("killed %s; lost %v later (%s); %d of %d tasks restarted", victim, lost.Sub(killed).Round(time.Millisecond), line[strings.Index(line, "cause="):], len(changed), len(testcluster.Attempts(before)))
}

// defaultRaftProcs are fastProcs with hashicorp's default Raft timings.
var defaultRaftProcs = proccluster.LocalOptions{
	Slots:   4,
	JMFlags: []string{"--gossip-profile", "local", "--heartbeat-timeout", "7s"},
	TMFlags: []string{"--gossip-profile", "local", "--heartbeat-interval", "500ms"},
}

// TestLeaderAndTaskManagerKilledReconciliationDoesNotWait runs real processes with default
// Raft timings: the leader and a TM holding tasks are killed together. The new leader's
// reconciliation does not wait for the dead TM: its record shows it "dead", proven by refused
// connections, before the report deadline (10s, the default) and before gossip reports it gone.
// The TM is restarted; every task runs again, and only the regions that held its attempts
// restarted.
func TestLeaderAndTaskManagerKilledReconciliationDoesNotWait(t *testing.T) {
	t.Parallel()
	const reportDeadline = 10 * time.Second // jmnode's default --report-deadline
	d := newProcessCluster(t, defaultRaftProcs)
	ctx := context.Background()
	before := submitChain(t, d, "killed-together", 3)
	leader, err := d.waitLeader(ctx, "", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	victim := busiestTM(before)
	want := regionsOf(t, before, victim)
	jm, tm := d.Proc(leader.LeaderId), d.Proc(victim)
	killed := time.Now()
	if err := jm.Kill(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := tm.Kill(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	var rec *pb.ReconciliationRecord
	var next *pb.ClusterStatusResponse
	if err := d.waitFor(ctx, 60*time.Second, "a new leader with a completed reconciliation", func(cs *pb.ClusterStatusResponse) bool {
		if cs.LeaderId == "" || cs.LeaderId == jm.Name || cs.Epoch <= leader.Epoch || cs.Reconciling {
			return false
		}
		for _, r := range cs.Reconciliations {
			if r.Epoch == cs.Epoch && r.Outcome == "completed" {
				rec, next = r, cs
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatal(err)
	}
	var dead *pb.ReconciliationReport
	for _, r := range rec.Reports {
		if r.TmId == victim {
			dead = r
		}
	}
	if dead == nil || dead.Outcome != "dead" || !strings.Contains(dead.Detail, "connection refused") {
		t.Fatalf("the record of epoch %d shows %s as %v, want dead by refused connections (reports: %v)", rec.Epoch, victim, dead, rec.Reports)
	}
	if took := time.Duration(dead.At-rec.StartedAt) * time.Millisecond; took >= reportDeadline || rec.CollectedAt-rec.StartedAt >= reportDeadline.Milliseconds() {
		t.Fatalf("%s proven dead %v and collection ended %dms after the reconciliation began; the report deadline is %v", victim, took, rec.CollectedAt-rec.StartedAt, reportDeadline)
	}
	newLeader := d.Proc(next.LeaderId)
	if _, gone, ok := logLine(t, newLeader.LogPath, "gossip reports a task manager gone", "tm="+victim); ok && gone.UnixMilli() <= dead.At {
		t.Fatalf("gossip reported %s gone at %s, before it was proven dead at %s", victim, gone.Format(time.StampMilli), time.UnixMilli(dead.At).Format(time.StampMilli))
	}
	t.Logf("killed %s (leader) and %s; %s leads at epoch %d; reconciliation began %v after the kill, proved %s dead %dms later (%s), collection took %dms",
		jm.Name, victim, next.LeaderId, next.Epoch, time.UnixMilli(rec.StartedAt).Sub(killed).Round(time.Millisecond), victim, dead.At-rec.StartedAt, dead.Detail, rec.CollectedAt-rec.StartedAt)

	if err := tm.Start(); err != nil {
		t.Fatal(err)
	}
	if err := jm.Start(); err != nil {
		t.Fatal(err)
	}
	if err := d.waitTMs(ctx, 30*time.Second, 3, 0); err != nil {
		t.Fatal(err)
	}
	after, err := d.waitJob(ctx, before.JobGraph.JobId, 60*time.Second, func(r *pb.JobRecord) bool {
		return allRunning(r) && len(testcluster.Changed(testcluster.Attempts(before), testcluster.Attempts(r))) >= len(want)
	})
	if err != nil {
		t.Fatal(err)
	}
	changed := testcluster.Changed(testcluster.Attempts(before), testcluster.Attempts(after))
	if !slices.Equal(changed, want) {
		t.Fatalf("restarted %v, want exactly the regions holding %s's attempts: %v", changed, victim, want)
	}
	t.Logf("%s restarted; every task RUNNING, %d of %d restarted (the regions that held its attempts)", victim, len(changed), len(testcluster.Attempts(before)))
}

// TestStalledLeaderDeclaresNoTaskManagerLost runs real processes: the leader is stopped
// (SIGSTOP) for longer than the TaskManager heartbeat timeout — a new leader is elected and
// reconciles meanwhile — and then continued. Neither the resumed leader, which heard from no
// TM while it was stopped, nor the new one declares a TM lost, and nothing restarts.
func TestStalledLeaderDeclaresNoTaskManagerLost(t *testing.T) {
	t.Parallel()
	// The least the isolation rule accepts with the default pool timings (jobmaster.Config.Validate),
	// and above the TMs' 5s RPC timeout: a TM whose heartbeat hangs on the stopped leader reaches
	// the new one only after it.
	const hbTimeout = 7 * time.Second
	o := fastProcs
	o.JMFlags = append(slices.Clone(fastProcs.JMFlags), "--heartbeat-timeout", hbTimeout.String())
	d := newProcessCluster(t, o)
	ctx := context.Background()
	before := submitChain(t, d, "stalled-leader", 2)
	leader, err := d.waitLeader(ctx, "", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	old := d.Proc(leader.LeaderId)
	if err := old.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	var now *pb.ClusterStatusResponse
	if err := d.waitFor(ctx, 30*time.Second, "a new leader with a completed reconciliation, the heartbeat timeout after the stop", func(cs *pb.ClusterStatusResponse) bool {
		if cs.LeaderId == "" || cs.LeaderId == old.Name || cs.Epoch <= leader.Epoch || cs.Reconciling || time.Since(stopped) < hbTimeout+time.Second {
			return false
		}
		for _, r := range cs.Reconciliations {
			if r.Epoch == cs.Epoch && r.Outcome == "completed" {
				now = cs
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatal(err)
	}
	if err := old.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s stopped for %v; %s leads at epoch %d", old.Name, time.Since(stopped).Round(time.Millisecond), now.LeaderId, now.Epoch)
	if err := d.waitFor(ctx, 30*time.Second, old.Name+" a follower of the new leader", func(cs *pb.ClusterStatusResponse) bool {
		return cs.NodeId == old.Name && cs.LeaderId == now.LeaderId && cs.Epoch >= now.Epoch
	}); err != nil {
		t.Fatal(err)
	}
	// The resumed leader has run its tick and dropped its term; the new one has led for longer
	// than a heartbeat timeout.
	if err := d.waitFor(ctx, 30*time.Second, "the resumed leader's term revoked", func(cs *pb.ClusterStatusResponse) bool {
		revoked := logLines(t, old.LogPath, "leadership revoked")
		return len(revoked) > 0 && revoked[len(revoked)-1].at.After(stopped) && cs.LeaderId == now.LeaderId
	}); err != nil {
		t.Fatal(err)
	}
	for _, p := range d.JMs {
		if line, _, ok := logLine(t, p.LogPath, "task manager lost"); ok {
			t.Errorf("%s declared a TaskManager lost: %s", p.Name, line)
		}
	}
	after, _, err := d.getJob(before.JobGraph.JobId)
	if err != nil {
		t.Fatal(err)
	}
	if changed := testcluster.Changed(testcluster.Attempts(before), testcluster.Attempts(after)); len(changed) != 0 || after.Restarts != 0 || !allRunning(after) {
		t.Fatalf("after the stall: %s, %d restarts, attempts changed: %v", graph.JobStatusName(after.Status), after.Restarts, changed)
	}
}
