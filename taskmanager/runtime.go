package taskmanager

import (
	"context"
	"fmt"
	"time"

	"github.com/jmcluster/jmcluster/dataplane"
	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/operator"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// newTask prepares a task for a validated descriptor (its context and input gates). It needs
// no TM state, so a batch prepares its tasks before it takes the TM's lock.
func (tm *TaskManager) newTask(tdd *pb.TaskDeploymentDescriptor, shared *sharedLists) *task {
	ctx, cancel := context.WithCancel(tm.ctx)
	return &task{
		tdd:    tdd,
		ctx:    ctx,
		cancel: cancel,
		done:   make(chan struct{}),
		gates:  shared.gates(tdd),
		state:  pb.ExecutionState_EXECUTION_STATE_DEPLOYING,
		made:   time.Now(),
	}
}

func (tm *TaskManager) runTask(t *task) {
	defer close(t.done)
	defer t.markStarted() // a task that ended before RUNNING holds its batch's gate no longer
	started, err := tm.execute(t)
	tm.complete(t, started, err)
}

// setState moves a task forward unless it has been cancelled meanwhile.
func (tm *TaskManager) setState(t *task, s pb.ExecutionState) bool {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	if t.ctx.Err() != nil {
		return false
	}
	t.state = s
	return true
}

// execute runs the task to its end; started tells whether it reached RUNNING.
func (tm *TaskManager) execute(t *task) (started bool, err error) {
	d := t.tdd
	if !tm.setState(t, pb.ExecutionState_EXECUTION_STATE_INITIALIZING) {
		return false, t.ctx.Err()
	}
	info := taskInfo(d, tm.cfg.WorkDir)
	info.Logger = tm.opLog.With("job", d.GetJobId(), "vertex", d.GetVertexId(), "subtask", d.GetSubtaskIndex())
	info.Artifact = tm.artifacts.get
	info.Secret = secrets{dir: tm.cfg.SecretsDir}.get
	if info.Restored, err = tm.restoreState(t); err != nil {
		return false, err
	}
	info.RestoredAhead = tm.newerState(t) // checkpoint.go: a sink restored past a damaged checkpoint
	info.Checkpointed, info.RestoredCheckpoint = d.GetCheckpointed(), d.GetRestoreCheckpointId()
	var out *outputs // the partitions by what they carry (outputs.go), once produced
	info.DeadLetters = deadLetterEmit(d, &out)
	if id := d.GetRestoreCheckpointId(); id != 0 {
		tm.log.Info("task restored from a checkpoint", "job", d.GetJobId(), "vertex", d.GetVertexId(), "subtask", d.GetSubtaskIndex(),
			"attempt", d.GetAttemptId(), "checkpoint", id, "state_bytes", len(info.Restored))
		tm.mu.Lock()
		t.ackedID, t.acked = id, d.GetRestoreFrom()
		tm.mu.Unlock()
	}
	var (
		src operator.SourceOperator
		op  operator.Operator
	)
	if graph.OperatorRoleOf(d.GetOperator()) == graph.RoleSource {
		if src, err = operator.NewSource(d.GetOperator(), info); err != nil {
			return false, err
		}
	} else {
		if op, err = operator.New(d.GetOperator(), info); err != nil {
			return false, err
		}
		if err = op.Open(t.ctx); err != nil {
			_ = op.Close()
			return false, err
		}
		if c, ok := op.(operator.Committer); ok && d.GetCheckpointed() {
			tm.mu.Lock()
			t.committer = c
			tm.mu.Unlock()
		}
		defer func() {
			if cerr := op.Close(); cerr != nil && err == nil {
				err = cerr
			}
		}()
	}

	// The task's result partitions, served from here on; answer (idempotent) answers the
	// consumers already waiting for them.
	parts, keys, answer := tm.dp.Produce(d.GetJobId(), d.GetAttemptId(), d.GetProduced(), &t.bytesOut)
	for _, p := range parts {
		p.CountBlocked(&t.blocked)
	}
	tm.mu.Lock()
	t.produced = keys
	tm.mu.Unlock()
	defer answer()                         // also when the task ends before RUNNING: the waiters learn it is gone
	injected := d.GetRestoreCheckpointId() // a source's newest injected barrier
	inject := func() error {
		return tm.injectBarrier(t, &injected, func(id uint64) error {
			return tm.checkpointReached(t.ctx, t, id, 0, src, parts)
		})
	}
	out = newOutputs(t, d.GetProduced(), parts, tm.cfg.MaxRecordSize)
	if src != nil { // a source's dead letter, as its record, goes after a triggered barrier
		out.beforeDead = inject
	}
	emit := func(r operator.Record) error {
		if src != nil {
			// A triggered checkpoint's barrier goes in front of the source's next record.
			if err := inject(); err != nil {
				return err
			}
		}
		if r.Watermark {
			return emitWatermark(t, r, parts)
		}
		if n := r.Size(); n > tm.cfg.MaxRecordSize {
			return fmt.Errorf("%w: record %d/%d of %d bytes (key %d, value %d) is over the TaskManager's maximum record size %d bytes (MaxRecordSize, --max-record-size)",
				ErrRecordTooLarge, r.Origin, r.Seq, n, len(r.Key), len(r.Value), tm.cfg.MaxRecordSize)
		}
		t.recordsOut.Add(1)
		return out.add(t.ctx, r)
	}

	if !tm.setRunning(t) {
		return false, t.ctx.Err()
	}
	answer()
	t.markStarted()
	if src != nil {
		pollBarriers(src, inject) // while the source waits
		err = src.Run(t.ctx, emit)
	} else {
		err = tm.consume(t, op, emit, parts)
	}
	if err != nil {
		return true, err
	}
	for _, p := range parts {
		p.Finish()
	}
	return true, nil
}

// setRunning moves the task to RUNNING and reports it, with a ScheduleOrUpdateConsumers per
// PIPELINED partition (its consumers may be deployed now).
func (tm *TaskManager) setRunning(t *task) bool {
	tm.mu.Lock()
	if t.ctx.Err() != nil {
		tm.mu.Unlock()
		return false
	}
	t.state = pb.ExecutionState_EXECUTION_STATE_RUNNING
	epoch := tm.fence.current()
	tm.mu.Unlock()
	t.startTook.Store(int64(time.Since(t.made)))
	tm.events.log("start", t, epoch, pb.ExecutionState_EXECUTION_STATE_RUNNING)
	tm.outbox.enqueueState(t.tdd, pb.ExecutionState_EXECUTION_STATE_RUNNING, "")
	for _, pd := range t.tdd.GetProduced() {
		if dataplane.ResultType(pd.GetResultType()) == pb.ResultType_RESULT_TYPE_PIPELINED {
			tm.outbox.enqueueConsumers(t.tdd, pd)
		}
	}
	return true
}

// complete moves the task to its terminal state, frees its slot and reports the state.
func (tm *TaskManager) complete(t *task, started bool, err error) {
	state, cause := pb.ExecutionState_EXECUTION_STATE_FINISHED, ""
	tm.mu.Lock()
	injected := t.failNote
	tm.mu.Unlock()
	switch {
	case injected != "":
		state, cause = pb.ExecutionState_EXECUTION_STATE_FAILED, injected
	case err == nil:
	case t.ctx.Err() != nil:
		state = pb.ExecutionState_EXECUTION_STATE_CANCELED
	default:
		state, cause = pb.ExecutionState_EXECUTION_STATE_FAILED, err.Error()
	}
	switch state {
	case pb.ExecutionState_EXECUTION_STATE_FAILED:
		tm.dp.ReleaseFailedAttempt(t.attempt(), cause)
	case pb.ExecutionState_EXECUTION_STATE_CANCELED:
		tm.dp.ReleaseAttempt(t.attempt())
	}

	now := time.Now()
	tm.mu.Lock()
	t.state, t.cause, t.endedAt = state, cause, now
	tm.table.vacateLocked(t)
	if state == pb.ExecutionState_EXECUTION_STATE_FINISHED {
		// Finished partitions (BLOCKING data, PIPELINED buffers nobody drained) expire with the
		// terminal state unless a consumer drains them or the attempt is cancelled first.
		for _, k := range t.produced {
			tm.partitionExpiry[k] = now.Add(tm.cfg.RetainTerminal)
		}
	}
	silent := t.silent || tm.killed.Load()
	note := t.cancelNote
	epoch := tm.fence.current()
	tm.mu.Unlock()
	t.cancel()

	d := t.tdd
	lg := tm.log.With("job", d.GetJobId(), "vertex", d.GetVertexId(), "subtask", d.GetSubtaskIndex(), "attempt", d.GetAttemptId())
	switch state {
	case pb.ExecutionState_EXECUTION_STATE_FAILED:
		lg.Warn("task failed", "cause", cause)
	case pb.ExecutionState_EXECUTION_STATE_CANCELED:
		lg.Info("task canceled", "why", note)
	default:
		lg.Info("task finished")
	}
	if started {
		tm.events.log("stop", t, epoch, state)
	}
	if !silent {
		tm.outbox.enqueueState(d, state, cause)
	}
}

// consume feeds every input channel's records to op until all ended, then finishes op. The
// task's own goroutine reads every channel (a dataplane.ChannelSet): it opens them all, then
// handles what its inbox brings, in the order it came.
func (tm *TaskManager) consume(t *task, op operator.Operator, emit operator.Emit, parts []*dataplane.Partition) error {
	if g := t.batch; g != nil {
		// The tasks submitted with this one start first (startGate).
		select {
		case <-g.open:
		case <-t.ctx.Done():
			return t.ctx.Err()
		}
	}
	sampleWasm := wasmSampler(t, op)
	defer sampleWasm() // a call that failed the task counted too
	s := tm.dp.NewChannelSet(t.ctx, t.tdd.GetJobId(), t.attempt(), true)
	s.CountBytes(&t.bytesIn)
	defer s.Close()
	if err := s.AddGates(t.ctx, t.gates); err != nil {
		return err
	}
	al := &aligner{
		live:     s.Live,
		process:  func(r operator.Record) error { return op.Process(r, emit) },
		reached:  func(id uint64, took time.Duration) error { return tm.checkpointReached(t.ctx, t, id, took, op, parts) },
		declined: func(id uint64, cause string) { tm.declineCheckpoint(t, id, cause) },
		last:     t.tdd.GetRestoreCheckpointId(), // barriers up to the restored checkpoint are done
		aligned:  tm.cfg.ObserveAlignment,
		wm:       newTaskClock(t, s.Live(), op, emit),
	}
	// A buffering operator's held records are handed on once they waited their delay with no
	// input (a stream gone quiet); the timer runs only while the task waits with records held.
	buf, _ := op.(operator.Buffering)
	quiet := time.NewTimer(time.Hour)
	quiet.Stop()
	defer quiet.Stop()
	for s.Live() > 0 {
		var flush <-chan time.Time
		if buf != nil {
			if d, held := buf.FlushIn(); held {
				quiet.Reset(max(d, 0))
				flush = quiet.C
			}
		}
		select {
		case <-s.Signal():
		case <-flush:
			if err := buf.Flush(emit); err != nil {
				return err
			}
			sampleWasm()
			continue
		case <-t.ctx.Done():
			return t.ctx.Err()
		}
		quiet.Stop()
		for _, ev := range s.Take() {
			rs, ended, err := s.Handle(ev)
			if err != nil {
				return err
			}
			t.recordsIn.Add(dataRecords(rs))
			if err := al.feed(ev.Channel(), rs); err != nil {
				return err
			}
			if ended {
				if err := al.ended(ev.Channel()); err != nil {
					return err
				}
			}
			if err := al.drain(); err != nil {
				return err
			}
		}
		sampleWasm()
		if t.ctx.Err() != nil {
			return t.ctx.Err()
		}
	}
	if err := op.Finish(emit); err != nil {
		return fmt.Errorf("finish: %w", err)
	}
	return nil
}

// dataRecords counts the records of rs that are data, not control elements (barriers,
// watermarks): the records in a task's flow counts.
func dataRecords(rs []operator.Record) int64 {
	n := int64(len(rs))
	for i := range rs {
		if rs[i].Control() {
			n--
		}
	}
	return n
}
