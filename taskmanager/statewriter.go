package taskmanager

import (
	"fmt"
	"sync"
	"time"

	"github.com/jmcluster/jmcluster/checkpoint"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// stateWriter writes the TaskManager's task states to the checkpoint storage: one goroutine at
// a time, which takes every state queued meanwhile as one batch (checkpoint.Store.WriteBatch:
// the batch's files synced together), then acknowledges each state written and declines the
// checkpoint for each that was not. A task only queues its state (persistCheckpoint); nothing
// waits for the writer. One writer, not one goroutine per state: a thousand states written at
// once were a thousand goroutines each holding one of the process's few Ps through the short
// blocking system calls of its write and fsyncs (the scheduler hands a P in a system call to
// other goroutines only when the call lasts longer than its monitor's tick, up to 10 ms), so the
// tasks waited for a P while the checkpoint was in flight (docs/benchmarks.md, "Record latency
// through a failover").
type stateWriter struct {
	tm      *TaskManager
	mu      sync.Mutex
	queue   []queuedState
	writing bool // a writer goroutine runs; it drains the queue before it ends
}

// queuedState is one task's state for one checkpoint, waiting for the writer.
type queuedState struct {
	t         *task
	id        uint64
	state     []byte
	alignment time.Duration
}

// enqueue queues a state and starts the writer unless one runs.
func (w *stateWriter) enqueue(q queuedState) {
	w.mu.Lock()
	w.queue = append(w.queue, q)
	start := !w.writing
	w.writing = true
	w.mu.Unlock()
	if start {
		go w.run() // nothing waits for it: a TM that stops meanwhile drops the acks (its outbox is stopped)
	}
}

// run writes batches until the queue is empty.
func (w *stateWriter) run() {
	for {
		w.mu.Lock()
		batch := w.queue
		w.queue = nil
		if len(batch) == 0 {
			w.writing = false
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		w.write(batch)
	}
}

// write writes one batch and acknowledges (or declines) each of its states.
func (w *stateWriter) write(batch []queuedState) {
	tm := w.tm
	states := make([]checkpoint.State, len(batch))
	for i, q := range batch {
		d := q.t.tdd
		states[i] = checkpoint.State{Job: d.GetJobId(), ID: q.id, Vertex: d.GetVertexId(),
			Subtask: d.GetSubtaskIndex(), Attempt: d.GetAttemptNumber(), Data: q.state}
	}
	res := tm.ckpt.WriteBatch(states)
	for i, q := range batch {
		if err := res[i].Err; err != nil {
			tm.declineCheckpoint(q.t, q.id, fmt.Sprintf("write its state: %v", err))
			continue
		}
		d := q.t.tdd
		ack := &pb.TaskCheckpointAck{
			VertexId: d.GetVertexId(), SubtaskIndex: d.GetSubtaskIndex(), AttemptNumber: d.GetAttemptNumber(),
			StateSizeBytes: int64(len(q.state)), StatePath: res[i].Path, Checksum: res[i].Checksum, AlignmentUs: q.alignment.Microseconds(),
		}
		tm.mu.Lock()
		if q.id > q.t.ackedID {
			q.t.ackedID, q.t.acked = q.id, ack
		}
		tm.mu.Unlock()
		tm.outbox.enqueueAck(d, q.id, ack)
	}
}
