package taskmanager

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/jmcluster/jmcluster/internal/failpoint"
	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// outMsg is one TM -> JM message waiting for the leader to accept it. Its sequence is fixed at
// enqueue time, so every retry carries the same one.
type outMsg struct {
	attempt   string
	state     *pb.UpdateTaskExecutionStateRequest
	consumers *pb.ScheduleOrUpdateConsumersRequest
	ack       *pb.AcknowledgeCheckpointRequest
	decline   *pb.DeclineCheckpointRequest
}

func (m *outMsg) seq() uint64 {
	switch {
	case m.state != nil:
		return m.state.GetSequence()
	case m.ack != nil:
		return m.ack.GetSequence()
	case m.decline != nil:
		return m.decline.GetSequence()
	}
	return m.consumers.GetSequence()
}

// setSeq fixes the message's sequence number.
func (m *outMsg) setSeq(n uint64) {
	switch {
	case m.state != nil:
		m.state.Sequence = n
	case m.ack != nil:
		m.ack.Sequence = n
	case m.decline != nil:
		m.decline.Sequence = n
	default:
		m.consumers.Sequence = n
	}
}

// outboxMaxInFlight bounds the outbox's calls to the leader at once. A leader serves each open
// call with a goroutine and gRPC stream state (about 10 KB) that it keeps until its batcher
// has committed the update, and the runtime never frees a goroutine's descriptor: a TaskManager
// deploying thousands of attempts at once would otherwise raise the leader's memory by that
// much per attempt, for good. With the bound it is per TaskManager; the leader's batcher still
// gets every update that arrives during one commit (a few milliseconds) into the next.
const outboxMaxInFlight = 128

// outbox delivers UpdateTaskExecutionState and ScheduleOrUpdateConsumers to the leader: FIFO
// per attempt (exactly one worker goroutine per attempt with pending messages, sending its
// head until accepted), attempts independent, retried while transport.Retryable with backoff
// and jitter; at most outboxMaxInFlight calls open at once.
type outbox struct {
	cfg    Config
	log    hclog.Logger
	link   *leaderLink
	events *eventLog
	// disown cancels an attempt the leader no longer owns, reporting nothing more of it.
	disown func(attempt string)
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	seq    uint64
	queues map[string][]*outMsg
	// workers holds the attempts that have a worker: one per attempt, started by the enqueue
	// that finds none and ended (under mu) by the worker that finds the queue empty, so a
	// message enqueued while the worker pops the last one is sent by that worker.
	workers map[string]bool
	n       int
	stopped bool
	nudge   chan struct{} // closed and replaced to wake every backing-off worker
	retries atomic.Int64  // sends that failed and were retried (metrics)
	// inFlight holds a token per open call (outboxMaxInFlight).
	inFlight chan struct{}
}

func newOutbox(cfg Config, log hclog.Logger, link *leaderLink, events *eventLog, disown func(attempt string)) *outbox {
	ctx, cancel := context.WithCancel(context.Background())
	return &outbox{cfg: cfg, log: log, link: link, events: events, disown: disown, ctx: ctx, cancel: cancel, queues: map[string][]*outMsg{}, workers: map[string]bool{}, nudge: make(chan struct{}),
		inFlight: make(chan struct{}, outboxMaxInFlight)}
}

func (o *outbox) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n
}

// enqueueState queues an UpdateTaskExecutionState for the attempt.
func (o *outbox) enqueueState(d *pb.TaskDeploymentDescriptor, s pb.ExecutionState, cause string) {
	o.enqueue(&outMsg{attempt: d.GetAttemptId(), state: &pb.UpdateTaskExecutionStateRequest{
		TmId: o.cfg.ID, JobId: d.GetJobId(), AttemptId: d.GetAttemptId(), State: s, FailureCause: cause,
	}})
}

// enqueueConsumers queues a ScheduleOrUpdateConsumers for one produced partition.
func (o *outbox) enqueueConsumers(d *pb.TaskDeploymentDescriptor, pd *pb.ResultPartitionDeploymentDescriptor) {
	o.enqueue(&outMsg{attempt: d.GetAttemptId(), consumers: &pb.ScheduleOrUpdateConsumersRequest{
		TmId: o.cfg.ID, JobId: d.GetJobId(), ProducerAttemptId: d.GetAttemptId(),
		ResultId: pd.GetResultId(), PartitionIndex: pd.GetPartitionIndex(),
	}})
}

// enqueueAck queues the attempt's acknowledgement of a checkpoint, behind its state updates.
func (o *outbox) enqueueAck(d *pb.TaskDeploymentDescriptor, id uint64, ack *pb.TaskCheckpointAck) {
	o.enqueue(&outMsg{attempt: d.GetAttemptId(), ack: &pb.AcknowledgeCheckpointRequest{
		TmId: o.cfg.ID, Incarnation: o.cfg.Incarnation, JobId: d.GetJobId(), CheckpointId: id,
		Acks: []*pb.TaskCheckpointAck{ack},
	}})
}

// enqueueDecline queues the attempt's refusal to take part in a checkpoint.
func (o *outbox) enqueueDecline(d *pb.TaskDeploymentDescriptor, id uint64, reason string) {
	o.enqueue(&outMsg{attempt: d.GetAttemptId(), decline: &pb.DeclineCheckpointRequest{
		TmId: o.cfg.ID, Incarnation: o.cfg.Incarnation, JobId: d.GetJobId(), CheckpointId: id,
		VertexId: d.GetVertexId(), SubtaskIndex: d.GetSubtaskIndex(), AttemptNumber: d.GetAttemptNumber(), Reason: reason,
	}})
}

// enqueue queues m behind the attempt's earlier messages and reports whether it started the
// attempt's worker (there was none).
func (o *outbox) enqueue(m *outMsg) (started bool) {
	o.mu.Lock()
	if o.stopped {
		o.mu.Unlock()
		return false
	}
	o.seq++
	m.setSeq(o.seq)
	q := o.queues[m.attempt]
	o.queues[m.attempt] = append(q, m)
	o.n++
	start := !o.workers[m.attempt]
	if failpoint.Enabled(failpoint.OutboxDoubleWorker) {
		start = len(q) == 0 // the planted bug: a worker that just popped its last message still runs
	}
	if start {
		o.workers[m.attempt] = true
		o.wg.Add(1)
	}
	o.mu.Unlock()
	if start {
		go o.worker(m.attempt)
	}
	return start
}

// wake makes every backing-off worker retry now (a new leader is known).
func (o *outbox) wake() {
	o.mu.Lock()
	close(o.nudge)
	o.nudge = make(chan struct{})
	o.mu.Unlock()
}

// head returns the attempt's first message, or nil after removing the empty queue and the
// worker's mark (the worker then ends).
func (o *outbox) head(attempt string) (*outMsg, chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	q := o.queues[attempt]
	if len(q) == 0 || o.stopped {
		delete(o.queues, attempt)
		delete(o.workers, attempt)
		return nil, nil
	}
	return q[0], o.nudge
}

// pop removes the head; all drops the attempt's whole queue (the leader disowned it).
func (o *outbox) pop(attempt string, all bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	q := o.queues[attempt]
	if len(q) == 0 {
		return
	}
	k := 1
	if all {
		k = len(q)
	}
	o.queues[attempt] = q[k:]
	o.n -= k
}

func (o *outbox) worker(attempt string) {
	defer o.wg.Done()
	cfg := o.cfg
	backoff := cfg.OutboxBackoffMin
	lg := o.log.Named("outbox").With("attempt", attempt)
	for {
		m, nudge := o.head(attempt)
		if m == nil {
			return
		}
		accepted, reason, addr, err := o.send(m)
		o.link.noteAnswer(CallReport, addr, err, true) // a final refusal is logged below
		if err == nil {
			backoff = cfg.OutboxBackoffMin
			if !accepted && (m.ack != nil || m.decline != nil) {
				// The checkpoint is no longer pending (completed without it, aborted): nothing
				// to retry, and the attempt is still the leader's.
				lg.Debug("checkpoint acknowledgement not needed any more", "seq", m.seq(), "reason", reason)
				o.pop(attempt, false)
				continue
			}
			if !accepted {
				lg.Warn("leader no longer owns the attempt: cancelling it locally", "seq", m.seq())
				o.pop(attempt, true)
				o.disown(attempt)
				continue
			}
			o.events.delivered(m)
			o.pop(attempt, false)
			failpoint.Inject(o.ctx, failpoint.OutboxAfterSend)
			continue
		}
		if o.ctx.Err() != nil {
			return
		}
		if !transport.Retryable(err) {
			if m.state != nil {
				// A final refusal of a state update is the graph's deterministic answer (an
				// unknown or earlier attempt, an illegal transition): the leader will never
				// record this attempt's state, so the TM stops it rather than run it unowned or
				// retry forever.
				lg.Error("state update refused by the leader: cancelling the attempt locally", "seq", m.seq(), "leader", addr, "error", err)
				o.pop(attempt, true)
				o.disown(attempt)
				continue
			}
			lg.Error("dropping message refused by the leader", "seq", m.seq(), "leader", addr, "error", err)
			o.pop(attempt, false)
			continue
		}
		o.link.failed(addr, err)
		o.retries.Add(1)
		delay, ok := transport.RetryAfter(err)
		if !ok {
			delay = backoff/2 + rand.N(backoff/2+1)
			backoff = min(2*backoff, cfg.OutboxBackoffMax)
		}
		lg.Debug("retrying", "seq", m.seq(), "leader", addr, "in", delay, "error", err)
		timer := time.NewTimer(delay)
		select {
		case <-o.ctx.Done():
			timer.Stop()
			return
		case <-nudge:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// send delivers one message to the current leader, once one of the outboxMaxInFlight calls
// is free (the leader is read then: a call waiting for its turn goes to the latest).
func (o *outbox) send(m *outMsg) (accepted bool, reason, addr string, err error) {
	select {
	case o.inFlight <- struct{}{}:
	case <-o.ctx.Done():
		return false, "", "", o.ctx.Err()
	}
	defer func() { <-o.inFlight }()
	addr = o.link.leader()
	if addr == "" {
		o.link.wake()
		return false, "", "", ErrNoLeader
	}
	conn, err := o.link.conns.get(addr)
	if err != nil {
		return false, "", addr, err
	}
	ctx, cancel := context.WithTimeout(o.ctx, o.cfg.RPCTimeout)
	defer cancel()
	c := pb.NewJobMasterServiceClient(conn)
	switch {
	case m.state != nil:
		resp, err := c.UpdateTaskExecutionState(ctx, m.state)
		return resp.GetAccepted(), "", addr, err
	case m.ack != nil:
		m.ack.EpochSeen = o.link.fence.current()
		resp, err := c.AcknowledgeCheckpoint(ctx, m.ack)
		return resp.GetAccepted(), resp.GetReason(), addr, err
	case m.decline != nil:
		m.decline.EpochSeen = o.link.fence.current()
		_, err := c.DeclineCheckpoint(ctx, m.decline)
		return true, "", addr, err
	}
	_, err = c.ScheduleOrUpdateConsumers(ctx, m.consumers)
	return true, "", addr, err
}

// drain waits until the outbox is empty or d passed.
func (o *outbox) drain(d time.Duration) {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for o.len() > 0 && time.Now().Before(deadline) {
		<-tick.C
	}
}

// stop ends every worker; pending messages are lost (the outbox lives in memory).
func (o *outbox) stop() {
	o.mu.Lock()
	o.stopped = true
	o.mu.Unlock()
	o.cancel()
	o.wg.Wait()
}
