package reconcile_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/graph"
	tc "github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// These tests run three JobMasters and three TaskManagers in the test process over real
// loopback sockets (Raft, gRPC, gossip), and kill replicas under running jobs.

func running(rec *pb.JobRecord) bool { return tc.AllRunning(rec) }

// runningJob submits jg and waits until the job and every task run; it returns the record.
func runningJob(t *testing.T, c *tc.Cluster, jg *pb.JobGraph) (string, *pb.JobRecord) {
	t.Helper()
	id := c.Submit(jg)
	rec := c.WaitJob(id, "the job RUNNING with every task RUNNING", 30*time.Second, running)
	return id, rec
}

// sinkGrows waits until the job's checksum sinks counted more than n records and checks they
// never saw a gap or a duplicate.
func sinkGrows(t *testing.T, c *tc.Cluster, id string, n int64) tc.SinkTotals {
	t.Helper()
	var s tc.SinkTotals
	tc.WaitFor(t, 20*time.Second, fmt.Sprintf("the sinks past %d records", n), func() (bool, string) {
		s = c.Sinks("checksum", id)
		return s.Count > n, fmt.Sprintf("%+v", s)
	})
	if s.Gaps != 0 || s.Duplicates != 0 {
		t.Fatalf("sink output has %d gaps and %d duplicates", s.Gaps, s.Duplicates)
	}
	return s
}

// regionsOn returns the subtask indexes (the failover regions of a FORWARD chain) that have
// an attempt on tmID.
func regionsOn(rec *pb.JobRecord, tmID string) map[int32]bool {
	out := map[int32]bool{}
	for _, v := range rec.ExecutionGraph.Vertices {
		for _, ev := range v.Subtasks {
			if ev.Current.GetSlot().GetTmId() == tmID {
				out[ev.SubtaskIndex] = true
			}
		}
	}
	return out
}

// subtaskOf parses the subtask index out of "vertex[i]".
func subtaskOf(key string) int32 {
	var i int32
	fmt.Sscanf(key[strings.Index(key, "[")+1:], "%d", &i)
	return i
}

// checkOnlyRegionsRestarted: executions of the affected regions have a new attempt, every
// other execution kept its attempt id and number.
func checkOnlyRegionsRestarted(t *testing.T, before, after map[string]tc.Attempt, affected map[int32]bool) {
	t.Helper()
	changed := map[string]bool{}
	for _, k := range tc.Changed(before, after) {
		changed[k] = true
	}
	for k := range before {
		switch {
		case affected[subtaskOf(k)] && !changed[k]:
			t.Errorf("%s is in a failed region but kept attempt %v", k, after[k])
		case !affected[subtaskOf(k)] && changed[k]:
			t.Errorf("%s is outside the failed regions but was restarted: %v -> %v", k, before[k], after[k])
		case affected[subtaskOf(k)] && after[k].Number <= before[k].Number:
			t.Errorf("%s restarted without a higher attempt number: %v -> %v", k, before[k], after[k])
		}
	}
}

func countOn(rec *pb.JobRecord, tmID string) int64 {
	var n int64
	for _, v := range rec.ExecutionGraph.Vertices {
		for _, ev := range v.Subtasks {
			if ev.Current.GetSlot().GetTmId() == tmID {
				n++
			}
		}
	}
	return n
}

// silentTMJob is a streaming chain whose restart delay (4.5 s) outlasts the heartbeat timeout
// the silent-TM tests use (4 s; the TMs' fence is half of it, long enough for a loaded
// machine), so a region restart never races the moment the leader gives up on a TM.
func silentTMJob(name string) *pb.JobGraph {
	jg := tc.StreamingChain(name, 3, 100, 0)
	jg.RestartStrategy.DelayMs = 4500
	return jg
}

// checkSilentCounts: the silent TM's executions are missing; every other execution is kept
// running, except members of the silent TM's regions that failed because their pipelined
// neighbour on the silent TM went away.
func checkSilentCounts(t *testing.T, c *pb.ReconciliationCounts, onSilent int64, affected map[int32]bool) {
	t.Helper()
	inAffected := int64(3*len(affected)) - onSilent // the other members of the affected regions
	switch {
	case c.Executions != 9 || c.TmsMissing != 1 || c.Missing != onSilent:
		t.Fatalf("counts %v, want 9 executions, %d missing on 1 silent TM", c, onSilent)
	case c.KeptRunning+c.Failed+c.Canceled != 9-onSilent:
		t.Fatalf("counts %v: kept, failed and canceled do not add up to %d", c, 9-onSilent)
	case c.Failed+c.Canceled > inAffected:
		t.Fatalf("counts %v: more failures than the %d other members of the silent TM's regions", c, inAffected)
	}
}

// pickTM returns a TM that holds attempts of some but not all regions. The scheduler spreads
// a region's members across the TMs in turn, so with four TMs and a chain of three vertices
// every TM but one holds only some regions.
func pickTM(t *testing.T, c *tc.Cluster, rec *pb.JobRecord) *tc.TM {
	t.Helper()
	p := rec.ExecutionGraph.Vertices[0].Parallelism
	for _, tm := range c.TMs {
		if n := len(regionsOn(rec, tm.ID)); n > 0 && n < int(p) {
			return tm
		}
	}
	t.Fatalf("no TM holds some but not all regions: %v", tc.Attempts(rec))
	return nil
}

// TestLeaderKillStreamingJob is the product's promise: the leader is killed under a running
// streaming job; a new leader reconciles; the job passes through RECONCILING and is RUNNING
// again; every execution keeps its attempt id and number; no task restarts; the checksum sinks
// continue with no gap and no duplicate.
func TestLeaderKillStreamingJob(t *testing.T) {
	c := tc.New(t, tc.Options{JMs: 3, TMs: 3})
	id, rec := runningJob(t, c, tc.StreamingChain("leader-kill", 3, 200, 0))
	sinkGrows(t, c, id, 50)
	l1 := c.Leader()
	e1 := l1.A.JM.Epoch()
	before := tc.Attempts(rec)
	hist := len(c.Job(id).History)

	c.KillJM(l1)
	l2 := c.Leader()
	e2 := l2.A.JM.Epoch()
	if l2 == l1 || e2 <= e1 {
		t.Fatalf("new leader %s at epoch %d, old %s at %d", l2.ID, e2, l1.ID, e1)
	}
	r := c.Reconciliation(l2, e2, "completed", 20*time.Second)
	after := c.WaitJob(id, "the job RUNNING again", 20*time.Second, running)
	seen := tc.HistoryAfter(after, hist)
	if !tc.Subsequence(seen, "RECONCILING", "RUNNING") {
		t.Fatalf("job statuses after the kill %v, want RECONCILING then RUNNING", seen)
	}
	if changed := tc.Changed(before, tc.Attempts(after)); len(changed) != 0 {
		t.Fatalf("executions changed attempt across the failover: %v", changed)
	}
	if after.Restarts != 0 {
		t.Fatalf("job restarts %d, want 0", after.Restarts)
	}
	want := &pb.ReconciliationCounts{Executions: 9, KeptRunning: 9, Reports: 3}
	if !proto.Equal(r.Counts, want) {
		t.Fatalf("reconciliation counts %v, want %v", r.Counts, want)
	}
	if r.StartedAt == 0 || r.EndedAt < r.StartedAt || r.LeaderId != l2.ID {
		t.Fatalf("reconciliation record %v", r)
	}
	checkPhases(t, r)
	for i, rep := range r.Reports {
		if rep.Outcome != "reported" || rep.Executions != 3 || !rep.AsExpected || rep.At < r.StartedAt || rep.At > r.CollectedAt {
			t.Fatalf("report %d in the record: %v (record %v)", i, rep, r)
		}
	}
	if len(r.Reports) != 3 {
		t.Fatalf("%d reports in the record, want 3: %v", len(r.Reports), r.Reports)
	}
	// The sinks keep growing after the reconciliation, with no gap and no duplicate.
	s := sinkGrows(t, c, id, 0)
	sinkGrows(t, c, id, s.Count+100)
	if re := c.Restarted(id); len(re) != 0 {
		t.Fatalf("tasks started again: %v", re)
	}
	if n := len(c.Events(id)); n != 9 {
		t.Fatalf("%d task lifecycle events, want 9 starts and no stop: %v", n, c.Events(id))
	}
	t.Logf("epoch %d -> %d; reconciliation took %d ms: %v", e1, e2, r.EndedAt-r.StartedAt, r.Counts)
}

// TestFinishedWhileNoLeader: a bounded job finishes while no leader exists (two of three
// replicas down); the next leader finds every task FINISHED in the TMs' retained states and
// the job FINISHED, with no restart; the TMs drop the acknowledged states.
func TestFinishedWhileNoLeader(t *testing.T) {
	c := tc.New(t, tc.Options{JMs: 3, TMs: 3})
	id, rec := runningJob(t, c, tc.StreamingChain("bounded", 3, 500, 2000))
	before := tc.Attempts(rec)
	hist := len(rec.History)
	// The reconciliation below counts only executions that were not terminal in the committed
	// state, so "9 finished" shows they finished during the gap.
	e0 := c.Leader().A.JM.Epoch()
	stopped := c.StopQuorum()

	tc.WaitFor(t, 30*time.Second, "every task FINISHED on the TMs while no leader exists", func() (bool, string) {
		n, desc := 0, []string{}
		for _, tm := range c.TMs {
			for _, ti := range tm.A.TM.Tasks() {
				if ti.JobID == id {
					desc = append(desc, fmt.Sprintf("%s[%d]=%s", ti.VertexID, ti.Subtask, graph.ExecutionStateName(ti.State)))
					if ti.State == stFinished && ti.Retained {
						n++
					}
				}
			}
		}
		return n == 9, strings.Join(desc, " ")
	})
	c.RestartAll(stopped)
	r := c.CompletedAfter(e0, 30*time.Second)
	after := c.WaitJob(id, "the job FINISHED", 20*time.Second, func(rec *pb.JobRecord) bool {
		return rec.Status == jobFinished
	})
	if seen := tc.HistoryAfter(after, hist); !tc.Subsequence(seen, "RECONCILING", "FINISHED") || tc.Subsequence(seen, "FAILING") {
		t.Fatalf("job statuses after the gap %v, want RECONCILING then FINISHED", seen)
	}
	if r.Counts.Finished != 9 || r.Counts.Failed+r.Counts.Missing+r.Counts.KeptRunning != 0 {
		t.Fatalf("reconciliation counts %v, want 9 finished", r.Counts)
	}
	if changed := tc.Changed(before, tc.Attempts(after)); len(changed) != 0 || after.Restarts != 0 {
		t.Fatalf("attempts changed %v, restarts %d", changed, after.Restarts)
	}
	if s := c.Sinks("checksum", id); s.Count != 3*2000 || s.Gaps != 0 || s.Duplicates != 0 {
		t.Fatalf("sinks %+v, want 6000 records, no gap, no duplicate", s)
	}
	tc.WaitFor(t, 10*time.Second, "the TMs drop the acknowledged terminal states", func() (bool, string) {
		var left []string
		for _, tm := range c.TMs {
			for _, ti := range tm.A.TM.Tasks() {
				if ti.JobID == id {
					left = append(left, tm.ID+":"+ti.VertexID)
				}
			}
		}
		return len(left) == 0, strings.Join(left, " ")
	})
}

// TestTaskFinishedDuringGapCountedFinished: one chain of a streaming job finishes during the
// leader gap while another keeps running; the finished tasks are reported from the TMs'
// retained state and counted FINISHED, the others kept RUNNING, and the job is RUNNING.
func TestTaskFinishedDuringGapCountedFinished(t *testing.T) {
	c := tc.New(t, tc.Options{JMs: 3, TMs: 3})
	bounded := tc.StreamingChain("two-chains", 2, 500, 1000)
	endless := tc.StreamingChain("x", 2, 100, 0)
	for _, v := range endless.Vertices {
		v.Id = "live-" + v.Id
	}
	for _, e := range endless.Edges {
		e.Source, e.Target = "live-"+e.Source, "live-"+e.Target
	}
	endless.Vertices[2].GetOperator().GetChecksumSink().Path = "live-{job}-{subtask}.json"
	bounded.Vertices = append(bounded.Vertices, endless.Vertices...)
	bounded.Edges = append(bounded.Edges, endless.Edges...)
	id, rec := runningJob(t, c, bounded)
	before := tc.Attempts(rec)
	hist := len(rec.History)
	e0 := c.Leader().A.JM.Epoch()
	stopped := c.StopQuorum()

	var retained []string
	retainedOn := map[string]bool{}
	tc.WaitFor(t, 30*time.Second, "the bounded chain FINISHED and retained on the TMs", func() (bool, string) {
		retained = nil
		clear(retainedOn)
		var desc []string
		for _, tm := range c.TMs {
			for _, ti := range tm.A.TM.Tasks() {
				if ti.JobID != id {
					continue
				}
				desc = append(desc, fmt.Sprintf("%s[%d]=%s", ti.VertexID, ti.Subtask, graph.ExecutionStateName(ti.State)))
				if ti.State == stFinished && ti.Retained {
					retained = append(retained, ti.AttemptID)
					retainedOn[tm.ID] = true
				}
			}
		}
		return len(retained) == 6, strings.Join(desc, " ")
	})
	c.RestartAll(stopped)
	r := c.CompletedAfter(e0, 30*time.Second)
	if r.Counts.Finished != 6 || r.Counts.KeptRunning != 6 || r.Counts.Failed+r.Counts.Missing != 0 {
		t.Fatalf("reconciliation counts %v, want 6 finished and 6 kept running", r.Counts)
	}
	// A TM that holds a FINISHED task, which no expectation names, sends its whole report; the
	// others answer as expected.
	for _, rep := range r.Reports {
		if rep.Outcome != "reported" || rep.AsExpected == retainedOn[rep.TmId] {
			t.Fatalf("report of %s: %v; it holds FINISHED tasks: %v", rep.TmId, rep, retainedOn[rep.TmId])
		}
	}
	after := c.WaitJob(id, "the job RUNNING with the bounded chain FINISHED", 20*time.Second, func(rec *pb.JobRecord) bool {
		return rec.Status == jobRunning
	})
	if seen := tc.HistoryAfter(after, hist); !tc.Subsequence(seen, "RECONCILING", "RUNNING") || tc.Subsequence(seen, "FAILING") {
		t.Fatalf("job statuses after the gap %v", seen)
	}
	for _, a := range retained {
		if e := tc.FindExecution(after, a); e == nil || e.State != stFinished {
			t.Fatalf("retained attempt %s is %v in the graph, want FINISHED", a, e)
		}
	}
	if changed := tc.Changed(before, tc.Attempts(after)); len(changed) != 0 || after.Restarts != 0 {
		t.Fatalf("attempts changed %v, restarts %d", changed, after.Restarts)
	}
	if re := c.Restarted(id); len(re) != 0 {
		t.Fatalf("tasks started again: %v", re)
	}
}

// TestSilentTMFailsOnlyItsRegions: a TM that gossip says is alive but that does not report by
// the deadline fails its executions; the job goes FAILING and only the regions with an attempt
// on that TM restart, with new attempt numbers.
func TestSilentTMFailsOnlyItsRegions(t *testing.T) {
	c := tc.New(t, tc.Options{JMs: 3, TMs: 4, Slots: 6, ReportDeadline: 2 * time.Second, HeartbeatTimeout: 4 * time.Second})
	id, rec := runningJob(t, c, silentTMJob("silent"))
	silent := pickTM(t, c, rec)
	affected := regionsOn(rec, silent.ID)
	onSilent := countOn(rec, silent.ID)
	before := tc.Attempts(rec)
	hist := len(rec.History)

	e0 := c.Leader().A.JM.Epoch()
	c.KillJM(c.Leader())
	c.SilenceTM(silent)
	r := c.CompletedAfter(e0, 30*time.Second)
	checkSilentCounts(t, r.Counts, onSilent, affected)
	checkPhases(t, r)
	var missing []string
	for _, rep := range r.Reports {
		if rep.Outcome != "reported" {
			missing = append(missing, rep.TmId+" "+rep.Outcome)
			if rep.At != r.CollectedAt {
				t.Errorf("%s: %s at %d, collection ended at %d", rep.TmId, rep.Outcome, rep.At, r.CollectedAt)
			}
		}
	}
	if len(missing) != 1 || missing[0] != silent.ID+" missing" {
		t.Errorf("TMs without a report in the record: %v, want %s missing", missing, silent.ID)
	}
	after := c.WaitJob(id, "the failed regions restarted and the job RUNNING", 30*time.Second, func(rec *pb.JobRecord) bool {
		return running(rec) && len(tc.Changed(before, tc.Attempts(rec))) > 0
	})
	if seen := tc.HistoryAfter(after, hist); !tc.Subsequence(seen, "RECONCILING", "FAILING", "RESTARTING", "RUNNING") {
		t.Fatalf("job statuses %v, want RECONCILING, FAILING, RESTARTING, RUNNING", seen)
	}
	checkOnlyRegionsRestarted(t, before, tc.Attempts(after), affected)
	for k, a := range tc.Attempts(after) {
		if a.TM == silent.ID {
			t.Errorf("%s was placed on the silent TM again", k)
		}
	}
	if after.Restarts < 1 {
		t.Errorf("restarts %d, want at least 1", after.Restarts)
	}
}

// TestTaskFailedDuringGapRestartsItsRegion: a task fails while no leader exists; the next
// leader reconciles it FAILED, the job goes FAILING and only that task's region restarts.
func TestTaskFailedDuringGapRestartsItsRegion(t *testing.T) {
	c := tc.New(t, tc.Options{JMs: 3, TMs: 3})
	id, rec := runningJob(t, c, tc.StreamingChain("fail-in-gap", 3, 100, 0))
	before := tc.Attempts(rec)
	hist := len(rec.History)
	victim := before["map[1]"]
	e0 := c.Leader().A.JM.Epoch()
	stopped := c.StopQuorum()

	if err := c.TMByID(victim.TM).A.TM.FailTask(victim.ID, "injected during the leader gap"); err != nil {
		t.Fatal(err)
	}
	tc.WaitFor(t, 10*time.Second, "the task FAILED on its TM", func() (bool, string) {
		for _, ti := range c.TMByID(victim.TM).A.TM.Tasks() {
			if ti.AttemptID == victim.ID {
				return ti.State == stFailed, graph.ExecutionStateName(ti.State)
			}
		}
		return false, "task not found"
	})
	c.RestartAll(stopped)
	r := c.CompletedAfter(e0, 30*time.Second)
	if r.Counts.Failed < 1 {
		t.Fatalf("reconciliation counts %v, want the failed task counted", r.Counts)
	}
	after := c.WaitJob(id, "the region restarted and the job RUNNING", 30*time.Second, func(rec *pb.JobRecord) bool {
		return running(rec) && len(tc.Changed(before, tc.Attempts(rec))) > 0
	})
	if seen := tc.HistoryAfter(after, hist); !tc.Subsequence(seen, "RECONCILING", "FAILING", "RUNNING") {
		t.Fatalf("job statuses %v, want RECONCILING, FAILING, ..., RUNNING", seen)
	}
	if e := tc.FindExecution(after, victim.ID); e == nil || e.State != stFailed || !strings.Contains(e.FailureCause, "injected") {
		t.Fatalf("the failed attempt in the graph: %v", e)
	}
	checkOnlyRegionsRestarted(t, before, tc.Attempts(after), map[int32]bool{1: true})
}

// TestLeaderKilledDuringReconciling: the window is held open by a silent TM; the reconciling
// leader is killed; the next leader abandons the earlier record and completes its own with the
// same outcome (the silent TM's executions failed, every other one kept).
func TestLeaderKilledDuringReconciling(t *testing.T) {
	c := tc.New(t, tc.Options{JMs: 3, TMs: 4, Slots: 6, ReportDeadline: 6 * time.Second, HeartbeatTimeout: 4 * time.Second})
	id, rec := runningJob(t, c, silentTMJob("kill-mid-way"))
	silent := pickTM(t, c, rec)
	onSilent := countOn(rec, silent.ID)
	affected := regionsOn(rec, silent.ID)
	before := tc.Attempts(rec)

	l1 := c.Leader()
	c.KillJM(l1)
	c.SilenceTM(silent)
	l2 := c.ReconcilingLeader(20 * time.Second)
	e2 := l2.A.JM.Epoch()
	c.Reconciliation(l2, e2, "in_progress", 5*time.Second)
	// Restore the quorum before killing the second leader.
	c.StartJM(l1)
	tc.WaitFor(t, 10*time.Second, l1.ID+" caught up", func() (bool, string) {
		return l1.A.State.LeaderEpoch() == e2, fmt.Sprintf("epoch %d", l1.A.State.LeaderEpoch())
	})
	if !l2.A.JM.Reconciling() {
		t.Fatalf("%s finished reconciling before it could be killed; the window is too short", l2.ID)
	}
	c.KillJM(l2)

	l3 := c.Leader()
	e3 := l3.A.JM.Epoch()
	if e3 <= e2 {
		t.Fatalf("epoch %d after %d", e3, e2)
	}
	r3 := c.Reconciliation(l3, e3, "completed", 20*time.Second)
	r2 := c.Reconciliation(l3, e2, "abandoned", 5*time.Second)
	if r2.Counts != nil && r2.Counts.Executions != 0 {
		t.Fatalf("the abandoned record has counts: %v", r2.Counts)
	}
	checkSilentCounts(t, r3.Counts, onSilent, affected)
	if r3.Counts.Reports != int64(len(c.TMs)-1) {
		t.Fatalf("%d reports, want %d", r3.Counts.Reports, len(c.TMs)-1)
	}
	after := c.WaitJob(id, "the failed regions restarted and the job RUNNING", 30*time.Second, func(rec *pb.JobRecord) bool {
		return running(rec) && len(tc.Changed(before, tc.Attempts(rec))) > 0
	})
	checkOnlyRegionsRestarted(t, before, tc.Attempts(after), affected)
	var epochs []string
	for _, r := range l3.A.State.Reconciliations() {
		epochs = append(epochs, fmt.Sprintf("%d:%s", r.Epoch, r.Outcome))
	}
	sort.Strings(epochs)
	t.Logf("reconciliation records: %v", epochs)
}
