package fsm

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/transport/pb"
)

const (
	triggerT  = pb.CommandType_COMMAND_TYPE_TRIGGER_CHECKPOINT
	ackT      = pb.CommandType_COMMAND_TYPE_ACK_CHECKPOINT
	completeT = pb.CommandType_COMMAND_TYPE_COMPLETE_CHECKPOINT
	abortT    = pb.CommandType_COMMAND_TYPE_ABORT_CHECKPOINT
)

// checkpointed gives a job graph a checkpoint config: a 1 s interval, maxConcurrent pending at
// most, retained completed kept.
func checkpointed(jg *pb.JobGraph, maxConcurrent, retained int32) *pb.JobGraph {
	jg.CheckpointConfig = &pb.CheckpointConfig{IntervalMs: 1000, MaxConcurrent: maxConcurrent, Retained: retained}
	return jg
}

// statePath is where checkpoint.Store writes a task's state, relative to the root.
func statePath(job string, id uint64, vertex string, subtask, attempt int32) string {
	return fmt.Sprintf("%s/chk-%d/%s-%d-%d.state", job, id, vertex, subtask, attempt)
}

// acksOf returns an acknowledgement of checkpoint id from the current attempt of every subtask
// of the job, in graph order.
func acksOf(h *harness, job string, id uint64) []*pb.TaskCheckpointAck {
	h.t.Helper()
	var acks []*pb.TaskCheckpointAck
	for _, ev := range graph.AllExecutions(h.job(job).ExecutionGraph) {
		n := ev.GetCurrent().GetAttemptNumber()
		acks = append(acks, &pb.TaskCheckpointAck{
			VertexId: ev.VertexId, SubtaskIndex: ev.SubtaskIndex, AttemptNumber: n,
			StateSizeBytes: int64(100 + ev.SubtaskIndex), StatePath: statePath(job, id, ev.VertexId, ev.SubtaskIndex, n),
			Checksum: uint32(id)<<16 | uint32(ev.SubtaskIndex),
		})
	}
	return acks
}

// runningCheckpointedJob submits a checkpointed streaming job (src 2, map 2, sink 2) and runs
// it: RUNNING, every subtask at attempt 0, RUNNING.
func runningCheckpointedJob(h *harness, id string, maxConcurrent, retained int32) {
	h.t.Helper()
	h.submit(checkpointed(streamingJob(id, 2, 2), maxConcurrent, retained))
	h.setStatus(id, pb.JobStatus_JOB_STATUS_RUNNING)
	h.attemptAll(id, 0)
	h.moveAll(id, pb.ExecutionState_EXECUTION_STATE_DEPLOYING)
	h.moveAll(id, pb.ExecutionState_EXECUTION_STATE_RUNNING)
}

func (h *harness) trigger(job string, id uint64, ts int64) *pb.CheckpointCommandResult {
	h.t.Helper()
	return h.ok(triggerT, &pb.TriggerCheckpointCommand{JobId: job, CheckpointId: id, Epoch: h.f.LeaderEpoch(), Timestamp: ts}).Value.(*pb.CheckpointCommandResult)
}

// checkpoint triggers, acknowledges (every subtask) and completes the job's next checkpoint.
func (h *harness) checkpoint(job string, ts int64) *pb.CheckpointCommandResult {
	h.t.Helper()
	id := h.trigger(job, 0, ts).CheckpointId
	h.ok(ackT, &pb.AckCheckpointCommand{JobId: job, CheckpointId: id, Acks: acksOf(h, job, id)})
	return h.ok(completeT, &pb.CompleteCheckpointCommand{JobId: job, CheckpointId: id, Timestamp: ts + 5}).Value.(*pb.CheckpointCommandResult)
}

func checkpointIDs(cks []*pb.CheckpointRecord) []uint64 {
	ids := make([]uint64, len(cks))
	for i, c := range cks {
		ids[i] = c.Id
	}
	return ids
}

// TestCheckpointIDsAreMonotonicAcrossTriggersAndRestore: every trigger gets the job's next id,
// whatever became of the earlier ones, and a restored FSM (a new leader's) goes on from there.
func TestCheckpointIDsAreMonotonicAcrossTriggersAndRestore(t *testing.T) {
	h := newHarness(t)
	job := jobIDN(1)
	runningCheckpointedJob(h, job, 1, 1)
	if id, _ := h.f.NextCheckpointID(job); id != 1 {
		t.Fatalf("the first id is %d, want 1", id)
	}
	for want := uint64(1); want <= 20; want++ {
		if got := h.trigger(job, 0, int64(want)).CheckpointId; got != want {
			t.Fatalf("trigger %d got id %d", want, got)
		}
		if want%2 == 0 {
			h.ok(abortT, &pb.AbortCheckpointCommand{JobId: job, CheckpointId: want, Reason: "timeout"})
		} else {
			h.ok(ackT, &pb.AckCheckpointCommand{JobId: job, CheckpointId: want, Acks: acksOf(h, job, want)})
			h.ok(completeT, &pb.CompleteCheckpointCommand{JobId: job, CheckpointId: want})
		}
	}
	// A trigger from a view older than the last one is refused.
	h.fails(triggerT, &pb.TriggerCheckpointCommand{JobId: job, CheckpointId: 20}, ErrCheckpointID)

	restored := New(testLogger(t))
	if err := restore(restored, persist(t, h.f)); err != nil {
		t.Fatal(err)
	}
	establish(h, 1) // a new leader, on both
	r := &harness{t: t, f: restored, index: h.index - 1}
	establish(r, 1)
	for _, x := range []*harness{h, r} {
		if next, _ := x.f.NextCheckpointID(job); next != 21 {
			t.Fatalf("next id %d after 20 triggers", next)
		}
		if got := x.trigger(job, 21, 100).CheckpointId; got != 21 {
			t.Fatalf("the trigger after a restore got id %d, want 21", got)
		}
	}
	if h.f.Hash() != restored.Hash() {
		t.Fatal("the restored FSM went on differently")
	}
	cp, _ := h.f.Checkpoints(job)
	if cp.CompletedCount != 10 || cp.AbortedCount != 10 || !slices.Equal(checkpointIDs(cp.Completed), []uint64{19}) || !slices.Equal(checkpointIDs(cp.Pending), []uint64{21}) {
		t.Fatalf("checkpoints after 20 triggers: %v", cp)
	}
}

// TestTriggerIsCommittedFirst: the trigger's result names the id the barriers will carry, and
// the checkpoint is PENDING in the committed state with the leader's trigger time and epoch,
// before anything is sent to a TaskManager (the write-ahead rule).
func TestTriggerIsCommittedFirst(t *testing.T) {
	h := newHarness(t)
	job := jobIDN(1)
	runningCheckpointedJob(h, job, 1, 1)
	for e := uint64(1); e <= 3; e++ {
		establish(h, e)
	}
	res := h.trigger(job, 1, 1_767_000_000_123)
	if res.CheckpointId != 1 || res.Tasks != 6 || res.Acknowledged != 0 {
		t.Fatalf("trigger result %v", res)
	}
	pending := h.f.PendingCheckpoints(job)
	want := &pb.CheckpointRecord{Id: 1, Status: pb.CheckpointStatus_CHECKPOINT_STATUS_PENDING, TriggerUnixMs: 1_767_000_000_123, Epoch: 3}
	if len(pending) != 1 || !proto.Equal(pending[0], want) {
		t.Fatalf("pending %v, want %v", pending, want)
	}
	if _, ok := h.f.LatestCompletedCheckpoint(job); ok {
		t.Fatal("a completed checkpoint before any completion")
	}
	s, ok := h.f.CheckpointSettings(job)
	if !ok || s != (graph.CheckpointSettings{IntervalMs: 1000, TimeoutMs: graph.DefaultCheckpointTimeoutMs, MaxConcurrent: 1, Retained: 1}) {
		t.Fatalf("settings %+v %v", s, ok)
	}
}

// TestTriggerRefusals: a job that is not checkpointed (no config, interval 0, a config out of
// range), not RUNNING, a stale epoch, an unexpected id, max_concurrent pending: each refused,
// leaving no trace (no checkpoint record is created).
func TestTriggerRefusals(t *testing.T) {
	h := newHarness(t)
	plain, off, invalid, job := jobIDN(1), jobIDN(2), jobIDN(3), jobIDN(4)
	h.submit(streamingJob(plain, 1, 1))
	offGraph := checkpointed(streamingJob(off, 1, 1), 0, 0)
	offGraph.CheckpointConfig.IntervalMs = 0
	h.submit(offGraph)
	// SUBMIT_JOB keeps the meaning it had before checkpoints: the leader refuses such a
	// config before it proposes the job (graph.ValidateCheckpointConfig), replicas do not.
	h.submit(checkpointed(streamingJob(invalid, 1, 1), -1, 0))
	for _, id := range []string{plain, off, invalid} {
		h.setStatus(id, pb.JobStatus_JOB_STATUS_RUNNING)
		h.fails(triggerT, &pb.TriggerCheckpointCommand{JobId: id}, ErrCheckpointingOff)
	}
	res := h.apply(triggerT, &pb.TriggerCheckpointCommand{JobId: invalid})
	if !strings.Contains(res.Err.Error(), "checkpoint_config.max_concurrent") {
		t.Errorf("an invalid config is not named: %v", res.Err)
	}
	h.fails(triggerT, &pb.TriggerCheckpointCommand{JobId: jobIDN(9)}, ErrUnknownJob)

	h.submit(checkpointed(streamingJob(job, 2, 2), 2, 1))
	h.fails(triggerT, &pb.TriggerCheckpointCommand{JobId: job}, ErrJobNotRunning) // CREATED
	h.setStatus(job, pb.JobStatus_JOB_STATUS_RUNNING)
	establish(h, 1)
	h.fails(triggerT, &pb.TriggerCheckpointCommand{JobId: job, Epoch: 0}, ErrStaleEpoch)
	h.fails(triggerT, &pb.TriggerCheckpointCommand{JobId: job, Epoch: 2}, ErrStaleEpoch)
	h.fails(triggerT, &pb.TriggerCheckpointCommand{JobId: job, Epoch: 1, CheckpointId: 2}, ErrCheckpointID)
	for _, id := range []string{plain, off, invalid, job} {
		if cp, _ := h.f.Checkpoints(id); cp != nil {
			t.Errorf("job %s: a refused trigger left a checkpoint record %v", id, cp)
		}
	}
	h.trigger(job, 1, 10)
	h.trigger(job, 2, 20)
	h.fails(triggerT, &pb.TriggerCheckpointCommand{JobId: job, Epoch: 1, CheckpointId: 3}, ErrTooManyCheckpoints)
	h.ok(abortT, &pb.AbortCheckpointCommand{JobId: job, CheckpointId: 1, Reason: "timeout"})
	if got := h.trigger(job, 3, 30).CheckpointId; got != 3 {
		t.Fatalf("the trigger after an abort got %d, want 3", got)
	}
	// Not RUNNING any more (a region restart keeps RUNNING; a failing job does not).
	h.setStatus(job, pb.JobStatus_JOB_STATUS_FAILING)
	h.ok(abortT, &pb.AbortCheckpointCommand{JobId: job, CheckpointId: 2, Reason: "task failure"})
	h.fails(triggerT, &pb.TriggerCheckpointCommand{JobId: job, Epoch: 1}, ErrJobNotRunning)
}

// restartSubtask fails the current attempt of a subtask and gives it attempt n.
func restartSubtask(h *harness, job, vertex string, subtask, n int32) {
	h.t.Helper()
	cur := graph.FindVertex(h.job(job).ExecutionGraph, vertex, subtask).Current
	h.ok(updateT, &pb.UpdateExecutionStatesCommand{Updates: []*pb.ExecutionStateUpdate{{JobId: job, AttemptId: cur.AttemptId, State: pb.ExecutionState_EXECUTION_STATE_FAILED, FailureCause: "boom"}}})
	h.ok(createT, &pb.CreateAttemptsCommand{JobId: job, Attempts: []*pb.AttemptSpec{spec(job, vertex, subtask, n)}})
}

// TestAckFromAStaleAttemptIsRefused: an acknowledgement counts only from the subtask's current
// attempt; one from an earlier attempt is refused naming the subtask and both attempts, and
// the whole command with it.
func TestAckFromAStaleAttemptIsRefused(t *testing.T) {
	h := newHarness(t)
	job := jobIDN(1)
	runningCheckpointedJob(h, job, 1, 1)
	id := h.trigger(job, 1, 10).CheckpointId
	old := acksOf(h, job, id)
	restartSubtask(h, job, "map", 1, 1)
	before := h.f.Hash()
	res := h.apply(ackT, &pb.AckCheckpointCommand{JobId: job, CheckpointId: id, Acks: old})
	if !errors.Is(res.Err, ErrStaleCheckpointAck) || !strings.Contains(res.Err.Error(), "map[1] attempt 0; the current attempt is 1") {
		t.Fatalf("stale ack: %v", res.Err)
	}
	if h.f.Hash() != before {
		t.Fatal("a refused ack changed the state")
	}
	acks := acksOf(h, job, id)
	if got := h.ok(ackT, &pb.AckCheckpointCommand{JobId: job, CheckpointId: id, Acks: acks}).Value.(*pb.CheckpointCommandResult); got.Acknowledged != 6 || got.Tasks != 6 {
		t.Fatalf("ack result %v", got)
	}
	ck := h.f.PendingCheckpoints(job)[0]
	if a := FindCheckpointAck(ck, "map", 1); a == nil || a.AttemptNumber != 1 || a.StatePath != statePath(job, id, "map", 1, 1) {
		t.Fatalf("map[1]'s ack: %v", a)
	}
	if !slices.IsSortedFunc(ck.Acks, compareAcks) {
		t.Fatalf("acks out of order: %v", ck.Acks)
	}

	// Every other way an acknowledgement is wrong.
	id2 := uint64(2)
	cases := map[string]struct {
		mod  func(*pb.TaskCheckpointAck)
		want error
	}{
		"unknown vertex":   {func(a *pb.TaskCheckpointAck) { a.VertexId = "nope" }, ErrUnknownVertex},
		"subtask out":      {func(a *pb.TaskCheckpointAck) { a.SubtaskIndex = 9 }, ErrUnknownVertex},
		"no vertex":        {func(a *pb.TaskCheckpointAck) { a.VertexId = "" }, ErrInvalidCommand},
		"negative size":    {func(a *pb.TaskCheckpointAck) { a.StateSizeBytes = -1 }, ErrInvalidCommand},
		"no path":          {func(a *pb.TaskCheckpointAck) { a.StatePath = "" }, ErrInvalidCommand},
		"absolute path":    {func(a *pb.TaskCheckpointAck) { a.StatePath = "/etc/passwd" }, ErrInvalidCommand},
		"path out of root": {func(a *pb.TaskCheckpointAck) { a.StatePath = "../x.state" }, ErrInvalidCommand},
		"unclean path":     {func(a *pb.TaskCheckpointAck) { a.StatePath = "a/../../x" }, ErrInvalidCommand},
	}
	h.ok(abortT, &pb.AbortCheckpointCommand{JobId: job, CheckpointId: id, Reason: "test"})
	h.trigger(job, id2, 20)
	for name, c := range cases {
		acks := acksOf(h, job, id2)
		c.mod(acks[3])
		t.Run(name, func(t *testing.T) {
			h.t = t
			h.fails(ackT, &pb.AckCheckpointCommand{JobId: job, CheckpointId: id2, Acks: acks}, c.want)
		})
	}
	h.t = t
	h.fails(ackT, &pb.AckCheckpointCommand{JobId: job, CheckpointId: id2}, ErrInvalidCommand)
	h.fails(ackT, &pb.AckCheckpointCommand{JobId: job, CheckpointId: id, Acks: acksOf(h, job, id)}, ErrCheckpointNotPending)
	h.fails(ackT, &pb.AckCheckpointCommand{JobId: job, CheckpointId: 3, Acks: acksOf(h, job, 3)}, ErrUnknownCheckpoint)
	h.fails(ackT, &pb.AckCheckpointCommand{JobId: jobIDN(7), CheckpointId: id2, Acks: acksOf(h, job, id2)}, ErrUnknownJob)
}

// TestDuplicateAckIsIdempotent: a repeated acknowledgement (a TM's retry, or one a new leader
// takes from a report that the FSM already has) changes nothing; the same subtask with another
// state is refused.
func TestDuplicateAckIsIdempotent(t *testing.T) {
	h := newHarness(t)
	job := jobIDN(1)
	runningCheckpointedJob(h, job, 1, 1)
	id := h.trigger(job, 1, 10).CheckpointId
	acks := acksOf(h, job, id)
	h.ok(ackT, &pb.AckCheckpointCommand{JobId: job, CheckpointId: id, Acks: acks[:3]})
	before := h.f.Hash()
	res := h.ok(ackT, &pb.AckCheckpointCommand{JobId: job, CheckpointId: id, Acks: []*pb.TaskCheckpointAck{acks[1], acks[1], acks[0]}})
	if h.f.Hash() != before || res.Value.(*pb.CheckpointCommandResult).Acknowledged != 3 {
		t.Fatalf("a repeated ack changed the state: %v", res.Value)
	}
	other := proto.CloneOf(acks[2])
	other.Checksum++
	h.fails(ackT, &pb.AckCheckpointCommand{JobId: job, CheckpointId: id, Acks: []*pb.TaskCheckpointAck{acks[4], other}}, ErrInvalidCommand)
	twice := proto.CloneOf(acks[4])
	twice.StateSizeBytes++
	h.fails(ackT, &pb.AckCheckpointCommand{JobId: job, CheckpointId: id, Acks: []*pb.TaskCheckpointAck{acks[4], twice}}, ErrInvalidCommand)
	// The rest, in reverse order, with a repeat among them: the record keeps them ordered.
	rest := slices.Clone(acks)
	slices.Reverse(rest)
	if got := h.ok(ackT, &pb.AckCheckpointCommand{JobId: job, CheckpointId: id, Acks: rest}).Value.(*pb.CheckpointCommandResult); got.Acknowledged != 6 {
		t.Fatalf("acknowledged %d of 6", got.Acknowledged)
	}
	ck := h.f.PendingCheckpoints(job)[0]
	slices.SortFunc(acks, compareAcks)
	for i := range acks {
		if !proto.Equal(ck.Acks[i], acks[i]) {
			t.Fatalf("ack %d: %v, want %v", i, ck.Acks[i], acks[i])
		}
	}
}

// TestCompleteNeedsEveryAck: a checkpoint completes only once every subtask's current attempt
// acknowledged it; the refusal names how many did and one that did not.
func TestCompleteNeedsEveryAck(t *testing.T) {
	h := newHarness(t)
	job := jobIDN(1)
	runningCheckpointedJob(h, job, 1, 1)
	id := h.trigger(job, 1, 10).CheckpointId
	acks := acksOf(h, job, id)
	h.fails(completeT, &pb.CompleteCheckpointCommand{JobId: job, CheckpointId: id}, ErrCheckpointIncomplete)
	h.ok(ackT, &pb.AckCheckpointCommand{JobId: job, CheckpointId: id, Acks: acks[:5]})
	res := h.apply(completeT, &pb.CompleteCheckpointCommand{JobId: job, CheckpointId: id})
	if !errors.Is(res.Err, ErrCheckpointIncomplete) || !strings.Contains(res.Err.Error(), "5 of 6 subtasks acknowledged, not sink[1]") {
		t.Fatalf("complete with 5 of 6 acks: %v", res.Err)
	}
	h.ok(ackT, &pb.AckCheckpointCommand{JobId: job, CheckpointId: id, Acks: acks[5:]})
	// A subtask that restarted since it acknowledged: its state is not the current attempt's.
	restartSubtask(h, job, "src", 0, 1)
	h.fails(completeT, &pb.CompleteCheckpointCommand{JobId: job, CheckpointId: id}, ErrStaleCheckpointAck)
	h.ok(abortT, &pb.AbortCheckpointCommand{JobId: job, CheckpointId: id, Reason: "task failure"})

	id = h.trigger(job, 2, 20).CheckpointId
	h.ok(ackT, &pb.AckCheckpointCommand{JobId: job, CheckpointId: id, Acks: acksOf(h, job, id)})
	res = h.ok(completeT, &pb.CompleteCheckpointCommand{JobId: job, CheckpointId: id, Timestamp: 25})
	if v := res.Value.(*pb.CheckpointCommandResult); v.CheckpointId != 2 || v.Acknowledged != 6 || len(v.Discarded) != 0 {
		t.Fatalf("complete result %v", v)
	}
	latest, ok := h.f.LatestCompletedCheckpoint(job)
	if !ok || latest.Id != 2 || latest.Status != pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED || latest.CompleteUnixMs != 25 || latest.TriggerUnixMs != 20 || len(latest.Acks) != 6 {
		t.Fatalf("latest completed %v", latest)
	}
	for _, ev := range graph.AllExecutions(h.job(job).ExecutionGraph) {
		a := FindCheckpointAck(latest, ev.VertexId, ev.SubtaskIndex)
		if a == nil || a.StatePath != statePath(job, 2, ev.VertexId, ev.SubtaskIndex, ev.Current.AttemptNumber) {
			t.Errorf("%s[%d]: state %v", ev.VertexId, ev.SubtaskIndex, a)
		}
	}
	if len(h.f.PendingCheckpoints(job)) != 0 {
		t.Fatal("the completed checkpoint is still pending")
	}
}

// TestCompleteTwiceIsRefused: a checkpoint never completes twice, and a completed one can be
// neither acknowledged nor aborted.
func TestCompleteTwiceIsRefused(t *testing.T) {
	h := newHarness(t)
	job := jobIDN(1)
	runningCheckpointedJob(h, job, 1, 2)
	h.checkpoint(job, 10)
	h.fails(completeT, &pb.CompleteCheckpointCommand{JobId: job, CheckpointId: 1}, ErrCheckpointCompleted)
	h.fails(abortT, &pb.AbortCheckpointCommand{JobId: job, CheckpointId: 1, Reason: "late timeout"}, ErrCheckpointCompleted)
	h.fails(ackT, &pb.AckCheckpointCommand{JobId: job, CheckpointId: 1, Acks: acksOf(h, job, 1)}, ErrCheckpointCompleted)
	// Once out of the retained ones, still never again.
	h.checkpoint(job, 20)
	h.checkpoint(job, 30)
	h.fails(completeT, &pb.CompleteCheckpointCommand{JobId: job, CheckpointId: 1}, ErrCheckpointNotPending)
	h.fails(completeT, &pb.CompleteCheckpointCommand{JobId: job, CheckpointId: 4}, ErrUnknownCheckpoint)
	h.fails(completeT, &pb.CompleteCheckpointCommand{JobId: job, CheckpointId: 0}, ErrUnknownCheckpoint)
}

// TestRetention: with retained 2, five completions keep the newest two; each completion's result
// lists the checkpoint that fell out, with its state paths, for the leader to delete.
func TestRetention(t *testing.T) {
	h := newHarness(t)
	job := jobIDN(1)
	runningCheckpointedJob(h, job, 1, 2)
	var dropped []uint64
	var paths []string
	for i := 1; i <= 5; i++ {
		res := h.checkpoint(job, int64(i*10))
		for _, d := range res.Discarded {
			if d.Reason != reasonRetained {
				t.Errorf("checkpoint %d dropped with reason %q", d.CheckpointId, d.Reason)
			}
			dropped = append(dropped, d.CheckpointId)
			paths = append(paths, d.StatePaths...)
		}
	}
	cp, _ := h.f.Checkpoints(job)
	if !slices.Equal(checkpointIDs(cp.Completed), []uint64{4, 5}) || cp.CompletedCount != 5 {
		t.Fatalf("completed %v (count %d), want 4 and 5", checkpointIDs(cp.Completed), cp.CompletedCount)
	}
	if !slices.Equal(dropped, []uint64{1, 2, 3}) {
		t.Fatalf("dropped %v, want 1, 2, 3", dropped)
	}
	var want []string
	for _, id := range []uint64{1, 2, 3} {
		for _, a := range acksOf(h, job, id) {
			want = append(want, a.StatePath)
		}
	}
	slices.Sort(want)
	slices.Sort(paths)
	if !slices.Equal(paths, want) {
		t.Fatalf("dropped paths %v, want %v", paths, want)
	}
}

// TestCompletionSubsumesOlderPending: a completed checkpoint aborts the pending ones older than
// it ("subsumed", their partial state listed for deletion) and leaves newer ones pending.
func TestCompletionSubsumesOlderPending(t *testing.T) {
	h := newHarness(t)
	job := jobIDN(1)
	runningCheckpointedJob(h, job, 3, 1)
	for id := uint64(1); id <= 3; id++ {
		h.trigger(job, id, int64(id))
	}
	h.ok(ackT, &pb.AckCheckpointCommand{JobId: job, CheckpointId: 1, Acks: acksOf(h, job, 1)[:2]})
	h.ok(ackT, &pb.AckCheckpointCommand{JobId: job, CheckpointId: 2, Acks: acksOf(h, job, 2)})
	res := h.ok(completeT, &pb.CompleteCheckpointCommand{JobId: job, CheckpointId: 2, Timestamp: 9}).Value.(*pb.CheckpointCommandResult)
	if len(res.Discarded) != 1 || res.Discarded[0].CheckpointId != 1 || res.Discarded[0].Reason != "subsumed" || len(res.Discarded[0].StatePaths) != 2 {
		t.Fatalf("discarded %v", res.Discarded)
	}
	cp, _ := h.f.Checkpoints(job)
	if !slices.Equal(checkpointIDs(cp.Pending), []uint64{3}) || !slices.Equal(checkpointIDs(cp.Completed), []uint64{2}) || !slices.Equal(checkpointIDs(cp.Aborted), []uint64{1}) {
		t.Fatalf("pending %v completed %v aborted %v", checkpointIDs(cp.Pending), checkpointIDs(cp.Completed), checkpointIDs(cp.Aborted))
	}
	if a := cp.Aborted[0]; a.AbortReason != "subsumed" || a.AbortUnixMs != 9 || a.Acknowledged != 2 || len(a.Acks) != 0 {
		t.Fatalf("subsumed record %v", a)
	}
	// Checkpoint 3 can still complete.
	h.ok(ackT, &pb.AckCheckpointCommand{JobId: job, CheckpointId: 3, Acks: acksOf(h, job, 3)})
	res = h.ok(completeT, &pb.CompleteCheckpointCommand{JobId: job, CheckpointId: 3}).Value.(*pb.CheckpointCommandResult)
	if len(res.Discarded) != 1 || res.Discarded[0].CheckpointId != 2 || res.Discarded[0].Reason != reasonRetained {
		t.Fatalf("discarded %v", res.Discarded)
	}
}

// TestAbort: an aborted checkpoint keeps its reason and time and how many tasks acknowledged
// it, not the acknowledgements; the result lists their state for deletion; the job keeps the
// last ten aborted ones and counts them all. Only a pending checkpoint can be aborted.
func TestAbort(t *testing.T) {
	h := newHarness(t)
	job := jobIDN(1)
	runningCheckpointedJob(h, job, 1, 1)
	id := h.trigger(job, 1, 10).CheckpointId
	h.ok(ackT, &pb.AckCheckpointCommand{JobId: job, CheckpointId: id, Acks: acksOf(h, job, id)[:3]})
	h.fails(abortT, &pb.AbortCheckpointCommand{JobId: job, CheckpointId: id}, ErrInvalidCommand) // no reason
	res := h.ok(abortT, &pb.AbortCheckpointCommand{JobId: job, CheckpointId: id, Timestamp: 15, Reason: "declined: disk full"}).Value.(*pb.CheckpointCommandResult)
	if len(res.Discarded) != 1 || res.Discarded[0].Reason != "declined: disk full" || len(res.Discarded[0].StatePaths) != 3 {
		t.Fatalf("abort result %v", res)
	}
	cp, _ := h.f.Checkpoints(job)
	want := &pb.CheckpointRecord{Id: 1, Status: pb.CheckpointStatus_CHECKPOINT_STATUS_ABORTED, TriggerUnixMs: 10, AbortUnixMs: 15, AbortReason: "declined: disk full", Acknowledged: 3}
	if len(cp.Pending) != 0 || len(cp.Aborted) != 1 || !proto.Equal(cp.Aborted[0], want) {
		t.Fatalf("after the abort: %v", cp)
	}
	h.fails(abortT, &pb.AbortCheckpointCommand{JobId: job, CheckpointId: id, Reason: "again"}, ErrCheckpointNotPending)
	h.fails(abortT, &pb.AbortCheckpointCommand{JobId: job, CheckpointId: 2, Reason: "never triggered"}, ErrUnknownCheckpoint)

	long := "x" + strings.Repeat("é", maxCheckpointText/2) // 2 bytes a rune: the cut splits one
	for i := 0; i < 14; i++ {
		id := h.trigger(job, 0, 20).CheckpointId
		h.ok(abortT, &pb.AbortCheckpointCommand{JobId: job, CheckpointId: id, Reason: long})
	}
	cp, _ = h.f.Checkpoints(job)
	if len(cp.Aborted) != maxAbortedCheckpoints || cp.Aborted[0].Id != 6 || cp.AbortedCount != 15 {
		t.Fatalf("aborted %v (count %d), want 6..15 of 15", checkpointIDs(cp.Aborted), cp.AbortedCount)
	}
	if r := cp.Aborted[9].AbortReason; len(r) != maxCheckpointText-1 || !strings.HasPrefix(long, r) {
		t.Fatalf("a long reason is kept as %d bytes", len(r))
	}
	// A job that ended may still have its pending checkpoints aborted; not acknowledged.
	id = h.trigger(job, 0, 30).CheckpointId
	h.ok(cancelT, &pb.CancelJobCommand{JobId: job})
	h.fails(ackT, &pb.AckCheckpointCommand{JobId: job, CheckpointId: id, Acks: acksOf(h, job, id)}, ErrJobNotRunning)
	h.fails(completeT, &pb.CompleteCheckpointCommand{JobId: job, CheckpointId: id}, ErrJobNotRunning)
	h.ok(abortT, &pb.AbortCheckpointCommand{JobId: job, CheckpointId: id, Reason: "job cancelled"})
}
