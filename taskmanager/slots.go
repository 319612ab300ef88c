package taskmanager

import (
	"fmt"
	"slices"
	"sync"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// slotTable is the TaskManager's slots and admission: the tasks it holds (terminal ones while
// retained for reports), by attempt and by subtask, the non-terminal occupants of each slot
// (slot sharing), and the attempts the leader cancelled before their SubmitTask arrived. Its
// lock is the task lock (TaskManager.mu), which also guards each task's fields: methods named
// ...Locked run under it, the others take it.
type slotTable struct {
	mu         *sync.Mutex
	tm         string // the TaskManager's id, for messages
	hasStorage bool   // checkpoint storage is configured (Config.CheckpointDir)

	tasks map[string]*task // by attempt id, terminal ones while retained
	// bySubtask: the same tasks by job, vertex and subtask, so that admitting a task does not
	// scan every task retained (a TM that ran a few 1024-task jobs retains thousands).
	bySubtask map[subtaskKey][]*task
	slots     [][]*task   // the non-terminal occupants of each slot
	cancelled *tombstones // attempts cancelled before they were submitted here
}

func newSlotTable(mu *sync.Mutex, tm string, slots int, hasStorage bool) *slotTable {
	return &slotTable{
		mu: mu, tm: tm, hasStorage: hasStorage,
		tasks: map[string]*task{}, bySubtask: map[subtaskKey][]*task{},
		slots: make([][]*task, slots), cancelled: newTombstones(MaxCancelTombstones),
	}
}

// subtaskKey is the subtask a task is an attempt of.
type subtaskKey struct {
	job, vertex string
	subtask     int32
}

func subtaskOf(d *pb.TaskDeploymentDescriptor) subtaskKey {
	return subtaskKey{d.GetJobId(), d.GetVertexId(), d.GetSubtaskIndex()}
}

// addLocked lists a task (tasks, bySubtask).
func (s *slotTable) addLocked(t *task) {
	s.tasks[t.attempt()] = t
	k := subtaskOf(t.tdd)
	s.bySubtask[k] = append(s.bySubtask[k], t)
}

// dropLocked forgets the task of an attempt id.
func (s *slotTable) dropLocked(id string) {
	t := s.tasks[id]
	if t == nil {
		return
	}
	delete(s.tasks, id)
	k := subtaskOf(t.tdd)
	ts := slices.DeleteFunc(s.bySubtask[k], func(o *task) bool { return o == t })
	if len(ts) == 0 {
		delete(s.bySubtask, k)
	} else {
		s.bySubtask[k] = ts
	}
}

// placeLocked lists an admitted task and puts it in its slot. epoch is the leader epoch of the
// call that submitted it and seen the highest epoch this TM had seen when it accepted that call
// (the two differ only when fencing let a deposed leader's call through); its start event
// carries both.
func (s *slotTable) placeLocked(t *task, epoch, seen uint64) {
	t.deployEpoch, t.fenceEpoch = epoch, seen
	s.addLocked(t)
	i := t.tdd.GetSlotIndex()
	s.slots[i] = append(s.slots[i], t)
}

// vacateLocked takes an ended task out of its slot (it stays listed until reaped or
// acknowledged).
func (s *slotTable) vacateLocked(t *task) {
	i := t.tdd.GetSlotIndex()
	if j := slices.Index(s.slots[i], t); j >= 0 {
		s.slots[i] = slices.Delete(s.slots[i], j, j+1)
	}
}

// admitLocked decides whether a validated descriptor may start now: nil to start it,
// redelivered for an attempt already here, or the refusal (ErrCancelledUnseen,
// ErrNoCheckpointStorage, ErrStaleAttempt, ErrSlotBusy).
func (s *slotTable) admitLocked(d *pb.TaskDeploymentDescriptor) (redelivered bool, err error) {
	if _, ok := s.tasks[d.GetAttemptId()]; ok {
		return true, nil
	}
	if s.cancelled.has(d.GetAttemptId()) {
		return false, errorf(ErrCancelledUnseen, "attempt %s of %s[%d] was cancelled by the leader before it reached %s: not starting it",
			d.GetAttemptId(), d.GetVertexId(), d.GetSubtaskIndex(), s.tm)
	}
	if d.GetCheckpointed() && !s.hasStorage {
		return false, errorf(ErrNoCheckpointStorage, "job %s is checkpointed, but %s has no checkpoint storage (start it with --checkpoint-dir, the directory every JobMaster and TaskManager shares): not starting %s[%d]",
			d.GetJobId(), s.tm, d.GetVertexId(), d.GetSubtaskIndex())
	}
	if o := s.newerAttemptLocked(d); o != nil {
		return false, errorf(ErrStaleAttempt, "stale attempt number %d of %s[%d]: attempt %s (number %d, %s) is already on %s",
			d.GetAttemptNumber(), d.GetVertexId(), d.GetSubtaskIndex(), o.attempt(), o.tdd.GetAttemptNumber(), o.state, s.tm)
	}
	if o := s.busyWithLocked(d); o != nil {
		return false, errorf(ErrSlotBusy, "slot %d of %s is busy with attempt %s (job %s, %s/%d, %s)",
			d.GetSlotIndex(), s.tm, o.attempt(), o.tdd.GetJobId(), o.tdd.GetVertexId(), o.tdd.GetSubtaskIndex(), o.state)
	}
	return false, nil
}

// newerAttemptLocked returns a task of the same ExecutionVertex with an attempt number at or
// above d's (a deployment from an outdated view of the graph), or nil.
func (s *slotTable) newerAttemptLocked(d *pb.TaskDeploymentDescriptor) *task {
	for _, o := range s.bySubtask[subtaskOf(d)] {
		if o.tdd.GetAttemptNumber() >= d.GetAttemptNumber() {
			return o
		}
	}
	return nil
}

// busyWithLocked returns the task that keeps d out of its slot, or nil. Slot sharing: a slot
// runs tasks of one job, at most one subtask of each vertex.
func (s *slotTable) busyWithLocked(d *pb.TaskDeploymentDescriptor) *task {
	for _, o := range s.slots[d.GetSlotIndex()] {
		if o.tdd.GetJobId() != d.GetJobId() || o.tdd.GetVertexId() == d.GetVertexId() {
			return o
		}
	}
	return nil
}

// freeLocked is the number of slots without a non-terminal task.
func (s *slotTable) freeLocked() int {
	n := 0
	for _, occupants := range s.slots {
		if len(occupants) == 0 {
			n++
		}
	}
	return n
}

// free is freeLocked under the lock.
func (s *slotTable) free() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.freeLocked()
}

// cancelAll cancels every non-terminal task and returns them.
func (s *slotTable) cancelAll(why string) []*task {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*task
	for _, t := range s.tasks {
		if !isTerminal(t.state) {
			t.cancelWith(why)
			out = append(out, t)
		}
	}
	return out
}

// fail makes a running task fail with the given cause (FailTask).
func (s *slotTable) fail(attemptID, cause string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tasks[attemptID]
	if t == nil || isTerminal(t.state) {
		return fmt.Errorf("%w: no running attempt %s", ErrInvalidTask, attemptID)
	}
	if cause == "" {
		cause = "failed on request"
	}
	t.failNote = cause
	t.cancel()
	return nil
}

// disown cancels an attempt the leader no longer owns, without reporting it again.
func (s *slotTable) disown(attempt string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tasks[attempt]
	if t == nil {
		return
	}
	t.silent = true
	if !isTerminal(t.state) {
		t.cancelWith("leader does not own the attempt (accepted=false)")
	}
}

// deployedLocked lists every task the TM still holds for a heartbeat, terminal ones included
// until the leader acknowledges them: a FINISHED whose UpdateTaskExecutionState is delayed (the
// outbox backing off) is still here, so the leader does not take it for missing and fail it.
func (s *slotTable) deployedLocked() []*pb.DeployedExecution {
	var out []*pb.DeployedExecution
	for _, t := range sortedTasks(s.tasks) {
		if !t.silent {
			out = append(out, &pb.DeployedExecution{JobId: t.tdd.GetJobId(), AttemptId: t.attempt(), State: t.state})
		}
	}
	return out
}

// snapshot is every task as a TaskInfo, sorted (TaskManager.Tasks).
func (s *slotTable) snapshot() []TaskInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]TaskInfo, 0, len(s.tasks))
	for _, t := range sortedTasks(s.tasks) {
		d := t.tdd
		out = append(out, TaskInfo{
			JobID: d.GetJobId(), VertexID: d.GetVertexId(), Subtask: d.GetSubtaskIndex(),
			AttemptID: d.GetAttemptId(), AttemptNumber: d.GetAttemptNumber(),
			State: t.state, FailureCause: t.cause, Slot: d.GetSlotIndex(),
			StartTimestamp: d.GetStartTimestamp(), Retained: isTerminal(t.state),
		})
	}
	return out
}
