package taskmanager

import (
	"time"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// What the TaskManager's metrics read (metrics.TaskManager, served on its --http-addr).

// LastContact is when this TaskManager last heard from a leader it accepted (a heartbeat or
// registration answered, or an accepted call).
func (tm *TaskManager) LastContact() time.Time {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.lastContact
}

// OutboxRetries counts the messages to the leader that failed and were sent again.
func (tm *TaskManager) OutboxRetries() int64 { return tm.outbox.retries.Load() }

// TaskIO is one task's record counts.
type TaskIO struct {
	JobID, VertexID        string
	Subtask, AttemptNumber int32
	RecordsIn, RecordsOut  int64
	BytesIn, BytesOut      int64 // over Exchange streams
}

// TaskIOs returns the record counts of this TaskManager's tasks (retained terminal ones too).
func (tm *TaskManager) TaskIOs() []TaskIO {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	out := make([]TaskIO, 0, len(tm.tasks))
	for _, t := range tm.tasks {
		d := t.tdd
		out = append(out, TaskIO{JobID: d.GetJobId(), VertexID: d.GetVertexId(), Subtask: d.GetSubtaskIndex(), AttemptNumber: d.GetAttemptNumber(),
			RecordsIn: t.recordsIn.Load(), RecordsOut: t.recordsOut.Load(), BytesIn: t.bytesIn.Load(), BytesOut: t.bytesOut.Load()})
	}
	return out
}

// TaskStates counts this TaskManager's tasks by state, retained terminal ones included. It
// holds the TM's mutex for one pass over its own tasks (at most its slots times the tasks a
// slot shares), not over any job's.
func (tm *TaskManager) TaskStates() map[pb.ExecutionState]int {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	out := map[pb.ExecutionState]int{}
	for _, t := range tm.tasks {
		out[t.state]++
	}
	return out
}
