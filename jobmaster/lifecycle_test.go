package jobmaster_test

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/internal/failpoint"
	"github.com/jmcluster/jmcluster/operator"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

const (
	jobRunning  = pb.JobStatus_JOB_STATUS_RUNNING
	jobFinished = pb.JobStatus_JOB_STATUS_FINISHED
	jobCanceled = pb.JobStatus_JOB_STATUS_CANCELED
	jobFailed   = pb.JobStatus_JOB_STATUS_FAILED
	stRunning   = pb.ExecutionState_EXECUTION_STATE_RUNNING
	stFinished  = pb.ExecutionState_EXECUTION_STATE_FINISHED
	stCanceled  = pb.ExecutionState_EXECUTION_STATE_CANCELED
	stFailed    = pb.ExecutionState_EXECUTION_STATE_FAILED
)

// TestBatchJobFinishesWithExpectedSums: a bounded source -> filter -> (ALL_TO_ALL, BLOCKING)
// -> checksum sink job, scheduled by stage over three TMs, reaches FINISHED with every task
// FINISHED, and the sinks together hold exactly the per-key counts and sums of the odd values.
func TestBatchJobFinishesWithExpectedSums(t *testing.T) {
	c := newCluster(t)
	const parallelism, count, keys = 3, 2000, 5
	id := c.Submit(testcluster.BatchKeyedSum("batch", parallelism, count, keys))
	rec := c.WaitJob(id, "batch job FINISHED", 30*time.Second, allInState(jobFinished, stFinished))

	want := map[string]operator.KeyStat{}
	var wantCount, wantSum int64
	for s := 0; s < parallelism; s++ { // every source subtask emits start+i, i < count
		for i := int64(0); i < count; i++ {
			v := i
			if v%2 != 1 {
				continue
			}
			k := strconv.FormatInt(v%keys, 10)
			ks := want[k]
			ks.Count++
			ks.Sum += v
			want[k] = ks
			wantCount++
			wantSum += v
		}
	}
	got := c.Sinks("batch", id)
	if got.Files != parallelism {
		t.Fatalf("%d sink files, want %d", got.Files, parallelism)
	}
	if got.Count != wantCount || got.Sum != wantSum {
		t.Fatalf("sinks hold count %d sum %d, want count %d sum %d", got.Count, got.Sum, wantCount, wantSum)
	}
	if len(got.Keys) != len(want) {
		t.Fatalf("sinks hold keys %v, want %v", got.Keys, want)
	}
	for k, w := range want {
		if got.Keys[k] != w {
			t.Errorf("key %s: got %+v, want %+v", k, got.Keys[k], w)
		}
	}
	if got.Duplicates != 0 { // gaps are expected: the filter drops every even sequence number
		t.Errorf("%d duplicates, want none", got.Duplicates)
	}
	if rec.Restarts != 0 {
		t.Errorf("%d restarts in a run without failures", rec.Restarts)
	}
}

// TestStreamingJobRunsRegionPerTaskManager: an unbounded job reaches RUNNING with every task
// RUNNING on the TM the graph names; the placement keeps each pipelined region (one chain
// source[i] -> map[i] -> sink[i]) in one shared slot of one TM and spreads the regions over the
// TMs, so FORWARD records never leave a TM; and a chain's sink keeps receiving records without
// gap or duplicate. (Records between TMs: taskmanager's pipeline tests, and the split regions
// of wide jobs.)
func TestStreamingJobRunsRegionPerTaskManager(t *testing.T) {
	c := newCluster(t)
	const parallelism = 3
	id := c.Submit(testcluster.StreamingChain("stream", parallelism, 500, 0))
	rec := waitAllRunning(t, c, id)
	atts := testcluster.Attempts(rec)

	// Every TM runs exactly the attempts the graph places on it.
	perTM := map[string]int{}
	for key, a := range atts {
		perTM[a.TM]++
		tm := tmByID(t, c, a.TM)
		found := false
		for _, ti := range tm.A.TM.Tasks() {
			if ti.AttemptID == a.ID {
				found = true
				if ti.State != stRunning || ti.AttemptNumber != a.Number {
					t.Errorf("%s on %s: state %v attempt number %d, graph says RUNNING #%d", key, a.TM, ti.State, ti.AttemptNumber, a.Number)
				}
			}
		}
		if !found {
			t.Errorf("%s: attempt %s is not on %s (tasks: %s)", key, a.ID, a.TM, tmTasks(tm))
		}
	}
	if len(perTM) != 3 {
		t.Fatalf("tasks placed on %d task managers, want all 3: %v", len(perTM), perTM)
	}

	// Each chain in one slot of one TM, each TM holding one chain.
	chainOn := map[string]int32{}
	for i := int32(0); i < parallelism; i++ {
		src, mp, sink := atts[fmt.Sprintf("source[%d]", i)], atts[fmt.Sprintf("map[%d]", i)], atts[fmt.Sprintf("sink[%d]", i)]
		if src.TM != mp.TM || mp.TM != sink.TM {
			t.Fatalf("chain %d crosses task managers: %v", i, atts)
		}
		if prev, ok := chainOn[src.TM]; ok {
			t.Fatalf("chains %d and %d both on %s: %v", prev, i, src.TM, atts)
		}
		chainOn[src.TM] = i
		slots := map[int32]bool{}
		for _, ev := range testcluster.Executions(rec) {
			if ev.SubtaskIndex == i {
				slots[ev.Current.Slot.Index] = true
			}
		}
		if len(slots) != 1 {
			t.Fatalf("chain %d in slots %v of %s, want one shared slot", i, slots, src.TM)
		}
		if free := tmByID(t, c, src.TM).A.TM.FreeSlots(); free != c.Opts.Slots-1 {
			t.Fatalf("%s: %d of %d slots free with one chain in one slot", src.TM, free, c.Opts.Slots)
		}
	}
	chain := int32(0)
	sinkAt := atts[fmt.Sprintf("sink[%d]", chain)]
	path := filepath.Join(tmByID(t, c, sinkAt.TM).WorkDir, fmt.Sprintf("checksum-%s-%d.json", id, chain))
	read := func() (operator.Checksum, string) {
		cs, err := operator.ReadChecksum(path)
		if err != nil {
			return cs, err.Error()
		}
		return cs, fmt.Sprintf("count %d", cs.Count)
	}
	var first int64
	testcluster.WaitFor(t, 10*time.Second, "records at chain 0's sink", func() (bool, string) {
		cs, seen := read()
		first = cs.Count
		return cs.Count > 0, seen
	})
	testcluster.WaitFor(t, 10*time.Second, "chain 0's sink count to grow", func() (bool, string) {
		cs, seen := read()
		return cs.Count > first+100, fmt.Sprintf("%s (first %d)", seen, first)
	})
	cs, _ := read()
	for o, st := range cs.Origins {
		if st.Gaps != 0 || st.Duplicates != 0 {
			t.Errorf("origin %s: gaps %d duplicates %d", o, st.Gaps, st.Duplicates)
		}
	}
	if after := c.Job(id); len(testcluster.Changed(atts, testcluster.Attempts(after))) != 0 || after.Restarts != 0 {
		t.Fatalf("tasks restarted in a run without failures: %s", testcluster.Describe(after))
	}
}

// TestCancelFreesEverySlot: cancelling a running job (through a follower) ends it CANCELED
// with every task stopped on the TMs too, every TM slot free, and the leader agreeing: a job
// that needs every slot of the cluster is then deployed in full.
func TestCancelFreesEverySlot(t *testing.T) {
	c := newCluster(t)
	id := c.Submit(testcluster.StreamingChain("cancel", 3, 200, 0))
	rec := waitAllRunning(t, c, id)
	atts := testcluster.Attempts(rec)

	if _, err := c.Client(c.Follower()).CancelJob(ctxT(t), &pb.CancelJobRequest{JobId: id}); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	c.WaitJob(id, "job CANCELED with every task CANCELED", 20*time.Second, allInState(jobCanceled, stCanceled))

	// On the TMs every task has stopped: CANCELED, or FAILED when its input broke because its
	// producer was cancelled before its own CancelTask arrived (the graph records that as
	// CANCELED, Flink's rule, checked above).
	testcluster.WaitFor(t, 10*time.Second, "every slot free and every task stopped on the TMs", func() (bool, string) {
		for _, tm := range c.TMs {
			if free := tm.A.TM.FreeSlots(); free != c.Opts.Slots {
				return false, fmt.Sprintf("%s: %d of %d slots free", tm.ID, free, c.Opts.Slots)
			}
		}
		for key, a := range atts {
			for _, ti := range tmByID(t, c, a.TM).A.TM.Tasks() {
				if ti.AttemptID == a.ID && ti.State != stCanceled && ti.State != stFailed {
					return false, fmt.Sprintf("%s on %s is %v", key, a.TM, ti.State)
				}
			}
		}
		return true, ""
	})

	// The leader's view: no committed execution holds a slot, so a job needing all twelve
	// slots runs in full.
	for _, ev := range testcluster.Executions(c.Job(id)) {
		if ev.Current.State != stCanceled {
			t.Fatalf("%s[%d] is %v in the leader's state", ev.VertexId, ev.SubtaskIndex, ev.Current.State)
		}
	}
	full := c.Submit(testcluster.StreamingChain("full", 4, 10, 0))
	waitAllRunning(t, c, full)
}

// TestFinishedDelayedPastHeartbeatsIsNotMissing: every task of a bounded streaming job
// finishes, but the TMs' UpdateTaskExecutionState(FINISHED) are held back in their outboxes
// (the hook outbox-after-send holds every outbox worker after its first delivery, RUNNING).
// The heartbeats still list the finished tasks (the TMs retain them until acknowledged), so
// after three more heartbeats of every TM the leader has failed none of them as missing; once
// the updates go through the job FINISHES without a restart.
func TestFinishedDelayedPastHeartbeatsIsNotMissing(t *testing.T) {
	c := newCluster(t)
	failpoint.Set(t, "pause(outbox-after-send)")
	id := c.Submit(testcluster.StreamingChain("delayed", 2, 0, 50))
	c.WaitJob(id, "every task RUNNING (committed)", 30*time.Second, testcluster.AllRunning)
	testcluster.WaitFor(t, 30*time.Second, "every task FINISHED on its TM", func() (bool, string) {
		ts := jobTasks(c, id)
		for _, s := range ts {
			if !strings.HasSuffix(s, ":FINISHED") {
				return false, fmt.Sprint(ts)
			}
		}
		return len(ts) == 6, fmt.Sprint(ts)
	})
	base := map[string]int64{}
	for _, tm := range c.TMs {
		base[tm.ID] = tm.A.TM.Heartbeats()
	}
	testcluster.WaitFor(t, 30*time.Second, "three more heartbeats of every TM", func() (bool, string) {
		seen := ""
		ok := true
		for _, tm := range c.TMs {
			n := tm.A.TM.Heartbeats() - base[tm.ID]
			seen += fmt.Sprintf("%s:%d ", tm.ID, n)
			ok = ok && n >= 3
		}
		return ok, seen
	})
	rec, _ := c.Leader().A.State.Job(id)
	for _, ev := range testcluster.Executions(rec) {
		if s := ev.GetCurrent().GetState(); s != stRunning {
			t.Fatalf("%s[%d] is %s (%s) while its FINISHED waits in the outbox, want RUNNING",
				ev.VertexId, ev.SubtaskIndex, graph.ExecutionStateName(s), ev.GetCurrent().GetFailureCause())
		}
	}
	failpoint.Release(failpoint.OutboxAfterSend)
	done := c.WaitJob(id, "the job FINISHED", 30*time.Second, allInState(jobFinished, stFinished))
	if done.Restarts != 0 {
		t.Fatalf("%d restarts", done.Restarts)
	}
}
