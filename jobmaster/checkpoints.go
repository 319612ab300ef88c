package jobmaster

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/internal/failpoint"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// The checkpoint coordinator (docs/checkpoints.md): one per leadership term, started when the
// gate opens. It decides, then acts: every decision is a rule of checkpoint_rules.go applied to
// the committed record, and this file carries out what the rules return. What the coordinator
// keeps is only when it last triggered each job, the attempt sums of its triggers and which
// completions it is carrying out.
//
//   - Trigger: every interval, for a RUNNING job whose every current attempt is RUNNING, with
//     fewer than max_concurrent pending, while every Raft server applies the checkpoint
//     commands: commit TRIGGER_CHECKPOINT, then (write-ahead) send TriggerCheckpoint to each TM
//     holding source attempts.
//   - Abort: a checkpoint pending past its timeout, one whose job left RUNNING, whose attempts
//     changed since the trigger (a task failed, a region restarted) or whose TM was lost, one a
//     TM could not inject or a task declined. After ABORT commits its directory is deleted and
//     the TMs are told.
//   - Complete: once the FSM holds an acknowledgement of every subtask, COMPLETE_CHECKPOINT is
//     committed (the FSM refuses a second); only then are the TMs told, and the checkpoints it
//     discarded (subsumed, past retained) deleted from storage.
//   - Failover: before its first trigger the coordinator resolves the pending checkpoints of
//     earlier epochs with the acknowledgements the FSM holds and those the reconciliation
//     reports carried (ExecutionReport.latest_checkpoint_ack): complete when every subtask has
//     one, abort otherwise.

type checkpointKey struct {
	job string
	id  uint64
}

// coordinator is the term's checkpoint coordinator.
type coordinator struct {
	t    *term
	acks chan ackReq
	kick chan struct{}

	mu         sync.Mutex
	reported   []ReportedCheckpointAck // from the reconciliation, consumed by resolve
	commits    SinkCommits             // from the reconciliation, consumed by notifyLatest
	completing map[checkpointKey]bool  // completions under way
	// attempts: the sum of the job's attempt numbers when this term triggered a checkpoint; a
	// task that failed or a region that restarted since changes it.
	attempts map[checkpointKey]int64

	lastTrigger map[string]time.Time // job -> this term's last trigger (loop goroutine only)
	levelLogged bool                 // loop goroutine only
}

func newCoordinator(t *term) *coordinator {
	return &coordinator{
		t: t, acks: make(chan ackReq, 1024), kick: make(chan struct{}, 1),
		completing: map[checkpointKey]bool{}, attempts: map[checkpointKey]int64{}, lastTrigger: map[string]time.Time{},
	}
}

// poke makes the coordinator look at every job now (a failure was committed).
func (c *coordinator) poke() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// checkpointTick is how often the coordinator looks at the jobs: the scheduler's tick, at most
// 100 ms (a checkpoint interval is at least 10 ms; a timeout is noticed within a tick).
func (c *coordinator) tick() time.Duration { return min(c.t.jm.cfg.TickInterval, 100*time.Millisecond) }

// run is the coordinator's loop: resolve what earlier epochs left pending, then look at every
// job each tick.
func (c *coordinator) run() {
	tick := time.NewTicker(c.tick())
	defer tick.Stop()
	resolved := false
	for {
		switch {
		case !c.serversApplyCheckpoints():
			// No checkpoint command is written (a server that cannot apply one would stop):
			// pending checkpoints wait, and nothing is triggered.
			if !c.levelLogged {
				c.levelLogged = true
				c.t.jm.log.Warn("checkpoint commands held back: a Raft server does not gossip that it applies them", "level", fsm.LevelCheckpoints)
			}
		case !resolved:
			c.levelLogged = false
			c.resolve()
			c.notifyLatest()
			c.deleteLeftovers()
			resolved = true
		default:
			c.levelLogged = false
			c.round(time.Now())
		}
		select {
		case <-c.t.ctx.Done():
			return
		case <-tick.C:
		case <-c.kick:
		}
	}
}

// ErrCheckpointLevel: a checkpoint command is held back because a Raft server does not gossip
// that it applies the checkpoint commands (fsm.LevelCheckpoints).
var ErrCheckpointLevel = fmt.Errorf("jobmaster: a Raft server does not gossip that it applies the checkpoint commands (FSM level %d)", fsm.LevelCheckpoints)

// commit commits one checkpoint command, unless a Raft server may not apply it.
func (c *coordinator) commit(typ pb.CommandType, m proto.Message) (*fsm.Result, error) {
	if !c.serversApplyCheckpoints() {
		return nil, ErrCheckpointLevel
	}
	return c.t.jm.Commit(c.t.ctx, typ, m)
}

// view reads a job for a round; its source attempts only when a trigger is due.
func (c *coordinator) view(jobID string, due bool) (jobView, bool) {
	var v jobView
	ok := c.t.jm.state.WithJob(jobID, func(rec *pb.JobRecord) {
		v = viewOf(rec, due)
	})
	return v, ok
}

// round looks at every checkpointed job once and carries out what roundSteps decides: aborts
// (each committed before the next step), completions, then a trigger.
func (c *coordinator) round(now time.Time) {
	live := map[string]bool{}
	for _, jobID := range c.t.jm.state.JobIDs() {
		if c.t.ctx.Err() != nil {
			return
		}
		settings, on := c.t.jm.state.CheckpointSettings(jobID)
		if !on {
			continue
		}
		live[jobID] = true
		v, ok := c.view(jobID, c.due(jobID, settings, now))
		if !ok {
			continue
		}
		for _, step := range roundSteps(v, settings, now.UnixMilli(), c.triggered(jobID, v.pending), c.t.jm.cfg.Checkpoints != nil) {
			switch step.kind {
			case ckAbort:
				c.abort(jobID, step.id, step.reason)
			case ckComplete:
				id := step.id
				c.t.spawn(func() { c.complete(jobID, id) })
			case ckTrigger:
				c.trigger(jobID, v, now)
			}
		}
	}
	for id := range c.lastTrigger {
		if !live[id] {
			delete(c.lastTrigger, id)
		}
	}
}

// due applies triggerDue to this term's last trigger of the job; the first look at a job
// starts its interval.
func (c *coordinator) due(jobID string, s graph.CheckpointSettings, now time.Time) bool {
	last, seen := c.lastTrigger[jobID]
	if !seen {
		c.lastTrigger[jobID] = now
	}
	return triggerDue(last, seen, s, now)
}

// triggered: of the job's pending checkpoints, those this term triggered, with the sum of the
// job's attempt numbers then.
func (c *coordinator) triggered(jobID string, pending []pendingView) map[uint64]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[uint64]int64{}
	for _, ck := range pending {
		if sum, ok := c.attempts[checkpointKey{jobID, ck.id}]; ok {
			out[ck.id] = sum
		}
	}
	return out
}

// serversApplyCheckpoints: every Raft server applies the checkpoint commands.
func (c *coordinator) serversApplyCheckpoints() bool {
	f := c.t.jm.cfg.ServersApply
	return f == nil || f(fsm.LevelCheckpoints)
}

// trigger commits the job's next checkpoint, then injects it.
func (c *coordinator) trigger(jobID string, v jobView, now time.Time) {
	next, ok := c.t.jm.state.NextCheckpointID(jobID)
	if !ok {
		return
	}
	c.lastTrigger[jobID] = now
	ts := now.UnixMilli()
	res, err := c.commit(pb.CommandType_COMMAND_TYPE_TRIGGER_CHECKPOINT, &pb.TriggerCheckpointCommand{
		JobId: jobID, CheckpointId: next, Epoch: c.t.epoch, Timestamp: ts,
	})
	if err != nil {
		c.t.jm.log.Warn("checkpoint not triggered", "job", jobID, "checkpoint", next, "error", err)
		return
	}
	id := next
	if r, ok := res.Value.(*pb.CheckpointCommandResult); ok && r.CheckpointId != 0 {
		id = r.CheckpointId
	}
	c.mu.Lock()
	c.attempts[checkpointKey{jobID, id}] = v.attempts
	c.mu.Unlock()
	c.t.jm.log.Debug("checkpoint triggered", "job", jobID, "checkpoint", id)
	c.t.spawn(func() { c.inject(jobID, id, ts, v.sources, v.tmIDs) })
}

// inject sends TriggerCheckpoint to every TM holding source attempts of the job; only after
// the trigger is committed (write-ahead). What the TMs answer is judged by injectAbortReason.
func (c *coordinator) inject(jobID string, id uint64, ts int64, sources map[string][]string, tmIDs map[string]string) {
	failpoint.Inject(c.t.ctx, failpoint.BeforeTriggerCheckpoint)
	if c.t.ctx.Err() != nil || !c.stillPending(jobID, id) {
		return // the term ended, or the checkpoint did meanwhile: no barrier goes out
	}
	var (
		mu       sync.Mutex
		outcomes []triggerOutcome
		wg       sync.WaitGroup
	)
	for addr, attempts := range sources {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := triggerOutcome{addr: addr, tmID: tmIDs[addr]}
			o.err = c.t.jm.tms.Call(c.t.ctx, addr, func(ctx context.Context, cl pb.TaskManagerServiceClient) error {
				resp, err := cl.TriggerCheckpoint(ctx, &pb.TriggerCheckpointRequest{
					Epoch: c.t.epoch, JobId: jobID, CheckpointId: id, TriggerUnixMs: ts, AttemptIds: attempts,
				})
				o.notRunning = resp.GetNotRunning()
				return err
			})
			mu.Lock()
			defer mu.Unlock()
			outcomes = append(outcomes, o)
		}()
	}
	wg.Wait()
	if reason := injectAbortReason(outcomes); reason != "" && c.t.ctx.Err() == nil {
		c.abort(jobID, id, reason)
	}
}

// stillPending: the job is RUNNING with the checkpoint pending.
func (c *coordinator) stillPending(jobID string, id uint64) bool {
	ok := false
	c.t.jm.state.WithJob(jobID, func(rec *pb.JobRecord) {
		ok = rec.Status == jobRunning && slices.ContainsFunc(rec.GetCheckpoints().GetPending(), func(p *pb.CheckpointRecord) bool { return p.Id == id })
	})
	return ok
}

// abort commits ABORT_CHECKPOINT, then deletes the checkpoint's directory and tells the TMs.
func (c *coordinator) abort(jobID string, id uint64, reason string) {
	res, err := c.commit(pb.CommandType_COMMAND_TYPE_ABORT_CHECKPOINT, &pb.AbortCheckpointCommand{
		JobId: jobID, CheckpointId: id, Timestamp: nowMillis(), Reason: reason,
	})
	if err != nil {
		if !notPending(err) {
			c.t.jm.log.Warn("checkpoint not aborted", "job", jobID, "checkpoint", id, "reason", reason, "error", err)
		}
		return
	}
	c.forget(jobID, id)
	c.t.jm.log.Info("checkpoint aborted", "job", jobID, "checkpoint", id, "reason", reason)
	c.discard(jobID, res)
	addrs := c.jobAddrs(jobID)
	c.t.spawn(func() {
		c.notify(addrs, func(ctx context.Context, cl pb.TaskManagerServiceClient) error {
			_, err := cl.NotifyCheckpointAborted(ctx, &pb.NotifyCheckpointAbortedRequest{Epoch: c.t.epoch, JobId: jobID, CheckpointId: id, Reason: reason})
			return err
		})
	})
}

func (c *coordinator) forget(jobID string, id uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.attempts, checkpointKey{jobID, id})
}

// discard deletes from storage every checkpoint a command's result lists as discarded.
func (c *coordinator) discard(jobID string, res *fsm.Result) {
	r, _ := res.Value.(*pb.CheckpointCommandResult)
	store := c.t.jm.cfg.Checkpoints
	if r == nil || store == nil {
		return
	}
	for _, d := range r.Discarded {
		if err := store.Delete(jobID, d.CheckpointId); err != nil {
			c.t.jm.log.Warn("discarded checkpoint not deleted", "job", jobID, "checkpoint", d.CheckpointId, "reason", d.Reason, "error", err)
		}
		c.forget(jobID, d.CheckpointId)
	}
}

func (c *coordinator) jobAddrs(jobID string) []string {
	v, _ := c.view(jobID, false)
	return v.addrs
}

// notify makes one best-effort call to each TM.
func (c *coordinator) notify(addrs []string, fn func(context.Context, pb.TaskManagerServiceClient) error) {
	var wg sync.WaitGroup
	for _, addr := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.t.jm.tms.Call(c.t.ctx, addr, fn); err != nil {
				c.t.jm.log.Debug("checkpoint notification not delivered", "tm", addr, "error", err)
			}
		}()
	}
	wg.Wait()
}

// complete commits COMPLETE_CHECKPOINT (once: the FSM refuses a second, which counts as done),
// then carries out what completionOf decides: tell the TMs and delete what it discarded, or
// abort it.
func (c *coordinator) complete(jobID string, id uint64) {
	k := checkpointKey{jobID, id}
	c.mu.Lock()
	if c.completing[k] {
		c.mu.Unlock()
		return
	}
	c.completing[k] = true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.completing, k)
		c.mu.Unlock()
	}()
	failpoint.Inject(c.t.ctx, failpoint.BeforeCompleteCheckpoint)
	if c.t.ctx.Err() != nil {
		return
	}
	cmd := &pb.CompleteCheckpointCommand{JobId: jobID, CheckpointId: id, Timestamp: nowMillis()}
	res, err := c.commit(pb.CommandType_COMMAND_TYPE_COMPLETE_CHECKPOINT, cmd)
	if err == nil && failpoint.Enabled(failpoint.CompleteTwice) {
		_, _ = c.commit(pb.CommandType_COMMAND_TYPE_COMPLETE_CHECKPOINT, cmd) // the planted bug: proposed twice
	}
	switch o := completionOf(err); {
	case o.abort != "":
		c.abort(jobID, id, o.abort)
		return
	case o.warn:
		c.t.jm.log.Warn("checkpoint not completed", "job", jobID, "checkpoint", id, "error", err)
		return
	case !o.done:
		return
	}
	c.forget(jobID, id)
	c.t.jm.log.Info("checkpoint completed", "job", jobID, "checkpoint", id)
	c.discard(jobID, res)
	c.notifyComplete(jobID, id)
}

func (c *coordinator) notifyComplete(jobID string, id uint64) {
	c.notifyCompleteTo(jobID, id, c.jobAddrs(jobID))
}

func (c *coordinator) notifyCompleteTo(jobID string, id uint64, addrs []string) {
	c.t.spawn(func() {
		c.notify(addrs, func(ctx context.Context, cl pb.TaskManagerServiceClient) error {
			_, err := cl.NotifyCheckpointComplete(ctx, &pb.NotifyCheckpointCompleteRequest{Epoch: c.t.epoch, JobId: jobID, CheckpointId: id})
			return err
		})
	})
}
