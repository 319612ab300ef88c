package jobmaster

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/internal/failpoint"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// Short names for the states the scheduler branches on.
const (
	stCreated     = pb.ExecutionState_EXECUTION_STATE_CREATED
	stScheduled   = pb.ExecutionState_EXECUTION_STATE_SCHEDULED
	stDeploying   = pb.ExecutionState_EXECUTION_STATE_DEPLOYING
	stRunning     = pb.ExecutionState_EXECUTION_STATE_RUNNING
	stFinished    = pb.ExecutionState_EXECUTION_STATE_FINISHED
	stCanceling   = pb.ExecutionState_EXECUTION_STATE_CANCELING
	stCanceled    = pb.ExecutionState_EXECUTION_STATE_CANCELED
	stFailed      = pb.ExecutionState_EXECUTION_STATE_FAILED
	stReconciling = pb.ExecutionState_EXECUTION_STATE_RECONCILING

	jobCreated    = pb.JobStatus_JOB_STATUS_CREATED
	jobRunning    = pb.JobStatus_JOB_STATUS_RUNNING
	jobFailing    = pb.JobStatus_JOB_STATUS_FAILING
	jobFailed     = pb.JobStatus_JOB_STATUS_FAILED
	jobCancelling = pb.JobStatus_JOB_STATUS_CANCELLING
	jobCanceled   = pb.JobStatus_JOB_STATUS_CANCELED
	jobFinished   = pb.JobStatus_JOB_STATUS_FINISHED
	jobRestarting = pb.JobStatus_JOB_STATUS_RESTARTING
)

// DefaultRestartAttempts is the fixed-delay restart budget when the job names none.
const DefaultRestartAttempts = 3

func isTerminal(s pb.ExecutionState) bool { return graph.IsTerminalExecution(s) }

func forEachExecution(rec *pb.JobRecord, fn func(ev *pb.ExecutionVertex)) {
	for _, ejv := range rec.GetExecutionGraph().GetVertices() {
		for _, ev := range ejv.GetSubtasks() {
			fn(ev)
		}
	}
}

// drive looks at one job's committed state and takes the next step. It is level-triggered:
// called after any change and on every tick, it derives what to do from the state alone, so a
// new leader simply drives every job.
func (t *term) drive(jobID string) {
	rec, ok := t.jm.state.Job(jobID)
	if !ok || t.ctx.Err() != nil {
		return
	}
	t.driven[jobID] = rec.ModifyIndex
	t.mu.Lock()
	delete(t.retryCancel, jobID)
	t.mu.Unlock()
	switch rec.Status {
	case jobCreated:
		if _, err := t.jm.Commit(t.ctx, pb.CommandType_COMMAND_TYPE_SET_JOB_STATUS, &pb.SetJobStatusCommand{
			JobId: jobID, Status: jobRunning, Expected: jobCreated, Timestamp: nowMillis(),
		}); err != nil {
			t.jm.log.Warn("job could not start", "job", jobID, "error", err)
			return
		}
		t.kick(jobID)
	case jobRunning:
		t.driveRunning(rec)
	case jobFailing:
		// A failure the restart strategy still covers restarts the affected regions
		// (FAILING -> RESTARTING -> RUNNING); otherwise every task is cancelled and the job FAILS.
		if !restartsExhausted(rec) {
			t.setStatus(rec, jobRestarting, rec.FailureCause)
			t.kick(jobID)
			return
		}
		if t.cancelAll(rec) {
			t.setStatus(rec, jobFailed, rec.FailureCause)
		}
	case jobRestarting:
		t.setStatus(rec, jobRunning, "restarting failed regions")
		t.kick(jobID)
	case jobCancelling:
		if t.cancelAll(rec) {
			t.setStatus(rec, jobCanceled, "cancelled")
		}
	}
}

func (t *term) setStatus(rec *pb.JobRecord, to pb.JobStatus, cause string) {
	id := rec.JobGraph.JobId
	if _, err := t.jm.Commit(t.ctx, pb.CommandType_COMMAND_TYPE_SET_JOB_STATUS, &pb.SetJobStatusCommand{
		JobId: id, Status: to, Expected: rec.Status, Timestamp: nowMillis(), Cause: cause,
	}); err != nil {
		t.jm.log.Warn("job status change failed", "job", id, "to", graph.JobStatusName(to), "error", err)
		return
	}
	t.jm.log.Info("job status", "job", id, "from", graph.JobStatusName(rec.Status), "to", graph.JobStatusName(to), "cause", cause)
}

// driveRunning: finish the job when every task finished; restart regions with failed or
// cancelled members under the restart strategy; deploy regions whose inputs are ready.
func (t *term) driveRunning(rec *pb.JobRecord) {
	jg := rec.JobGraph
	regions, err := graph.FailoverRegions(jg)
	if err != nil {
		t.jm.log.Error("failover regions", "job", jg.JobId, "error", err)
		return
	}
	if t.resumeScheduled(rec) {
		return
	}
	eg := rec.ExecutionGraph
	allFinished := true
	forEachExecution(rec, func(ev *pb.ExecutionVertex) {
		if ev.GetCurrent().GetState() != stFinished {
			allFinished = false
		}
	})
	if allFinished {
		t.setStatus(rec, jobFinished, "")
		return
	}
	// Regions deployed for the first time go out together (a streaming job is deployed
	// eagerly in one commit); a region restart is committed region by region.
	var fresh []*pb.ExecutionVertex
	for _, r := range regions {
		var active, failed, finished, undeployed []*pb.ExecutionVertex
		for _, m := range r.Members {
			ev := graph.FindVertex(eg, m.VertexID, m.Subtask)
			switch s := ev.GetCurrent().GetState(); {
			case ev.GetCurrent() == nil:
				undeployed = append(undeployed, ev)
			case s == stFinished:
				finished = append(finished, ev)
			case s == stFailed || s == stCanceled:
				failed = append(failed, ev)
			default:
				active = append(active, ev)
			}
		}
		if len(failed) > 0 && len(active) > 0 {
			// A pipelined region restarts as a whole: stop what still runs first.
			t.cancelExecutions(rec, active, "region restart: "+firstCause(failed))
			continue
		}
		if len(active) > 0 || (len(failed) == 0 && len(undeployed) == 0) {
			continue
		}
		if !t.inputsReady(rec, r) {
			continue
		}
		if len(failed) == 0 {
			fresh = append(fresh, undeployed...)
			continue
		}
		restart := false
		for _, ev := range failed {
			if ev.GetCurrent().GetState() == stFailed {
				restart = true
			}
		}
		if restart {
			ok, exhausted := t.restartAllowed(rec, r)
			if exhausted {
				t.setStatus(rec, jobFailing, "restart strategy exhausted after "+fmt.Sprint(rec.Restarts)+" restarts: "+firstCause(failed))
				return
			}
			if !ok {
				continue // the restart delay has not passed
			}
		}
		members := append(append(append([]*pb.ExecutionVertex{}, undeployed...), failed...), finished...)
		if !t.tryDeploy(rec, members, restart, fmt.Sprintf("region %d", r.ID)) {
			return
		}
		t.kick(jg.JobId) // later regions read the updated state on the next pass
		return
	}
	if len(fresh) > 0 && t.tryDeploy(rec, fresh, false, "new regions") {
		t.kick(jg.JobId)
	}
}

// tryDeploy deploys and logs (once per reason) why a deployment has to wait.
func (t *term) tryDeploy(rec *pb.JobRecord, evs []*pb.ExecutionVertex, restart bool, what string) bool {
	jobID := rec.JobGraph.JobId
	if err := t.deploy(rec, evs, restart); err != nil {
		if errors.Is(err, ErrNoSlots) {
			t.jm.deployWaits.Add(1)
		} else {
			t.jm.deployFailures.Add(1)
		}
		if t.waiting[jobID] != err.Error() {
			t.waiting[jobID] = err.Error()
			t.jm.log.Info("deployment waits", "job", jobID, "what", what, "reason", err)
		}
		return false
	}
	delete(t.waiting, jobID)
	return true
}

func firstCause(evs []*pb.ExecutionVertex) string {
	for _, ev := range evs {
		if c := ev.GetCurrent().GetFailureCause(); c != "" {
			return c
		}
	}
	return "task cancelled"
}

// restartAllowed applies the restart strategy: whether the budget is exhausted, and whether
// the fixed delay has passed since the failure was first seen in this term.
func (t *term) restartAllowed(rec *pb.JobRecord, r graph.Region) (ok, exhausted bool) {
	if restartsExhausted(rec) {
		return false, true
	}
	rs := rec.JobGraph.GetRestartStrategy()
	key := fmt.Sprintf("%s/%d", rec.JobGraph.JobId, r.ID)
	t.mu.Lock()
	defer t.mu.Unlock()
	at, seen := t.restartAt[key]
	if !seen {
		at = time.Now().Add(time.Duration(rs.GetDelayMs()) * time.Millisecond)
		t.restartAt[key] = at
	}
	if time.Now().Before(at) {
		return false, false
	}
	delete(t.restartAt, key)
	return true, false
}

// restartsExhausted: the restart strategy allows no further restart.
func restartsExhausted(rec *pb.JobRecord) bool {
	rs := rec.JobGraph.GetRestartStrategy()
	if rs.GetKind() == pb.RestartKind_RESTART_KIND_NONE {
		return true
	}
	attempts := rs.GetAttempts()
	if attempts == 0 {
		attempts = DefaultRestartAttempts
	}
	return rec.Restarts >= attempts
}

// inputsReady: every BLOCKING input from outside the region has all partitions consumable.
func (t *term) inputsReady(rec *pb.JobRecord, r graph.Region) bool {
	inRegion := map[string]bool{}
	for _, m := range r.Members {
		inRegion[m.VertexID] = true
	}
	for _, res := range rec.ExecutionGraph.GetResults() {
		if !inRegion[res.ConsumerVertexId] || inRegion[res.ProducerVertexId] {
			continue
		}
		if res.ResultType != pb.ResultType_RESULT_TYPE_BLOCKING {
			continue
		}
		for _, p := range res.Partitions {
			if !p.Consumable {
				return false
			}
		}
	}
	return true
}

// slotsInUse returns, per TM, the slot indexes held by non-terminal executions of every job.
func (t *term) slotsInUse() map[string]map[int32]bool {
	used := map[string]map[int32]bool{}
	for _, id := range t.jm.state.JobIDs() {
		t.jm.state.WithJob(id, func(rec *pb.JobRecord) {
			forEachExecution(rec, func(ev *pb.ExecutionVertex) {
				e := ev.GetCurrent()
				if e == nil || isTerminal(e.State) || e.Slot == nil {
					return
				}
				if used[e.Slot.TmId] == nil {
					used[e.Slot.TmId] = map[int32]bool{}
				}
				used[e.Slot.TmId][e.Slot.Index] = true
			})
		})
	}
	return used
}

type placement struct {
	tm   TaskManager
	slot int32
}

// allocate places n tasks, spreading them across TMs: each goes to the TM with the most free
// slots (ties by id), on its lowest free slot index.
func (t *term) allocate(n int) ([]placement, error) {
	tms := t.jm.tms.Usable(t.jm.cfg.HeartbeatTimeout)
	used := t.slotsInUse()
	free := map[string][]int32{}
	for _, tm := range tms {
		for i := int32(0); i < tm.Slots; i++ {
			if !used[tm.ID][i] {
				free[tm.ID] = append(free[tm.ID], i)
			}
		}
	}
	total := 0
	for _, f := range free {
		total += len(f)
	}
	if total < n {
		return nil, fmt.Errorf("%w: %d needed, %d free on %d task managers", ErrNoSlots, n, total, len(tms))
	}
	out := make([]placement, 0, n)
	for len(out) < n {
		best := -1
		for i, tm := range tms {
			if len(free[tm.ID]) == 0 {
				continue
			}
			if best < 0 || len(free[tm.ID]) > len(free[tms[best].ID]) {
				best = i
			}
		}
		tm := tms[best]
		out = append(out, placement{tm: tm, slot: free[tm.ID][0]})
		free[tm.ID] = free[tm.ID][1:]
	}
	return out, nil
}

// deploy commits new attempts for the given ExecutionVertices (write-ahead), marks them
// DEPLOYING, and only then submits them to their TMs.
func (t *term) deploy(rec *pb.JobRecord, evs []*pb.ExecutionVertex, restart bool) error {
	if len(evs) == 0 {
		return nil
	}
	places, err := t.allocate(len(evs))
	if err != nil {
		return err
	}
	jobID := rec.JobGraph.JobId
	ts := nowMillis()
	cmd := &pb.CreateAttemptsCommand{JobId: jobID, Timestamp: ts}
	deploying := &pb.UpdateExecutionStatesCommand{}
	for i, ev := range evs {
		number := int32(0)
		if ev.Current != nil {
			number = ev.Current.AttemptNumber + 1
		}
		p := places[i]
		a := &pb.AttemptSpec{
			VertexId: ev.VertexId, SubtaskIndex: ev.SubtaskIndex, AttemptId: newID(), AttemptNumber: number,
			Slot:          &pb.SlotID{TmId: p.tm.ID, Index: p.slot},
			TmGrpcAddress: p.tm.GRPCAddr, TmDataAddress: p.tm.DataAddr,
		}
		cmd.Attempts = append(cmd.Attempts, a)
		deploying.Updates = append(deploying.Updates, &pb.ExecutionStateUpdate{
			JobId: jobID, AttemptId: a.AttemptId, State: stDeploying, Timestamp: ts,
		})
	}
	if restart {
		if _, err := t.jm.Commit(t.ctx, pb.CommandType_COMMAND_TYPE_SET_JOB_STATUS, &pb.SetJobStatusCommand{
			JobId: jobID, Status: jobRunning, Timestamp: ts, AddRestarts: 1, Cause: "region restart",
		}); err != nil {
			return fmt.Errorf("count restart: %w", err)
		}
	}
	if _, err := t.jm.Commit(t.ctx, pb.CommandType_COMMAND_TYPE_CREATE_ATTEMPTS, cmd); err != nil {
		return fmt.Errorf("commit attempts: %w", err)
	}
	if _, err := t.jm.Commit(t.ctx, pb.CommandType_COMMAND_TYPE_UPDATE_EXECUTION_STATES, deploying); err != nil {
		return fmt.Errorf("commit deploying: %w", err)
	}
	return t.submitCommitted(jobID, cmd.Attempts)
}

// submitCommitted sends SubmitTask for attempts whose creation and DEPLOYING state are
// committed, with descriptors built from the committed state.
func (t *term) submitCommitted(jobID string, attempts []*pb.AttemptSpec) error {
	committed, ok := t.jm.state.Job(jobID)
	if !ok {
		return fmt.Errorf("job %s vanished", jobID)
	}
	names := make([]string, 0, len(attempts))
	for _, a := range attempts {
		names = append(names, fmt.Sprintf("%s[%d]#%d@%s/%d", a.VertexId, a.SubtaskIndex, a.AttemptNumber, a.Slot.GetTmId(), a.Slot.GetIndex()))
	}
	t.jm.log.Info("deploying", "job", jobID, "tasks", len(names), "attempts", strings.Join(names, " "))
	for _, a := range attempts {
		tdd, err := TaskDeploymentDescriptor(committed, a.VertexId, a.SubtaskIndex)
		if err != nil {
			t.failAsync(jobID, a.AttemptId, "deployment descriptor: "+err.Error())
			continue
		}
		t.submitAsync(a.TmGrpcAddress, tdd)
	}
	return nil
}

// resumeScheduled finishes deployments of this term whose attempts were committed but whose
// DEPLOYING commit failed (a SCHEDULED attempt: nothing was submitted for it). Reconciliation
// resolves SCHEDULED attempts of earlier terms before the scheduler runs, so every SCHEDULED
// attempt the scheduler sees is its own. It reports whether there was anything to resume.
func (t *term) resumeScheduled(rec *pb.JobRecord) bool {
	jobID := rec.JobGraph.JobId
	var attempts []*pb.AttemptSpec
	deploying := &pb.UpdateExecutionStatesCommand{}
	ts := nowMillis()
	forEachExecution(rec, func(ev *pb.ExecutionVertex) {
		e := ev.GetCurrent()
		if e.GetState() != stScheduled {
			return
		}
		attempts = append(attempts, &pb.AttemptSpec{
			VertexId: ev.VertexId, SubtaskIndex: ev.SubtaskIndex, AttemptId: e.AttemptId, AttemptNumber: e.AttemptNumber,
			Slot: e.Slot, TmGrpcAddress: e.TmGrpcAddress, TmDataAddress: e.TmDataAddress,
		})
		deploying.Updates = append(deploying.Updates, &pb.ExecutionStateUpdate{JobId: jobID, AttemptId: e.AttemptId, State: stDeploying, Timestamp: ts})
	})
	if len(attempts) == 0 {
		return false
	}
	if _, err := t.jm.Commit(t.ctx, pb.CommandType_COMMAND_TYPE_UPDATE_EXECUTION_STATES, deploying); err != nil {
		t.jm.deployFailures.Add(1)
		t.jm.log.Warn("commit deploying of scheduled attempts", "job", jobID, "error", err)
		return true
	}
	_ = t.submitCommitted(jobID, attempts)
	t.kick(jobID)
	return true
}

func (t *term) submitAsync(addr string, tdd *pb.TaskDeploymentDescriptor) {
	t.mu.Lock()
	t.submitting[tdd.AttemptId] = true
	t.mu.Unlock()
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		failpoint.Inject(t.ctx, failpoint.BeforeSubmitTask)
		err := t.jm.tms.Call(t.ctx, addr, func(ctx context.Context, c pb.TaskManagerServiceClient) error {
			_, err := c.SubmitTask(ctx, &pb.SubmitTaskRequest{Epoch: t.epoch, Task: tdd})
			return err
		})
		t.mu.Lock()
		delete(t.submitting, tdd.AttemptId)
		t.mu.Unlock()
		if err != nil && t.ctx.Err() == nil {
			t.jm.log.Warn("submit failed", "job", tdd.JobId, "vertex", tdd.VertexId, "subtask", tdd.SubtaskIndex, "tm", addr, "error", err)
			t.fail(tdd.JobId, tdd.AttemptId, "deploy to "+addr+" failed: "+err.Error())
		}
	}()
}

func (t *term) failAsync(jobID, attemptID, cause string) {
	t.wg.Add(1)
	go func() { defer t.wg.Done(); t.fail(jobID, attemptID, cause) }()
}

func (t *term) fail(jobID, attemptID, cause string) {
	t.batch.commit(t.ctx, []*pb.ExecutionStateUpdate{{
		JobId: jobID, AttemptId: attemptID, State: stFailed, FailureCause: cause, Timestamp: nowMillis(),
	}})
}

// cancelAll moves every non-terminal execution of the job towards CANCELED and reports
// whether all of them are terminal already.
func (t *term) cancelAll(rec *pb.JobRecord) bool {
	var live []*pb.ExecutionVertex
	forEachExecution(rec, func(ev *pb.ExecutionVertex) {
		if e := ev.GetCurrent(); e != nil && !isTerminal(e.State) {
			live = append(live, ev)
		}
	})
	if len(live) == 0 {
		return true
	}
	t.cancelExecutions(rec, live, "job "+graph.JobStatusName(rec.Status))
	return false
}

// cancelExecutions commits CANCELING (write-ahead) for the given executions and sends
// CancelTask for each once; the TM's answer (or report) commits the terminal state.
func (t *term) cancelExecutions(rec *pb.JobRecord, evs []*pb.ExecutionVertex, cause string) {
	jobID := rec.JobGraph.JobId
	var toCanceling []*pb.ExecutionStateUpdate
	var send []*pb.Execution
	for _, ev := range evs {
		e := ev.GetCurrent()
		switch e.State {
		case stCreated:
			toCanceling = append(toCanceling, &pb.ExecutionStateUpdate{JobId: jobID, AttemptId: e.AttemptId, State: stCanceled, Timestamp: nowMillis(), FailureCause: cause})
		case stReconciling:
			// Reconciliation owns these; nothing to do until it commits.
		case stCanceling:
			send = append(send, e)
		default:
			toCanceling = append(toCanceling, &pb.ExecutionStateUpdate{JobId: jobID, AttemptId: e.AttemptId, State: stCanceling, Timestamp: nowMillis(), FailureCause: cause})
			send = append(send, e)
		}
	}
	if len(toCanceling) > 0 {
		if _, err := t.jm.Commit(t.ctx, pb.CommandType_COMMAND_TYPE_UPDATE_EXECUTION_STATES, &pb.UpdateExecutionStatesCommand{Updates: toCanceling}); err != nil {
			t.jm.log.Warn("commit canceling", "job", jobID, "error", err)
			return
		}
	}
	for _, e := range send {
		t.cancelAsync(jobID, proto.Clone(e).(*pb.Execution))
	}
}

func (t *term) cancelAsync(jobID string, e *pb.Execution) {
	t.sendCancel(jobID, e.AttemptId, e.TmGrpcAddress, true)
}

// sendCancel sends CancelTask once per attempt and term (again after a failed call). For an
// attempt of the graph (owned), a terminal answer is committed; for an attempt the graph does
// not own on that TM, nothing is committed: the attempt id may be the graph's current attempt
// on another TM, whose state a false report must not change.
func (t *term) sendCancel(jobID, attemptID, addr string, owned bool) {
	key := attemptID + "@" + addr
	t.mu.Lock()
	if t.cancelSent[key] {
		t.mu.Unlock()
		return
	}
	t.cancelSent[key] = true
	t.mu.Unlock()
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		var state pb.ExecutionState
		failpoint.Inject(t.ctx, failpoint.BeforeCancelTask)
		err := t.jm.tms.Call(t.ctx, addr, func(ctx context.Context, c pb.TaskManagerServiceClient) error {
			resp, err := c.CancelTask(ctx, &pb.CancelTaskRequest{Epoch: t.epoch, JobId: jobID, AttemptId: attemptID})
			if err == nil {
				state = resp.State
			}
			return err
		})
		if err != nil {
			// Try again on a later pass; a lost TM fails the execution instead.
			t.mu.Lock()
			delete(t.cancelSent, key)
			if owned {
				t.retryCancel[jobID] = true
			}
			t.mu.Unlock()
			if t.ctx.Err() == nil {
				t.jm.log.Debug("cancel failed; will retry", "attempt", attemptID, "tm", addr, "error", err)
			}
			return
		}
		if !owned {
			t.jm.foreignCancels.Add(1)
			return
		}
		if isTerminal(state) {
			t.batch.commit(t.ctx, []*pb.ExecutionStateUpdate{{JobId: jobID, AttemptId: attemptID, State: state, Timestamp: nowMillis()}})
		}
	}()
}

// cancelOnTM cancels an attempt the graph does not own on that TM (reported by it); nothing is
// committed because there is nothing in the graph to change.
func (t *term) cancelOnTM(addr, jobID, attemptID string) {
	t.sendCancel(jobID, attemptID, addr, false)
}

// TaskDeploymentDescriptor builds the descriptor of one ExecutionVertex's current attempt from
// the committed state.
func TaskDeploymentDescriptor(rec *pb.JobRecord, vertexID string, subtask int32) (*pb.TaskDeploymentDescriptor, error) {
	jg := rec.JobGraph
	eg := rec.ExecutionGraph
	ev := graph.FindVertex(eg, vertexID, subtask)
	if ev == nil || ev.Current == nil {
		return nil, fmt.Errorf("no current attempt for %s[%d]", vertexID, subtask)
	}
	var jv *pb.JobVertex
	for _, v := range jg.Vertices {
		if v.Id == vertexID {
			jv = v
		}
	}
	if jv == nil {
		return nil, fmt.Errorf("unknown vertex %s", vertexID)
	}
	e := ev.Current
	tdd := &pb.TaskDeploymentDescriptor{
		JobId: jg.JobId, VertexId: vertexID, SubtaskIndex: subtask, Parallelism: jv.Parallelism,
		AttemptId: e.AttemptId, AttemptNumber: e.AttemptNumber, StartTimestamp: e.StartTimestamp,
		SlotIndex: e.GetSlot().GetIndex(), Operator: jv.Operator, JobType: jg.Type,
	}
	for _, res := range eg.Results {
		if res.ProducerVertexId == vertexID {
			p := res.Partitions[subtask]
			tdd.Produced = append(tdd.Produced, &pb.ResultPartitionDeploymentDescriptor{
				ResultId: res.ResultId, PartitionIndex: subtask, NumSubpartitions: p.NumSubpartitions,
				Distribution: res.Distribution, ResultType: res.ResultType,
			})
		}
	}
	gates := map[string]*pb.InputGateDeploymentDescriptor{}
	var order []string
	for _, in := range ev.Inputs {
		g := gates[in.ResultId]
		if g == nil {
			g = &pb.InputGateDeploymentDescriptor{ResultId: in.ResultId}
			for _, res := range eg.Results {
				if res.ResultId == in.ResultId {
					g.Distribution, g.ResultType = res.Distribution, res.ResultType
				}
			}
			gates[in.ResultId] = g
			order = append(order, in.ResultId)
		}
		g.Channels = append(g.Channels, proto.Clone(in).(*pb.InputChannelDescriptor))
	}
	sort.Strings(order)
	for _, id := range order {
		tdd.Inputs = append(tdd.Inputs, gates[id])
	}
	return tdd, nil
}
