package jobmaster_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/internal/failpoint"
	"github.com/jmcluster/jmcluster/jobmaster"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// checkpointCluster: three JobMasters and two TaskManagers sharing one checkpoint root.
func checkpointCluster(t *testing.T) *testcluster.Cluster {
	t.Helper()
	return testcluster.New(t, testcluster.Options{JMs: 3, TMs: 2, Checkpoints: true})
}

// checkpointedChain is source -> map -> checksum sink of parallelism 2, checkpointed.
func checkpointedChain(name string, cfg *pb.CheckpointConfig) *pb.JobGraph {
	jg := testcluster.StreamingChain(name, 2, 200, 0)
	jg.CheckpointConfig = cfg
	return jg
}

// checkpointsOf reads a job's checkpoint record on the leader.
func checkpointsOf(c *testcluster.Cluster, jobID string) *pb.JobCheckpoints {
	cp, _ := c.Leader().A.State.Checkpoints(jobID)
	return cp
}

func ids(list []*pb.CheckpointRecord) []uint64 {
	out := make([]uint64, len(list))
	for i, ck := range list {
		out[i] = ck.Id
	}
	return out
}

// describeCheckpoints is a one-line view of a record for failure messages.
func describeCheckpoints(cp *pb.JobCheckpoints) string {
	var aborted []string
	for _, a := range cp.GetAborted() {
		aborted = append(aborted, fmt.Sprintf("%d:%s", a.Id, a.AbortReason))
	}
	return fmt.Sprintf("next %d pending %v completed %v (count %d) aborted %v (count %d)", cp.GetNextCheckpointId(), ids(cp.GetPending()),
		ids(cp.GetCompleted()), cp.GetCompletedCount(), aborted, cp.GetAbortedCount())
}

// storedCheckpoints lists the checkpoint directories of a job under the shared root.
func storedCheckpoints(t *testing.T, c *testcluster.Cluster, jobID string) []uint64 {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(c.CheckpointDir, jobID))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for _, e := range entries {
		if id, err := strconv.ParseUint(strings.TrimPrefix(e.Name(), "chk-"), 10, 64); err == nil && e.IsDir() {
			out = append(out, id)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// waitCheckpoints waits until the job's record satisfies cond.
func waitCheckpoints(t *testing.T, c *testcluster.Cluster, jobID, what string, timeout time.Duration, cond func(*pb.JobCheckpoints) bool) *pb.JobCheckpoints {
	t.Helper()
	var cp *pb.JobCheckpoints
	testcluster.WaitFor(t, timeout, what, func() (bool, string) {
		cp = checkpointsOf(c, jobID)
		return cond(cp), describeCheckpoints(cp)
	})
	return cp
}

// TestCheckpointsCompleteInOrderAndSubsumedOnesLeaveStorage: a checkpointed job on real TMs
// completes checkpoints with increasing ids; the leader keeps the configured number of
// completed ones, and the directories of the ones they subsumed or dropped are deleted from
// the shared root. No task restarts.
func TestCheckpointsCompleteInOrderAndSubsumedOnesLeaveStorage(t *testing.T) {
	c := checkpointCluster(t)
	id := c.Submit(checkpointedChain("checkpoints", &pb.CheckpointConfig{IntervalMs: 100, Retained: 2}))
	before := testcluster.Attempts(waitAllRunning(t, c, id))

	cp := waitCheckpoints(t, c, id, "five checkpoints completed", 30*time.Second, func(cp *pb.JobCheckpoints) bool {
		return cp.GetCompletedCount() >= 5
	})
	if got := ids(cp.Completed); len(got) != 2 || got[0] >= got[1] {
		t.Fatalf("completed %v, want the newest 2 in order", got)
	}
	for _, ck := range cp.Completed {
		if len(ck.Acks) != 6 || ck.TriggerUnixMs == 0 || ck.CompleteUnixMs < ck.TriggerUnixMs {
			t.Errorf("checkpoint %d: %d acks, trigger %d complete %d", ck.Id, len(ck.Acks), ck.TriggerUnixMs, ck.CompleteUnixMs)
		}
	}
	// Ids only grow; every id below the next one is accounted for once.
	if n := cp.CompletedCount + cp.AbortedCount + uint64(len(cp.Pending)); n != cp.NextCheckpointId-1 {
		t.Errorf("%d completed + %d aborted + %d pending, but ids 1..%d were given", cp.CompletedCount, cp.AbortedCount, len(cp.Pending), cp.NextCheckpointId-1)
	}
	// The shared root holds the retained and the pending checkpoints only (deleting the
	// discarded ones follows their commit).
	testcluster.WaitFor(t, 10*time.Second, "only retained and pending checkpoints in storage", func() (bool, string) {
		cp := checkpointsOf(c, id)
		stored := storedCheckpoints(t, c, id)
		keep := append(ids(cp.Completed), ids(cp.Pending)...)
		lowest := cp.Completed[0].Id
		for _, s := range stored {
			// A trigger after the record was read may have written a newer one.
			if !slices.Contains(keep, s) && s < lowest {
				return false, fmt.Sprintf("stored %v, record %s", stored, describeCheckpoints(cp))
			}
		}
		return slices.Contains(stored, cp.Completed[1].Id), fmt.Sprintf("stored %v, record %s", stored, describeCheckpoints(cp))
	})
	if changed := testcluster.Changed(before, testcluster.Attempts(c.Job(id))); len(changed) != 0 {
		t.Fatalf("tasks restarted: %v", changed)
	}
}

// TestCheckpointTimeoutAborts: a checkpoint whose completion does not come within timeout_ms
// (its COMPLETE held back by the failpoint) is aborted with a reason naming the timeout, and
// its directory is deleted; once completion is let through, checkpoints complete again with
// higher ids.
func TestCheckpointTimeoutAborts(t *testing.T) {
	c := checkpointCluster(t)
	id := c.Submit(checkpointedChain("timeout", &pb.CheckpointConfig{IntervalMs: 100, TimeoutMs: 300}))
	waitAllRunning(t, c, id)
	failpoint.Set(t, "pause("+failpoint.BeforeCompleteCheckpoint.Name()+")")

	cp := waitCheckpoints(t, c, id, "a checkpoint aborted by its timeout", 30*time.Second, func(cp *pb.JobCheckpoints) bool {
		for _, a := range cp.GetAborted() {
			if strings.HasPrefix(a.AbortReason, "timeout after ") {
				return true
			}
		}
		return false
	})
	var timedOut uint64
	for _, a := range cp.Aborted {
		if strings.HasPrefix(a.AbortReason, "timeout after ") {
			timedOut = a.Id
			if !strings.Contains(a.AbortReason, "timeout_ms 300") {
				t.Errorf("reason %q does not name the configured timeout", a.AbortReason)
			}
		}
	}
	testcluster.WaitFor(t, 10*time.Second, fmt.Sprintf("checkpoint %d's directory deleted", timedOut), func() (bool, string) {
		stored := storedCheckpoints(t, c, id)
		return !slices.Contains(stored, timedOut), fmt.Sprint(stored)
	})
	failpoint.Release(failpoint.BeforeCompleteCheckpoint)
	waitCheckpoints(t, c, id, "a later checkpoint completed", 30*time.Second, func(cp *pb.JobCheckpoints) bool {
		return len(cp.GetCompleted()) > 0 && cp.Completed[len(cp.Completed)-1].Id > timedOut
	})
}

// pendingHeldBeforeTrigger holds the coordinator's next trigger between its commit and its
// TriggerCheckpoint calls (no barrier goes out), and returns the checkpoint, pending.
func pendingHeldBeforeTrigger(t *testing.T, c *testcluster.Cluster, jobID string) uint64 {
	t.Helper()
	failpoint.Set(t, "pause("+failpoint.BeforeTriggerCheckpoint.Name()+")")
	waitPaused(t, failpoint.BeforeTriggerCheckpoint, 1)
	cp := checkpointsOf(c, jobID)
	if len(cp.GetPending()) != 1 {
		t.Fatalf("a trigger is held, but the record is %s", describeCheckpoints(cp))
	}
	return cp.Pending[0].Id
}

// ackAs acknowledges a checkpoint for one subtask as a TM would.
func ackAs(t *testing.T, c *testcluster.Cluster, tmID, jobID string, id uint64, acks ...*pb.TaskCheckpointAck) (*pb.AcknowledgeCheckpointResponse, error) {
	t.Helper()
	l := c.Leader()
	return jmClient(c, l).AcknowledgeCheckpoint(ctxT(t), &pb.AcknowledgeCheckpointRequest{
		TmId: tmID, EpochSeen: l.A.JM.Epoch(), JobId: jobID, CheckpointId: id, Acks: acks,
	})
}

func testAck(jobID string, id uint64, vertex string, subtask, attempt int32) *pb.TaskCheckpointAck {
	return &pb.TaskCheckpointAck{VertexId: vertex, SubtaskIndex: subtask, AttemptNumber: attempt, StateSizeBytes: 8,
		StatePath: fmt.Sprintf("%s/chk-%d/%s-%d-%d.state", jobID, id, vertex, subtask, attempt), Checksum: 1}
}

// TestAcknowledgeAndDeclineCheckpoint: the leader's AcknowledgeCheckpoint records an
// acknowledgement from the current attempt on its own TM (a retry changes nothing), answers
// accepted=false naming why for a stale attempt and for a checkpoint that is no longer
// pending, refuses one from another TM (PERMISSION_DENIED); DeclineCheckpoint aborts the
// checkpoint naming the subtask and its reason.
func TestAcknowledgeAndDeclineCheckpoint(t *testing.T) {
	c := checkpointCluster(t)
	id := c.Submit(checkpointedChain("acks", &pb.CheckpointConfig{IntervalMs: 50, TimeoutMs: 60_000}))
	rec := waitAllRunning(t, c, id)
	at := testcluster.Attempts(rec)
	ck := pendingHeldBeforeTrigger(t, c, id)
	src0 := at["source[0]"]

	resp, err := ackAs(t, c, src0.TM, id, ck, testAck(id, ck, "source", 0, src0.Number+1))
	if err != nil || resp.Accepted || !strings.Contains(resp.Reason, "not current") {
		t.Fatalf("ack of a future attempt: %v %v, want accepted=false naming the current attempt", resp, err)
	}
	bad := testAck(id, ck, "source", 0, src0.Number)
	bad.AlignmentUs = -1
	if _, err := ackAs(t, c, src0.TM, id, ck, bad); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "alignment_us -1 is negative") {
		t.Fatalf("ack with a negative alignment: %v, want INVALID_ARGUMENT naming alignment_us", err)
	}
	for i := 0; i < 2; i++ { // the second is a retry
		resp, err = ackAs(t, c, src0.TM, id, ck, testAck(id, ck, "source", 0, src0.Number))
		if err != nil || !resp.Accepted {
			t.Fatalf("ack %d of source[0]: %v %v", i, resp, err)
		}
	}
	if p := checkpointsOf(c, id).Pending; len(p) != 1 || len(p[0].Acks) != 1 {
		t.Fatalf("after the ack and its retry: %s", describeCheckpoints(checkpointsOf(c, id)))
	}
	other := "tm1"
	if at["source[1]"].TM == other {
		other = "tm2"
	}
	src1 := at["source[1]"]
	if src1.TM == other {
		t.Fatalf("attempts %v", at)
	}
	_, err = ackAs(t, c, other, id, ck, testAck(id, ck, "source", 1, src1.Number))
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "assigned to "+src1.TM) {
		t.Fatalf("ack of source[1] by %s: %v, want PERMISSION_DENIED naming %s", other, err, src1.TM)
	}

	sink1 := at["sink[1]"]
	l := c.Leader()
	if _, err := jmClient(c, l).DeclineCheckpoint(ctxT(t), &pb.DeclineCheckpointRequest{
		TmId: sink1.TM, EpochSeen: l.A.JM.Epoch(), JobId: id, CheckpointId: ck, VertexId: "sink", SubtaskIndex: 1, AttemptNumber: sink1.Number, Reason: "disk full",
	}); err != nil {
		t.Fatal(err)
	}
	cp := waitCheckpoints(t, c, id, fmt.Sprintf("checkpoint %d aborted by the decline", ck), 10*time.Second, func(cp *pb.JobCheckpoints) bool {
		return len(cp.GetAborted()) > 0 && cp.Aborted[len(cp.Aborted)-1].Id == ck
	})
	if r := cp.Aborted[len(cp.Aborted)-1].AbortReason; r != "declined by sink[1]: disk full" {
		t.Errorf("abort reason %q", r)
	}
	resp, err = ackAs(t, c, src1.TM, id, ck, testAck(id, ck, "source", 1, src1.Number))
	if err != nil || resp.Accepted || !strings.Contains(resp.Reason, "was aborted: declined by sink[1]") {
		t.Fatalf("ack of the aborted checkpoint: %v %v, want accepted=false naming the abort", resp, err)
	}
	failpoint.Release(failpoint.BeforeTriggerCheckpoint)
	done := waitCheckpoints(t, c, id, "a later checkpoint completed", 30*time.Second, func(cp *pb.JobCheckpoints) bool {
		return len(cp.GetCompleted()) > 0
	})
	// A retried acknowledgement of a completed checkpoint, as recorded, is accepted; another
	// state for it is not.
	last := done.Completed[len(done.Completed)-1]
	a := last.Acks[0]
	tm := at[fmt.Sprintf("%s[%d]", a.VertexId, a.SubtaskIndex)].TM
	if resp, err := ackAs(t, c, tm, id, last.Id, a); err != nil || !resp.Accepted {
		t.Fatalf("retry of a recorded ack of completed checkpoint %d: %v %v", last.Id, resp, err)
	}
	changed := proto.CloneOf(a)
	changed.StatePath += ".other"
	if resp, err := ackAs(t, c, tm, id, last.Id, changed); err != nil || resp.Accepted || !strings.Contains(resp.Reason, "completed without") {
		t.Fatalf("another state for completed checkpoint %d: %v %v", last.Id, resp, err)
	}
}

// TestCheckpointedJobRefusedWithoutStorage: a JobMaster without checkpoint storage refuses a
// checkpointed job before anything is committed, naming --checkpoint-dir; a job without
// checkpoints is accepted.
func TestCheckpointedJobRefusedWithoutStorage(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{JMs: 3})
	jg := checkpointedChain("no-storage", &pb.CheckpointConfig{IntervalMs: 100})
	before := settledIndexes(t, c)
	err := retryUnavailable(t, "the submission to be answered", func() error {
		_, err := c.Client(c.Leader()).SubmitJob(ctxT(t), &pb.SubmitJobRequest{JobGraph: jg})
		return err
	})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "--checkpoint-dir") || !strings.Contains(err.Error(), "interval_ms 100") {
		t.Fatalf("submit: %v, want FAILED_PRECONDITION naming --checkpoint-dir and the interval", err)
	}
	if after := settledIndexes(t, c); after[c.Leader().ID] != before[c.Leader().ID] && c.Leader().A.JM.Epoch() == 1 {
		t.Errorf("commit index %d -> %d after the refused submission", before[c.Leader().ID], after[c.Leader().ID])
	}
	submitRetry(t, c, checkpointedChain("plain", nil))
}

// TestCheckpointsEndWithTheirJob: cancelling a job aborts its pending checkpoint (the reason
// names the job's status), and when the retention removes the job its checkpoint directory
// goes with it.
func TestCheckpointsEndWithTheirJob(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{JMs: 3, TMs: 2, Checkpoints: true,
		JobMaster: func(cfg *jobmaster.Config) { cfg.RetainJobAge = 100 * time.Millisecond }})
	id := c.Submit(checkpointedChain("ends", &pb.CheckpointConfig{IntervalMs: 100, TimeoutMs: 60_000}))
	waitAllRunning(t, c, id)
	waitCheckpoints(t, c, id, "a checkpoint completed", 30*time.Second, func(cp *pb.JobCheckpoints) bool { return len(cp.GetCompleted()) > 0 })
	ck := pendingHeldBeforeTrigger(t, c, id)
	if len(storedCheckpoints(t, c, id)) == 0 {
		t.Fatalf("no checkpoint of %s in %s", id, c.CheckpointDir)
	}
	if _, err := c.Client(c.Leader()).CancelJob(ctxT(t), &pb.CancelJobRequest{JobId: id}); err != nil {
		t.Fatal(err)
	}
	cp := waitCheckpoints(t, c, id, fmt.Sprintf("checkpoint %d aborted", ck), 20*time.Second, func(cp *pb.JobCheckpoints) bool {
		return abortedRecord(cp, ck) != nil
	})
	if r := abortedRecord(cp, ck).AbortReason; !strings.HasPrefix(r, "job is CANCEL") {
		t.Errorf("abort reason %q, want the job's status", r)
	}
	failpoint.Release(failpoint.BeforeTriggerCheckpoint) // the held trigger sends nothing now
	testcluster.WaitFor(t, 30*time.Second, "the job removed by the retention, its checkpoints with it", func() (bool, string) {
		_, known := c.Leader().A.State.Job(id)
		_, err := os.Stat(filepath.Join(c.CheckpointDir, id))
		return !known && os.IsNotExist(err), fmt.Sprintf("job known %v, directory: %v", known, err)
	})
}

// TestLostTaskManagerAbortsPendingCheckpoint: a TaskManager killed while a checkpoint is
// pending aborts it (naming the lost TM, or the task failure its loss caused); the job's
// regions restart and checkpoints complete again with higher ids.
func TestLostTaskManagerAbortsPendingCheckpoint(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{JMs: 3, TMs: 3, Checkpoints: true})
	id := c.Submit(checkpointedChain("tm-lost", &pb.CheckpointConfig{IntervalMs: 100, TimeoutMs: 60_000}))
	rec := waitAllRunning(t, c, id)
	ck := pendingHeldBeforeTrigger(t, c, id)
	victim := testcluster.Attempts(rec)["source[0]"].TM
	c.KillTM(tmByID(t, c, victim))
	cp := waitCheckpoints(t, c, id, fmt.Sprintf("checkpoint %d aborted", ck), 30*time.Second, func(cp *pb.JobCheckpoints) bool {
		return abortedRecord(cp, ck) != nil
	})
	r := abortedRecord(cp, ck).AbortReason
	t.Logf("checkpoint %d aborted: %s", ck, r)
	if !strings.HasPrefix(r, "TaskManager "+victim+" lost") && !strings.HasPrefix(r, "task failure: ") {
		t.Errorf("abort reason %q, want the lost %s or a task failure", r, victim)
	}
	failpoint.Release(failpoint.BeforeTriggerCheckpoint)
	waitAllRunning(t, c, id)
	waitCheckpoints(t, c, id, "a later checkpoint completed", 30*time.Second, func(cp *pb.JobCheckpoints) bool {
		n := len(cp.GetCompleted())
		return n > 0 && cp.Completed[n-1].Id > ck
	})
}

// abortedRecord finds an aborted checkpoint in a record (nil when it is not there).
func abortedRecord(cp *pb.JobCheckpoints, id uint64) *pb.CheckpointRecord {
	for _, a := range cp.GetAborted() {
		if a.Id == id {
			return a
		}
	}
	return nil
}

// TestAcknowledgementsArrivingTogetherShareCommits: 64 tasks acknowledging a checkpoint at
// once take a few ACK_CHECKPOINT entries, not 64, and the checkpoint completes.
func TestAcknowledgementsArrivingTogetherShareCommits(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{JMs: 3, TMs: 2, Slots: 16, Checkpoints: true})
	jg := testcluster.ForwardChain("acks-batched", 2, 32)
	jg.Vertices[0].Operator.GetSequenceSource().RatePerSecond = 10
	jg.CheckpointConfig = &pb.CheckpointConfig{IntervalMs: 50, TimeoutMs: 60_000}
	id := c.Submit(jg)
	at := testcluster.Attempts(waitAllRunning(t, c, id))
	ck := pendingHeldBeforeTrigger(t, c, id)
	l := c.Leader()
	before := l.A.Node.AppliedIndex()
	errs := make(chan error, len(at))
	for key, a := range at {
		vertex, rest, _ := strings.Cut(key, "[")
		subtask, _ := strconv.Atoi(strings.TrimSuffix(rest, "]"))
		go func() {
			resp, err := ackAs(t, c, a.TM, id, ck, testAck(id, ck, vertex, int32(subtask), a.Number))
			if err == nil && !resp.Accepted {
				err = fmt.Errorf("%s: %s", key, resp.Reason)
			}
			errs <- err
		}()
	}
	for range at {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	waitCheckpoints(t, c, id, fmt.Sprintf("checkpoint %d completed", ck), 10*time.Second, func(cp *pb.JobCheckpoints) bool {
		n := len(cp.GetCompleted())
		return n > 0 && cp.Completed[n-1].Id == ck
	})
	// The entries between: the acknowledgements, the completion, and whatever else the leader
	// committed meanwhile (a pool acknowledgement, say).
	if n := l.A.Node.AppliedIndex() - before; n > uint64(len(at))/4 {
		t.Errorf("%d entries for %d acknowledgements and a completion", n, len(at))
	} else {
		t.Logf("%d entries for %d acknowledgements and a completion", n, len(at))
	}
	failpoint.Release(failpoint.BeforeTriggerCheckpoint)
}

// TestNoTriggerUntilEveryServerAppliesCheckpoints: while a Raft server does not gossip the
// checkpoint commands' level the leader triggers nothing; once every one does, it triggers.
func TestNoTriggerUntilEveryServerAppliesCheckpoints(t *testing.T) {
	var all atomic.Bool
	c := testcluster.New(t, testcluster.Options{JMs: 3, TMs: 2, Checkpoints: true, JobMaster: func(cfg *jobmaster.Config) {
		cfg.ServersApply = func(level int) bool { return level < fsm.LevelCheckpoints || all.Load() }
	}})
	id := c.Submit(checkpointedChain("level", &pb.CheckpointConfig{IntervalMs: 20}))
	waitAllRunning(t, c, id)
	start := time.Now()
	testcluster.WaitFor(t, 10*time.Second, "50 intervals without a trigger", func() (bool, string) {
		if cp := checkpointsOf(c, id); cp != nil {
			t.Fatalf("triggered below the level: %s", describeCheckpoints(cp))
		}
		return time.Since(start) > time.Second, "running for " + time.Since(start).String()
	})
	all.Store(true)
	waitCheckpoints(t, c, id, "a checkpoint completed", 30*time.Second, func(cp *pb.JobCheckpoints) bool { return len(cp.GetCompleted()) > 0 })
}

// TestFailedTriggerAborts: a TaskManager whose TriggerCheckpoint fails (a simulated one that
// does not implement it) aborts the checkpoint with a reason naming it; every trigger takes the
// next id.
func TestFailedTriggerAborts(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{JMs: 3, Checkpoints: true})
	l := c.Leader()
	id := c.Submit(checkpointedChain("sim-trigger", &pb.CheckpointConfig{IntervalMs: 50}))
	sims := testcluster.StartSimTMs(t, 2, testcluster.SimOptions{})
	c.DeployOnSims(l, id, sims, 0)
	cp := waitCheckpoints(t, c, id, "three checkpoints aborted", 30*time.Second, func(cp *pb.JobCheckpoints) bool {
		return cp.GetAbortedCount() >= 3
	})
	for i, a := range cp.Aborted {
		if !strings.HasPrefix(a.AbortReason, "trigger on TaskManager sim0") || !strings.Contains(a.AbortReason, "Unimplemented") {
			t.Errorf("checkpoint %d: reason %q, want the failed trigger named", a.Id, a.AbortReason)
		}
		if i > 0 && a.Id != cp.Aborted[i-1].Id+1 {
			t.Errorf("aborted ids %v are not consecutive", ids(cp.Aborted))
		}
	}
	if len(cp.Completed) != 0 {
		t.Errorf("completed %v with no TaskManager acknowledging", ids(cp.Completed))
	}
}
