package taskmanager

import (
	"context"
	"sort"
	"sync/atomic"
	"time"

	"github.com/jmcluster/jmcluster/dataplane"
	"github.com/jmcluster/jmcluster/operator"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// task is one deployed attempt. Fields below the mutex line are guarded by TaskManager.mu.
type task struct {
	tdd    *pb.TaskDeploymentDescriptor
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when the task goroutine has exited
	gates  []*dataplane.InputGate
	// batch: the start-up of the tasks submitted with this one (SubmitTasks); the task's own
	// goroutine marks it started once (startedOnce).
	batch       *startGate
	startedOnce bool

	// guarded by TaskManager.mu
	state      pb.ExecutionState
	cause      string
	endedAt    time.Time
	silent     bool   // the leader disowned the attempt: report nothing more
	cancelNote string // why the TM cancelled it locally
	failNote   string // set by FailTask: the task ends FAILED with this cause
	produced   []dataplane.PartitionKey

	// ackedID and acked: the newest checkpoint the task acknowledged (or was restored from)
	// and its acknowledgement, for the reports a new leader completes checkpoints with.
	ackedID uint64
	acked   *pb.TaskCheckpointAck
	// committer: the task's sink commits its output with completed checkpoints.
	committer operator.Committer

	deployEpoch uint64 // the epoch of the leader call that submitted the task
	fenceEpoch  uint64 // the highest epoch this TM had seen when it accepted that call

	// inject is the newest checkpoint whose barrier a source task is to inject (TriggerCheckpoint;
	// 0: none); the task's goroutine injects it in front of its next record.
	inject atomic.Uint64
	// records the task read from its inputs and emitted (metrics; no lock)
	recordsIn, recordsOut atomic.Int64
	// made is when the deployment was accepted; startTook the time from then to RUNNING (its
	// start: restored state, the operator opened, its partitions made), 0 before.
	made      time.Time
	startTook atomic.Int64
	// encoded record batches received and sent over Exchange streams (local channels carry none)
	bytesIn, bytesOut atomic.Int64
	// the time the task waited for space downstream (backpressure), its watermark (unix ms, 0:
	// none) and the records it sent to the dead-letter output: heartbeats carry them (observe.go)
	blocked                  dataplane.BlockedTime
	watermarkMs, deadLetters atomic.Int64
	// the counts of the WebAssembly module a wasm task runs (metrics; wasmstats.go)
	wasm wasmCounts
}

func (t *task) attempt() string { return t.tdd.GetAttemptId() }

// startGate is the start-up of the tasks of one SubmitTasks batch: open when every one of them
// has reached RUNNING (its partitions registered, its RUNNING in the outbox) or ended before.
// The batch's consumers open their input channels once it is open: the start-up of the tasks
// deployed with them comes first (the channel opens of 512 consumers, 512 channels each, ran
// ahead of the later tasks' start-up and held their RUNNING back), and the producers among
// them are then registered, so a local channel opens at once instead of waiting for its
// producer.
type startGate struct {
	pending atomic.Int32
	open    chan struct{}
}

func newStartGate(n int) *startGate {
	g := &startGate{open: make(chan struct{})}
	g.pending.Store(int32(n))
	if n <= 0 {
		close(g.open)
	}
	return g
}

// started marks one of the batch's tasks started (or ended before it did).
func (g *startGate) started() {
	if g.pending.Add(-1) == 0 {
		close(g.open)
	}
}

// markStarted tells t's batch that t has started; only t's goroutine calls it, once or more.
func (t *task) markStarted() {
	if t.batch != nil && !t.startedOnce {
		t.startedOnce = true
		t.batch.started()
	}
}

// wait blocks until the task goroutine exited or d passed; it reports whether it exited.
func (t *task) wait(d time.Duration) bool {
	if d <= 0 {
		d = time.Millisecond
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-t.done:
		return true
	case <-timer.C:
		return false
	}
}

// isTerminal reports whether s is FINISHED, CANCELED or FAILED.
func isTerminal(s pb.ExecutionState) bool {
	switch s {
	case pb.ExecutionState_EXECUTION_STATE_FINISHED, pb.ExecutionState_EXECUTION_STATE_CANCELED,
		pb.ExecutionState_EXECUTION_STATE_FAILED:
		return true
	}
	return false
}

// sortedTasks orders tasks by job, vertex, subtask, attempt number and attempt id.
func sortedTasks(m map[string]*task) []*task {
	ts := make([]*task, 0, len(m))
	for _, t := range m {
		ts = append(ts, t)
	}
	sort.Slice(ts, func(i, j int) bool {
		a, b := ts[i].tdd, ts[j].tdd
		if a.GetJobId() != b.GetJobId() {
			return a.GetJobId() < b.GetJobId()
		}
		if a.GetVertexId() != b.GetVertexId() {
			return a.GetVertexId() < b.GetVertexId()
		}
		if a.GetSubtaskIndex() != b.GetSubtaskIndex() {
			return a.GetSubtaskIndex() < b.GetSubtaskIndex()
		}
		if a.GetAttemptNumber() != b.GetAttemptNumber() {
			return a.GetAttemptNumber() < b.GetAttemptNumber()
		}
		return a.GetAttemptId() < b.GetAttemptId()
	})
	return ts
}

// cancelWith asks the task to stop, noting why (the first reason given is kept); the task
// goroutine moves it to CANCELED. Under the task lock.
func (t *task) cancelWith(why string) {
	if t.cancelNote == "" {
		t.cancelNote = why
	}
	t.cancel()
}

// FailTask makes a running task fail with the given cause, as if its operator had failed. It
// is the fault-injection hook of the fault tests and of operators ("fail this attempt").
func (tm *TaskManager) FailTask(attemptID, cause string) error {
	return tm.table.fail(attemptID, cause)
}
