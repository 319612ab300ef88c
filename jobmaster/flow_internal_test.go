package jobmaster

import (
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/transport/pb"
)

func running(attempt string, in, out, blockedNs, wm, dl int64) *pb.DeployedExecution {
	return &pb.DeployedExecution{JobId: "j", AttemptId: attempt, State: stRunning, RecordsIn: in, RecordsOut: out, BlockedNs: blockedNs, WatermarkMs: wm, DeadLetters: dl}
}

// TestFlowStore: rates are summed over a vertex's subtasks from their last two samples on the
// TM's clock, backpressure is the highest subtask's share (clamped to 0..1), the watermark the
// lowest and absent while any subtask has none; a new attempt, a TM clock that started again
// and a stale sample start over; a heartbeat without a clock records nothing.
func TestFlowStore(t *testing.T) {
	now := time.Unix(1000, 0)
	s := newFlowStore(3 * time.Second)
	where := map[string]flowPlace{
		"a0": {job: "j", key: flowKey{"v", 0}}, "a1": {job: "j", key: flowKey{"v", 1}}, "b0": {job: "j", key: flowKey{"w", 0}},
	}
	sec := int64(time.Second)
	s.observe("tm1", sec, now, []*pb.DeployedExecution{running("a0", 0, 0, 0, 100, 0), running("a1", 0, 0, 0, 0, 0), running("b0", 0, 0, 0, 0, 0)}, where)
	if f := s.flow("j", now); len(f) != 0 {
		t.Fatalf("one sample per subtask measured %v; want nothing yet", f)
	}
	s.observe("tm1", 3*sec, now.Add(2*time.Second), []*pb.DeployedExecution{
		running("a0", 200, 100, sec, 500, 2), running("a1", 400, 300, 3*sec, 400, 1), running("b0", 10, 0, 0, 0, 0),
		{JobId: "j", AttemptId: "x", State: stRunning, RecordsIn: 1}, // not the graph's: ignored
	}, where)
	f := s.flow("j", now.Add(2*time.Second))
	v := f["v"]
	if v.Subtasks != 2 || v.RecordsInPerS != 300 || v.RecordsOutPerS != 200 || v.Backpressure != 1 || v.Watermark != 400 || v.DeadLetters != 3 {
		t.Fatalf("vertex v = %+v; want 2 subtasks, 300 in/s, 200 out/s, backpressure 1 (clamped), watermark 400, 3 dead letters", v)
	}
	if w := f["w"]; w.Subtasks != 1 || w.RecordsInPerS != 5 || w.Backpressure != 0 || w.Watermark != 0 {
		t.Fatalf("vertex w = %+v; want 5 in/s, no backpressure, no watermark", w)
	}

	// a1 restarted as a2 on tm2: subtask 1 starts over; tm1's clock started again: a0 starts over.
	where["a2"] = flowPlace{job: "j", key: flowKey{"v", 1}}
	s.observe("tm2", 50*sec, now.Add(3*time.Second), []*pb.DeployedExecution{running("a2", 5, 5, 0, 0, 0)}, where)
	s.observe("tm1", sec/2, now.Add(3*time.Second), []*pb.DeployedExecution{running("a0", 1, 1, 0, 0, 0), running("b0", 20, 0, sec/2, 0, 0)}, where)
	if v, ok := s.flow("j", now.Add(3*time.Second))["v"]; ok {
		t.Fatalf("vertex v measured %+v after both subtasks started over", v)
	}
	s.observe("tm1", sec, now.Add(4*time.Second), []*pb.DeployedExecution{running("a0", 1, 1, 0, 0, 0), running("b0", 20, 0, sec, 0, 0)}, where)
	if w := s.flow("j", now.Add(4*time.Second))["w"]; w.Backpressure != 1 || w.RecordsInPerS != 0 {
		t.Fatalf("vertex w = %+v; want backpressure 1 (blocked the whole half second), 0 in/s", w)
	}

	// Stale: nothing arrived for longer than staleAfter; the next observe prunes the job.
	if f := s.flow("j", now.Add(8*time.Second)); len(f) != 0 {
		t.Fatalf("stale samples measured %v", f)
	}
	s.observe("tm3", sec, now.Add(9*time.Second), nil, map[string]flowPlace{"z": {job: "k", key: flowKey{"z", 0}}})
	if _, ok := s.jobs["j"]; ok {
		t.Fatalf("job j's stale samples were not pruned")
	}
	s.observe("tm1", 0, now, []*pb.DeployedExecution{running("a0", 1, 1, 0, 0, 0)}, where)
	if _, ok := s.jobs["j"]; ok {
		t.Fatalf("a heartbeat without a flow clock recorded samples")
	}
}
