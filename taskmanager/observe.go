package taskmanager

import (
	"time"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// flowClock is the time base of the flow counters the heartbeats carry: the leader divides
// their deltas by the deltas of this clock, the TM's own, so that neither clocks' offset nor a
// heartbeat's delay on the way distorts a rate.
var flowClock = time.Now()

// flowLocked fills the flow counters of the RUNNING attempts among deployed (every heartbeat,
// every running attempt, cumulative: a new leader has its rates after two heartbeats, and an
// idle task's zero rate needs its samples as much as a busy one's) and returns the clock
// reading they go with. The table's mutex is held.
func (s *slotTable) flowLocked(deployed []*pb.DeployedExecution) int64 {
	now := int64(time.Since(flowClock)) + 1
	for _, d := range deployed {
		t := s.tasks[d.AttemptId]
		if t == nil || d.State != pb.ExecutionState_EXECUTION_STATE_RUNNING {
			continue
		}
		d.RecordsIn, d.RecordsOut = t.recordsIn.Load(), t.recordsOut.Load()
		d.BlockedNs = int64(t.blocked.Total())
		d.WatermarkMs, d.DeadLetters = t.watermarkMs.Load(), t.deadLetters.Load()
	}
	return now
}

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
	// Blocked is the time the task waited for space downstream (backpressure).
	Blocked time.Duration
	// Wasm: the counts of the WebAssembly module the task runs; nil for a task that runs none.
	Wasm *WasmIO
	// Start is the time from the deployment's acceptance to RUNNING: the task's start on this
	// TaskManager (its state restored, its operator opened, its partitions made); 0 before.
	Start time.Duration
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
			RecordsIn: t.recordsIn.Load(), RecordsOut: t.recordsOut.Load(), BytesIn: t.bytesIn.Load(), BytesOut: t.bytesOut.Load(),
			Blocked: t.blocked.Total(), Wasm: t.wasm.io(), Start: time.Duration(t.startTook.Load())})
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
