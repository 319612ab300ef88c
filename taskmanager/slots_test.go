package taskmanager

import (
	"errors"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestSlotTableAdmission: one case per rule of admission (slots.go), each with the error kind
// and the status code the leader gets for it.
func TestSlotTableAdmission(t *testing.T) {
	desc := func(job, vertex, attempt string, subtask, number, slot int32) *pb.TaskDeploymentDescriptor {
		return &pb.TaskDeploymentDescriptor{JobId: job, VertexId: vertex, AttemptId: attempt, SubtaskIndex: subtask, AttemptNumber: number, SlotIndex: slot}
	}
	var mu sync.Mutex
	s := newSlotTable(&mu, "tm1", 3, false)
	place := func(d *pb.TaskDeploymentDescriptor) {
		s.placeLocked(&task{tdd: d, state: pb.ExecutionState_EXECUTION_STATE_RUNNING}, 1, 1)
	}
	place(desc("j", "src", "a-src-0", 0, 0, 0))
	place(desc("j", "map", "a-map-0", 0, 2, 0))
	s.cancelled.add("a-gone")
	checkpointed := desc("j", "sink", "a-ckpt", 0, 0, 1)
	checkpointed.Checkpointed = true

	cases := []struct {
		name        string
		d           *pb.TaskDeploymentDescriptor
		redelivered bool
		kind        error // nil: admitted
		code        codes.Code
	}{
		{"a free slot", desc("j", "sink", "a-sink-1", 1, 0, 1), false, nil, codes.OK},
		{"slot sharing: another vertex of the job", desc("j", "sink", "a-sink-0", 0, 0, 0), false, nil, codes.OK},
		{"the same attempt again", desc("j", "src", "a-src-0", 0, 0, 0), true, nil, codes.OK},
		{"cancelled before it arrived", desc("j", "src", "a-gone", 1, 0, 1), false, ErrCancelledUnseen, codes.FailedPrecondition},
		{"checkpointed job, no storage", checkpointed, false, ErrNoCheckpointStorage, codes.FailedPrecondition},
		{"an attempt number at or below one here", desc("j", "map", "a-map-old", 0, 1, 2), false, ErrStaleAttempt, codes.FailedPrecondition},
		{"a slot of another job", desc("k", "src", "b-src-0", 0, 0, 0), false, ErrSlotBusy, codes.ResourceExhausted},
		{"a second subtask of a vertex in the slot", desc("j", "src", "a-src-1", 1, 0, 0), false, ErrSlotBusy, codes.ResourceExhausted},
	}
	for _, c := range cases {
		redelivered, err := s.admitLocked(c.d)
		if redelivered != c.redelivered || !errors.Is(err, c.kind) || (c.kind == nil) != (err == nil) || codeOf(err) != c.code {
			t.Errorf("%s: admitLocked = %v, %v (code %v), want %v, %v (code %v)", c.name, redelivered, err, codeOf(err), c.redelivered, c.kind, c.code)
		}
	}
	if o := s.busyWithLocked(desc("k", "src", "b-src-0", 0, 0, 0)); o == nil || o.attempt() != "a-src-0" {
		t.Errorf("busyWithLocked names %v, want the first occupant a-src-0", o)
	}
	if n := s.free(); n != 2 {
		t.Errorf("%d free slots, want 2", n)
	}
	t0 := s.tasks["a-src-0"]
	s.vacateLocked(t0)
	s.vacateLocked(s.tasks["a-map-0"])
	if n := s.free(); n != 3 || len(s.tasks) != 2 {
		t.Errorf("after both left slot 0: %d free slots, %d tasks listed; want 3 and 2 (listed until reaped)", n, len(s.tasks))
	}
}
