package jobmaster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/internal/failpoint"
	"github.com/jmcluster/jmcluster/internal/logsum"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// The checkpoint coordinator (docs/checkpoints.md): one per leadership term, started when the
// gate opens. Every decision is read from the committed record; what the coordinator keeps is
// only when it last triggered each job and which completions it is carrying out.
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

// Abort reasons the coordinator writes (the FSM writes "subsumed" and "retained").
const (
	reasonLeaderChanged = "leader changed before every task acknowledged"
)

// ReportedCheckpointAck is a task's latest acknowledgement as a reconciliation report carried
// it (ExecutionReport.latest_acked_checkpoint_id and latest_checkpoint_ack), with the attempt
// that reported it.
type ReportedCheckpointAck struct {
	JobID        string
	AttemptID    string
	CheckpointID uint64
	Ack          *pb.TaskCheckpointAck
}

// SinkCommits is what the reconciliation reports said of the sinks that commit their output
// with completed checkpoints (ExecutionReport.commits_output and committed_checkpoint_id).
type SinkCommits struct {
	// Listed: the TMs (gRPC addresses) whose reports listed their executions; an as-expected
	// answer lists none, so it says nothing of its sinks' commits.
	Listed map[string]bool
	// Lowest: job -> TM address -> the oldest checkpoint any of the job's committing sinks on
	// that TM committed (0: one has committed none).
	Lowest map[string]map[string]uint64
}

// announceTargets is which of the TMs running a job's tasks (addrs) get its latest completed
// checkpoint again: every TM whose report did not list its executions (it did not report, or
// answered as expected), and those that listed a committing sink of the job behind latest. A
// TM whose listed sinks of the job all committed latest, or that listed none, is skipped: a
// sink deployed since then restores from the latest completed checkpoint and commits it then.
// Without any reports (commits.Listed nil) every TM gets it.
func announceTargets(jobID string, latest uint64, addrs []string, commits SinkCommits) []string {
	if commits.Listed == nil {
		return addrs
	}
	var out []string
	for _, a := range addrs {
		lowest, has := commits.Lowest[jobID][a]
		if !commits.Listed[a] || (has && lowest < latest) {
			out = append(out, a)
		}
	}
	return out
}

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

// NoteCheckpointReports hands the coordinator the acknowledgements and the sinks' commits the
// reconciliation reports carried (reconcile calls it before the gate opens).
func (t *term) NoteCheckpointReports(acks []ReportedCheckpointAck, commits SinkCommits) {
	t.ckpt.mu.Lock()
	defer t.ckpt.mu.Unlock()
	t.ckpt.reported = append(t.ckpt.reported, acks...)
	t.ckpt.commits = commits
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

// jobView is what one round needs of a job, read under the state's read lock.
type jobView struct {
	status     pb.JobStatus
	notRunning string              // the first subtask whose current attempt is not RUNNING
	failed     bool                // and it failed (or is cancelled), rather than not yet running or finished
	sources    map[string][]string // TM gRPC address -> source attempt ids there
	tmIDs      map[string]string   // TM gRPC address -> TM id (for abort reasons)
	addrs      []string            // every TM address running a current attempt
	attempts   int64               // the sum of the current attempt numbers
	tasks      int
	pending    []pendingView
	due        bool // a trigger is due: sources is filled in
}

// pendingView is a pending checkpoint as a round sees it.
type pendingView struct {
	id        uint64
	triggerMs int64
	// stale names an acknowledgement from an attempt that is no longer current ("" when none).
	stale string
	acked int
}

// view reads a job for a round; its source attempts only when a trigger is due.
func (c *coordinator) view(jobID string, due bool) (jobView, bool) {
	var v jobView
	ok := c.t.jm.state.WithJob(jobID, func(rec *pb.JobRecord) {
		v = viewOf(rec, due)
	})
	return v, ok
}

// viewOf reads a job's record for the coordinator.
func viewOf(rec *pb.JobRecord, due bool) jobView {
	v := jobView{status: rec.Status, sources: map[string][]string{}, tmIDs: map[string]string{}, due: due}
	sources := sourceVertices(rec.GetJobGraph())
	addrs := map[string]bool{}
	forEachExecution(rec, func(ev *pb.ExecutionVertex) {
		v.tasks++
		cur := ev.GetCurrent()
		if cur == nil {
			if v.notRunning == "" {
				v.notRunning = fmt.Sprintf("%s[%d] has no attempt", ev.VertexId, ev.SubtaskIndex)
			}
			return
		}
		v.attempts += int64(cur.AttemptNumber)
		if cur.State != stRunning && v.notRunning == "" {
			v.notRunning = fmt.Sprintf("%s[%d] attempt %d is %s", ev.VertexId, ev.SubtaskIndex, cur.AttemptNumber, graph.ExecutionStateName(cur.State))
			v.failed = cur.State == stFailed || cur.State == stCanceling || cur.State == stCanceled
		}
		if a := cur.TmGrpcAddress; a != "" && cur.State == stRunning {
			addrs[a] = true // notifications go to the TMs running tasks of the job
			if due && sources[ev.VertexId] && cur.State == stRunning {
				v.sources[a] = append(v.sources[a], cur.AttemptId)
				v.tmIDs[a] = cur.GetSlot().GetTmId()
			}
		}
	})
	for a := range addrs {
		v.addrs = append(v.addrs, a)
	}
	sort.Strings(v.addrs)
	for _, ck := range rec.GetCheckpoints().GetPending() {
		p := pendingView{id: ck.Id, triggerMs: ck.TriggerUnixMs, acked: len(ck.Acks)}
		for _, a := range ck.Acks {
			cur := graph.FindVertex(rec.ExecutionGraph, a.VertexId, a.SubtaskIndex).GetCurrent()
			if cur == nil || cur.AttemptNumber != a.AttemptNumber {
				p.stale = fmt.Sprintf("%s[%d] restarted (attempt %d acknowledged, attempt %s is current)", a.VertexId, a.SubtaskIndex, a.AttemptNumber, attemptName(cur))
				break
			}
		}
		v.pending = append(v.pending, p)
	}
	return v
}

// sourceVertices: the vertices whose operator is a source (no inputs): the barriers start there.
func sourceVertices(jg *pb.JobGraph) map[string]bool {
	out := map[string]bool{}
	for _, v := range jg.GetVertices() {
		if graph.OperatorRoleOf(v.Operator) == graph.RoleSource {
			out[v.Id] = true
		}
	}
	return out
}

// round looks at every checkpointed job once: aborts, then a trigger when one is due.
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
		pending := len(v.pending)
		for _, ck := range v.pending {
			if reason := c.abortReason(jobID, v, ck, settings, now); reason != "" {
				c.abort(jobID, ck.id, reason)
				pending--
			} else if ck.acked >= v.tasks {
				// Every subtask acknowledged, and no completion went through (one that
				// failed to commit, say): complete it now.
				c.t.spawn(func() { c.complete(jobID, ck.id) })
			}
		}
		c.maybeTrigger(jobID, v, settings, pending, now)
	}
	for id := range c.lastTrigger {
		if !live[id] {
			delete(c.lastTrigger, id)
		}
	}
}

// due reports whether the job's next trigger is due: an interval after this term's last
// trigger of it (or after the term first saw it).
func (c *coordinator) due(jobID string, s graph.CheckpointSettings, now time.Time) bool {
	last, seen := c.lastTrigger[jobID]
	if !seen {
		c.lastTrigger[jobID] = now
		return false
	}
	return now.Sub(last) >= time.Duration(s.IntervalMs)*time.Millisecond
}

// abortReason says why a pending checkpoint must be aborted now ("" when it need not).
func (c *coordinator) abortReason(jobID string, v jobView, ck pendingView, s graph.CheckpointSettings, now time.Time) string {
	c.mu.Lock()
	sum, ours := c.attempts[checkpointKey{jobID, ck.id}]
	c.mu.Unlock()
	return pendingAbortReason(v, ck, s, now.UnixMilli(), sum, ours)
}

// pendingAbortReason is the decision of abortReason, pure: the job's view, the checkpoint, the
// settings, the leader's clock, and (ours) the sum of the attempt numbers when this term
// triggered it.
func pendingAbortReason(v jobView, ck pendingView, s graph.CheckpointSettings, nowMs, triggeredAttempts int64, ours bool) string {
	if v.status != jobRunning {
		return "job is " + graph.JobStatusName(v.status)
	}
	if age := nowMs - ck.triggerMs; age > s.TimeoutMs {
		return fmt.Sprintf("timeout after %dms (checkpoint_config.timeout_ms %d)", age, s.TimeoutMs)
	}
	if v.notRunning != "" {
		if v.failed {
			return "task failure: " + v.notRunning
		}
		return "not every task is running: " + v.notRunning
	}
	if ck.stale != "" {
		return "task failure: " + ck.stale
	}
	if ours && triggeredAttempts != v.attempts {
		return "task failure: a subtask was restarted after the trigger"
	}
	return ""
}

func attemptName(cur *pb.Execution) string {
	if cur == nil {
		return "none"
	}
	return fmt.Sprint(cur.AttemptNumber)
}

// serversApplyCheckpoints: every Raft server applies the checkpoint commands.
func (c *coordinator) serversApplyCheckpoints() bool {
	f := c.t.jm.cfg.ServersApply
	return f == nil || f(fsm.LevelCheckpoints)
}

// maybeTrigger commits the job's next checkpoint when it is due, then injects it.
func (c *coordinator) maybeTrigger(jobID string, v jobView, s graph.CheckpointSettings, pending int, now time.Time) {
	if c.t.jm.cfg.Checkpoints == nil || v.status != jobRunning || !v.due {
		return
	}
	if v.notRunning != "" {
		// Flink: "not all required tasks are currently running"; this round is skipped.
		return
	}
	if pending >= s.MaxConcurrent {
		return
	}
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
// the trigger is committed (write-ahead). A TM that does not run an attempt, or a failed call,
// aborts the checkpoint.
func (c *coordinator) inject(jobID string, id uint64, ts int64, sources map[string][]string, tmIDs map[string]string) {
	failpoint.Inject(c.t.ctx, failpoint.BeforeTriggerCheckpoint)
	if c.t.ctx.Err() != nil || !c.stillPending(jobID, id) {
		return // the term ended, or the checkpoint did meanwhile: no barrier goes out
	}
	var (
		mu      sync.Mutex
		reasons []string
		wg      sync.WaitGroup
	)
	for addr, attempts := range sources {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var notRunning []string
			err := c.t.jm.tms.Call(c.t.ctx, addr, func(ctx context.Context, cl pb.TaskManagerServiceClient) error {
				resp, err := cl.TriggerCheckpoint(ctx, &pb.TriggerCheckpointRequest{
					Epoch: c.t.epoch, JobId: jobID, CheckpointId: id, TriggerUnixMs: ts, AttemptIds: attempts,
				})
				notRunning = resp.GetNotRunning()
				return err
			})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				reasons = append(reasons, fmt.Sprintf("trigger on TaskManager %s (%s) failed: %v", tmIDs[addr], addr, err))
			case len(notRunning) > 0:
				reasons = append(reasons, fmt.Sprintf("TaskManager %s (%s) does not run source attempts %s", tmIDs[addr], addr, logsum.List(notRunning)))
			}
		}()
	}
	wg.Wait()
	if len(reasons) > 0 && c.t.ctx.Err() == nil {
		sort.Strings(reasons)
		c.abort(jobID, id, logsum.Joined(reasons, "; "))
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

// notPending: the checkpoint is no longer pending (someone else ended it).
func notPending(err error) bool {
	return errors.Is(err, fsm.ErrCheckpointCompleted) || errors.Is(err, fsm.ErrCheckpointNotPending) || errors.Is(err, fsm.ErrUnknownCheckpoint) || errors.Is(err, fsm.ErrUnknownJob)
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
// then tells the TMs and deletes what it discarded.
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
	switch {
	case err == nil:
	case errors.Is(err, fsm.ErrStaleCheckpointAck):
		c.abort(jobID, id, "task failure: "+err.Error())
		return
	default:
		if !notPending(err) && !errors.Is(err, fsm.ErrCheckpointIncomplete) {
			c.t.jm.log.Warn("checkpoint not completed", "job", jobID, "checkpoint", id, "error", err)
		}
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

// notifyLatest tells the TMs of every job of its latest completed checkpoint again where the
// reconciliation reports do not show that every sink committed it (announceTargets): the
// previous leader may have died between the completion and its notifications (a notify is
// idempotent).
func (c *coordinator) notifyLatest() {
	c.mu.Lock()
	commits := c.commits
	c.commits = SinkCommits{}
	c.mu.Unlock()
	for _, jobID := range c.t.jm.state.JobIDs() {
		if ck, ok := c.t.jm.state.LatestCompletedCheckpoint(jobID); ok {
			var running bool
			c.t.jm.state.WithJob(jobID, func(rec *pb.JobRecord) { running = rec.Status == jobRunning })
			if !running {
				continue
			}
			addrs := c.jobAddrs(jobID)
			targets := announceTargets(jobID, ck.Id, addrs, commits)
			c.t.jm.log.Info("announcing the latest completed checkpoint again", "job", jobID, "checkpoint", ck.Id,
				"tms", len(targets), "of", len(addrs))
			if len(targets) > 0 {
				c.notifyCompleteTo(jobID, ck.Id, targets)
			}
		}
	}
}

// resolve ends the checkpoints earlier epochs left pending, newest first: one whose every
// subtask acknowledged (in the FSM, or in the reconciliation reports) is completed, which
// subsumes the older ones; any other is aborted.
func (c *coordinator) resolve() {
	c.mu.Lock()
	reported := c.reported
	c.reported = nil
	c.mu.Unlock()
	byJob := map[string][]ReportedCheckpointAck{}
	for _, r := range reported {
		byJob[r.JobID] = append(byJob[r.JobID], r)
	}
	for _, jobID := range c.t.jm.state.JobIDs() {
		pending := c.t.jm.state.PendingCheckpoints(jobID)
		for i := len(pending) - 1; i >= 0 && c.t.ctx.Err() == nil; i-- {
			ck := pending[i]
			if ck.Epoch == c.t.epoch {
				continue
			}
			if !slices.ContainsFunc(c.t.jm.state.PendingCheckpoints(jobID), func(p *pb.CheckpointRecord) bool { return p.Id == ck.Id }) {
				continue // subsumed by a newer one that completed
			}
			c.resolveOne(jobID, ck, byJob[jobID])
		}
	}
}

// resolveOne completes or aborts one pending checkpoint of an earlier epoch.
func (c *coordinator) resolveOne(jobID string, ck *pb.CheckpointRecord, reported []ReportedCheckpointAck) {
	var (
		missing []*pb.TaskCheckpointAck
		reason  string
	)
	c.t.jm.state.WithJob(jobID, func(rec *pb.JobRecord) { missing, reason = resolution(rec, ck, reported) })
	if reason != "" {
		c.abort(jobID, ck.Id, reason)
		return
	}
	for len(missing) > 0 {
		n := min(len(missing), c.t.jm.cfg.MaxBatch)
		if _, err := c.commit(pb.CommandType_COMMAND_TYPE_ACK_CHECKPOINT, &pb.AckCheckpointCommand{
			JobId: jobID, CheckpointId: ck.Id, Acks: missing[:n],
		}); err != nil {
			if !notPending(err) {
				c.abort(jobID, ck.Id, fmt.Sprintf("%s: the reported acknowledgements were refused: %v", reasonLeaderChanged, err))
			}
			return
		}
		missing = missing[n:]
	}
	c.t.jm.log.Info("checkpoint of an earlier epoch acknowledged by every task; completing it", "job", jobID, "checkpoint", ck.Id, "epoch", ck.Epoch)
	c.complete(jobID, ck.Id)
}

const stReconcilingJob = pb.JobStatus_JOB_STATUS_RECONCILING

// abortForLostTM aborts the pending checkpoints of every job with a current attempt on the TM
// (a lost TaskManager), before its attempts are failed.
func (c *coordinator) abortForLostTM(tmID, cause string) {
	for _, jobID := range c.t.jm.state.JobIDs() {
		var on bool
		var ids []uint64
		c.t.jm.state.WithJob(jobID, func(rec *pb.JobRecord) {
			for _, ck := range rec.GetCheckpoints().GetPending() {
				ids = append(ids, ck.Id)
			}
			if len(ids) == 0 {
				return
			}
			forEachExecution(rec, func(ev *pb.ExecutionVertex) {
				if ev.GetCurrent().GetSlot().GetTmId() == tmID {
					on = true
				}
			})
		})
		if !on {
			continue
		}
		for _, id := range ids {
			c.abort(jobID, id, cause)
		}
	}
}

// deleteLeftovers deletes the checkpoint directories the record no longer names (aborted,
// subsumed or dropped while the leader that ended them died before deleting them), once per
// term, before this term triggers anything.
func (c *coordinator) deleteLeftovers() {
	store := c.t.jm.cfg.Checkpoints
	if store == nil {
		return
	}
	for _, jobID := range c.t.jm.state.JobIDs() {
		cp, ok := c.t.jm.state.Checkpoints(jobID)
		if !ok || cp == nil {
			continue
		}
		stored, err := store.Checkpoints(jobID)
		if err != nil {
			c.t.jm.log.Warn("checkpoint directories not listed", "job", jobID, "error", err)
			continue
		}
		keep := map[uint64]bool{}
		for _, ck := range append(cp.Pending, cp.Completed...) {
			keep[ck.Id] = true
		}
		for _, id := range stored {
			if keep[id] || id >= cp.NextCheckpointId {
				continue
			}
			if err := store.Delete(jobID, id); err != nil {
				c.t.jm.log.Warn("leftover checkpoint not deleted", "job", jobID, "checkpoint", id, "error", err)
				continue
			}
			c.t.jm.log.Info("leftover checkpoint deleted", "job", jobID, "checkpoint", id)
		}
	}
}

// resolution decides a pending checkpoint of an earlier epoch (the failover rule): when every
// subtask has an acknowledgement, in the checkpoint's record or among the reported ones (of its
// current attempt, for this checkpoint), it returns those the record lacks (to be committed
// before the completion); otherwise the reason to abort it.
func resolution(rec *pb.JobRecord, ck *pb.CheckpointRecord, reported []ReportedCheckpointAck) (missing []*pb.TaskCheckpointAck, abort string) {
	if st := rec.GetStatus(); st != jobRunning && st != stReconcilingJob {
		return nil, "job is " + graph.JobStatusName(st)
	}
	byAttempt := map[string]*pb.TaskCheckpointAck{}
	for _, r := range reported {
		if r.CheckpointID == ck.GetId() && r.Ack != nil {
			byAttempt[r.AttemptID] = r.Ack
		}
	}
	tasks, lacking, first := 0, 0, ""
	forEachExecution(rec, func(ev *pb.ExecutionVertex) {
		tasks++
		if fsm.FindCheckpointAck(ck, ev.VertexId, ev.SubtaskIndex) != nil {
			return
		}
		cur := ev.GetCurrent()
		a := byAttempt[cur.GetAttemptId()]
		if cur != nil && a != nil && a.VertexId == ev.VertexId && a.SubtaskIndex == ev.SubtaskIndex && a.AttemptNumber == cur.AttemptNumber {
			missing = append(missing, a)
			return
		}
		if lacking++; first == "" {
			first = fmt.Sprintf("%s[%d]", ev.VertexId, ev.SubtaskIndex)
		}
	})
	if lacking > 0 {
		return nil, fmt.Sprintf("%s (%d of %d subtasks acknowledged, not %s)", reasonLeaderChanged, tasks-lacking, tasks, first)
	}
	return missing, ""
}
