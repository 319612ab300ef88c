package fsm

import (
	"strings"
	"testing"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/transport/pb"
)

func TestCreateAttempts(t *testing.T) {
	h := newHarness(t)
	id, other := jobIDN(0), jobIDN(1)
	h.submit(streamingJob(id, 2, 2))
	h.submit(streamingJob(other, 1, 1))
	h.attemptAll(other, 0)

	create := func(specs ...*pb.AttemptSpec) *pb.CreateAttemptsCommand {
		return &pb.CreateAttemptsCommand{JobId: id, Attempts: specs, Timestamp: 4000}
	}
	good := spec(id, "src", 0, 0)
	h.fails(createT, &pb.CreateAttemptsCommand{JobId: "nope", Attempts: []*pb.AttemptSpec{good}}, ErrUnknownJob)
	h.fails(createT, create(good, spec(id, "nope", 0, 0)), ErrUnknownVertex)
	h.fails(createT, create(good, spec(id, "src", 2, 0)), ErrUnknownVertex)
	empty := spec(id, "src", 1, 0)
	empty.AttemptId = ""
	h.fails(createT, create(good, empty), ErrInvalidCommand)
	h.fails(createT, create(good, spec(id, "src", 0, 1)), ErrInvalidCommand)
	dupID := spec(id, "src", 1, 0)
	dupID.AttemptId = good.AttemptId
	h.fails(createT, create(good, dupID), ErrAttemptExists)
	foreign := spec(id, "src", 1, 0)
	foreign.AttemptId = attemptID(other, "src", 0, 0)
	h.fails(createT, create(good, foreign), ErrAttemptExists)
	h.fails(createT, create(spec(id, "src", 0, -1)), ErrStaleAttemptNumber)

	h.ok(createT, create(good, spec(id, "map", 0, 0)))
	rec := h.job(id)
	ev := graph.FindVertex(rec.ExecutionGraph, "src", 0)
	cur := ev.Current
	if cur.AttemptId != good.AttemptId || cur.State != pb.ExecutionState_EXECUTION_STATE_SCHEDULED ||
		cur.StartTimestamp != 4000 || len(cur.StateTimestamps) != 2 ||
		cur.StateTimestamps[0].State != pb.ExecutionState_EXECUTION_STATE_CREATED ||
		cur.Slot.GetTmId() != "tm-0" || cur.TmDataAddress != good.TmDataAddress {
		t.Errorf("current execution: %v", cur)
	}
	if rec.ModifyIndex != h.index {
		t.Errorf("modify index %d, want %d", rec.ModifyIndex, h.index)
	}
	// Producers are refreshed: map[0] reads src[0]'s attempt at its data address.
	in := graph.Inputs(rec.ExecutionGraph, graph.FindVertex(rec.ExecutionGraph, "map", 0))[0]
	if in.ProducerAttemptId != good.AttemptId || in.ProducerDataAddress != good.TmDataAddress {
		t.Errorf("map[0] input: %v", in)
	}
	if j, v, s, ok := h.f.LocateAttempt(good.AttemptId); !ok || j != id || v != "src" || s != 0 {
		t.Errorf("LocateAttempt = %s %s %d %v", j, v, s, ok)
	}

	// The current attempt is SCHEDULED (active): a new one is refused; a lower number too.
	h.fails(createT, create(spec(id, "src", 0, 1)), ErrAttemptStillActive)
	stale := spec(id, "src", 0, 0)
	stale.AttemptId = "fresh-id"
	h.fails(createT, create(stale), ErrStaleAttemptNumber)
	// All-or-nothing: a valid spec for src[1] is not applied when map[0] is refused.
	h.fails(createT, create(spec(id, "src", 1, 0), spec(id, "map", 0, 1)), ErrAttemptStillActive)

	// After FAILED, a new attempt replaces it; the old one moves to history and leaves the index.
	h.ok(updateT, &pb.UpdateExecutionStatesCommand{Updates: []*pb.ExecutionStateUpdate{
		{JobId: id, AttemptId: good.AttemptId, State: pb.ExecutionState_EXECUTION_STATE_FAILED, FailureCause: "oom"},
	}})
	// Reusing an id from history is refused.
	reuse := spec(id, "src", 0, 5)
	reuse.AttemptId = good.AttemptId
	h.fails(createT, create(reuse), ErrAttemptExists)
	h.ok(createT, create(spec(id, "src", 0, 1)))
	ev = graph.FindVertex(h.job(id).ExecutionGraph, "src", 0)
	if len(ev.History) != 1 || ev.History[0].AttemptId != good.AttemptId || ev.History[0].FailureCause != "oom" {
		t.Errorf("history: %v", ev.History)
	}
	if _, _, _, ok := h.f.LocateAttempt(good.AttemptId); ok {
		t.Errorf("old attempt still indexed")
	}

	// History is bounded.
	for n := int32(2); n < 15; n++ {
		h.ok(updateT, &pb.UpdateExecutionStatesCommand{Updates: []*pb.ExecutionStateUpdate{
			{JobId: id, AttemptId: attemptID(id, "src", 0, n-1), State: pb.ExecutionState_EXECUTION_STATE_CANCELED},
		}})
		h.ok(createT, create(spec(id, "src", 0, n)))
	}
	ev = graph.FindVertex(h.job(id).ExecutionGraph, "src", 0)
	if len(ev.History) != maxAttemptHistory || ev.History[0].AttemptNumber != 4 || ev.Current.AttemptNumber != 14 {
		t.Errorf("bounded history: %d entries, oldest %d, current %d", len(ev.History), ev.History[0].AttemptNumber, ev.Current.AttemptNumber)
	}

	// Empty command: accepted, nothing changes.
	before := h.f.Hash()
	h.ok(createT, create())
	if h.f.Hash() != before {
		t.Errorf("empty create changed the state")
	}
	// Terminal jobs take no attempts.
	h.setStatus(other, pb.JobStatus_JOB_STATUS_FAILED)
	h.fails(createT, &pb.CreateAttemptsCommand{JobId: other, Attempts: []*pb.AttemptSpec{spec(other, "map", 0, 1)}}, ErrJobTerminal)
}

func TestUpdateExecutionStates(t *testing.T) {
	h := newHarness(t)
	id, other := jobIDN(0), jobIDN(1)
	h.submit(streamingJob(id, 2, 2))
	h.submit(streamingJob(other, 1, 1))
	h.attemptAll(id, 0)
	h.attemptAll(other, 0)
	src0, map0, map1 := attemptID(id, "src", 0, 0), attemptID(id, "map", 0, 0), attemptID(id, "map", 1, 0)
	up := func(attempt string, st pb.ExecutionState) *pb.ExecutionStateUpdate {
		return &pb.ExecutionStateUpdate{JobId: id, AttemptId: attempt, State: st, Timestamp: 7000, FailureCause: "cause-" + attempt}
	}
	res := h.ok(updateT, &pb.UpdateExecutionStatesCommand{Updates: []*pb.ExecutionStateUpdate{
		up(src0, pb.ExecutionState_EXECUTION_STATE_DEPLOYING),                                                   // ok
		up(src0, pb.ExecutionState_EXECUTION_STATE_DEPLOYING),                                                   // same: no-op
		up(src0, pb.ExecutionState_EXECUTION_STATE_SCHEDULED),                                                   // illegal
		up("nope", pb.ExecutionState_EXECUTION_STATE_RUNNING),                                                   // unknown attempt
		{JobId: "nope", AttemptId: src0, State: pb.ExecutionState_EXECUTION_STATE_RUNNING},                      // unknown job
		{JobId: id, AttemptId: attemptID(other, "src", 0, 0), State: pb.ExecutionState_EXECUTION_STATE_RUNNING}, // other job's attempt
		up(map0, pb.ExecutionState_EXECUTION_STATE_UNSPECIFIED),                                                 // malformed
		up(src0, pb.ExecutionState_EXECUTION_STATE_RUNNING),                                                     // ok, after the first
	}})
	errs := res.Value.(*pb.UpdateExecutionStatesResult).Errors
	want := []string{"", "", "illegal state transition", "unknown or stale attempt", "unknown job", "unknown or stale attempt", "invalid command", ""}
	if len(errs) != len(want) {
		t.Fatalf("errors: %q", errs)
	}
	for i := range want {
		if (want[i] == "") != (errs[i] == "") || !strings.Contains(errs[i], want[i]) {
			t.Errorf("update %d: %q, want %q", i, errs[i], want[i])
		}
	}
	rec := h.job(id)
	cur := graph.FindVertex(rec.ExecutionGraph, "src", 0).Current
	if cur.State != pb.ExecutionState_EXECUTION_STATE_RUNNING || len(cur.StateTimestamps) != 4 || cur.StateTimestamps[3].Timestamp != 7000 {
		t.Errorf("src[0]: %v", cur)
	}
	if cur.FailureCause != "" {
		t.Errorf("failure cause set on a non-failure: %q", cur.FailureCause)
	}
	// PIPELINED src->map partition 0 is consumable once src[0] runs; partition 1 is not.
	fwdParts := rec.ExecutionGraph.Results[0].Partitions
	if !fwdParts[0].Consumable || fwdParts[1].Consumable {
		t.Errorf("pipelined partitions: %v", fwdParts)
	}
	// BLOCKING map->sink: not consumable while RUNNING, consumable when FINISHED.
	h.ok(updateT, &pb.UpdateExecutionStatesCommand{Updates: []*pb.ExecutionStateUpdate{
		up(map0, pb.ExecutionState_EXECUTION_STATE_DEPLOYING), up(map0, pb.ExecutionState_EXECUTION_STATE_RUNNING),
		up(map1, pb.ExecutionState_EXECUTION_STATE_DEPLOYING), up(map1, pb.ExecutionState_EXECUTION_STATE_RUNNING),
	}})
	blk := h.job(id).ExecutionGraph.Results[1].Partitions
	if blk[0].Consumable || blk[1].Consumable {
		t.Errorf("blocking partitions consumable while running: %v", blk)
	}
	h.ok(updateT, &pb.UpdateExecutionStatesCommand{Updates: []*pb.ExecutionStateUpdate{
		up(map0, pb.ExecutionState_EXECUTION_STATE_FINISHED), up(map1, pb.ExecutionState_EXECUTION_STATE_FAILED),
	}})
	rec = h.job(id)
	blk = rec.ExecutionGraph.Results[1].Partitions
	if !blk[0].Consumable || blk[1].Consumable {
		t.Errorf("blocking partitions after FINISHED/FAILED: %v", blk)
	}
	if fc := graph.FindVertex(rec.ExecutionGraph, "map", 1).Current.FailureCause; fc != "cause-"+map1 {
		t.Errorf("failure cause = %q", fc)
	}
	// FAILED clears the consumable flag of a pipelined partition too.
	h.ok(updateT, &pb.UpdateExecutionStatesCommand{Updates: []*pb.ExecutionStateUpdate{up(src0, pb.ExecutionState_EXECUTION_STATE_CANCELING), up(src0, pb.ExecutionState_EXECUTION_STATE_CANCELED)}})
	if p := h.job(id).ExecutionGraph.Results[0].Partitions[0]; p.Consumable {
		t.Errorf("canceled producer partition still consumable")
	}
	// A stale attempt (in history after a new one) is refused.
	h.ok(createT, &pb.CreateAttemptsCommand{JobId: id, Attempts: []*pb.AttemptSpec{spec(id, "src", 0, 1)}})
	res = h.ok(updateT, &pb.UpdateExecutionStatesCommand{Updates: []*pb.ExecutionStateUpdate{up(src0, pb.ExecutionState_EXECUTION_STATE_FAILED)}})
	if e := res.Value.(*pb.UpdateExecutionStatesResult).Errors[0]; !strings.Contains(e, ErrUnknownAttempt.Error()) {
		t.Errorf("stale attempt: %q", e)
	}
	// An empty batch is fine.
	res = h.ok(updateT, &pb.UpdateExecutionStatesCommand{})
	if n := len(res.Value.(*pb.UpdateExecutionStatesResult).Errors); n != 0 {
		t.Errorf("empty batch: %d results", n)
	}
}
