package taskmanager

import (
	"time"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// What the TaskManager's metrics read (metrics.TaskManager, served on its --http-addr).

// LastContact is when this TaskManager last heard from a leader it accepted (a heartbeat or
// registration answered, or an accepted call).
func (tm *TaskManager) LastContact() time.Time { return tm.fence.contact() }

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
func (tm *TaskManager) TaskIOs() []TaskIO { return tm.table.ios() }

func (s *slotTable) ios() []TaskIO {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]TaskIO, 0, len(s.tasks))
	for _, t := range s.tasks {
		d := t.tdd
		out = append(out, TaskIO{JobID: d.GetJobId(), VertexID: d.GetVertexId(), Subtask: d.GetSubtaskIndex(), AttemptNumber: d.GetAttemptNumber(),
			RecordsIn: t.recordsIn.Load(), RecordsOut: t.recordsOut.Load(), BytesIn: t.bytesIn.Load(), BytesOut: t.bytesOut.Load()})
	}
	return out
}

// TaskStates counts this TaskManager's tasks by state, retained terminal ones included. It
// holds the TM's mutex for one pass over its own tasks (at most its slots times the tasks a
// slot shares), not over any job's.
func (tm *TaskManager) TaskStates() map[pb.ExecutionState]int { return tm.table.states() }

func (s *slotTable) states() map[pb.ExecutionState]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[pb.ExecutionState]int{}
	for _, t := range s.tasks {
		out[t.state]++
	}
	return out
}

// CurrentRefusal returns the leader's last refusal of a call that has not succeeded since, or
// nil.
func (tm *TaskManager) CurrentRefusal() *Refusal { return tm.link.currentRefusal() }

// Refusals counts the leader's refusals of this TM's calls, by call and code, sorted.
func (tm *TaskManager) Refusals() []RefusalCount { return tm.link.refusals() }
