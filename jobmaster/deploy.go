package jobmaster

import (
	"errors"
	"fmt"
	"time"

	"github.com/jmcluster/jmcluster/internal/failpoint"
	"github.com/jmcluster/jmcluster/internal/logsum"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// Carrying out the plan's deployments under the write-ahead rule: (1) commit CreateAttempts
// (the attempts are SCHEDULED), (2) commit DEPLOYING for them, (3) submit them with
// descriptors built from the committed record (submit.go). Nothing is sent before both
// commits.

// tryDeploy carries out an actDeploy and logs (once per reason) why a deployment has to wait.
// It reports whether the deployment went out.
func (t *term) tryDeploy(jobID string, a action) bool {
	for _, r := range a.regions {
		t.disarmRestart(jobID, r)
	}
	if err := t.deploy(jobID, a.tasks, a.restart); err != nil {
		slots := errors.Is(err, ErrNoSlots)
		if slots {
			t.jm.deployWaits.Add(1)
		} else {
			t.jm.deployFailures.Add(1)
		}
		if t.waiting[jobID] != err.Error() {
			t.waiting[jobID] = err.Error()
			t.jm.log.Info("deployment waits", "job", jobID, "what", a.what, "reason", logsum.Text(err.Error()))
		}
		since := t.noteWait(jobID, err.Error(), slots)
		if to := t.jm.cfg.SlotTimeout; slots && to > 0 && time.Since(since) >= to {
			t.failForSlots(jobID, fmt.Sprintf("%s%s, for longer than the slot timeout (%s)", SlotTimeoutCause, err, to))
		}
		return false
	}
	delete(t.waiting, jobID)
	t.mu.Lock()
	delete(t.waits, jobID)
	t.mu.Unlock()
	return true
}

// SlotTimeoutCause begins the failure cause of a job whose deployment waited for slots longer
// than Config.SlotTimeout; such a job is not restarted (plan.go): more waiting would not help.
const SlotTimeoutCause = "slot timeout: "

// wait is why a job's deployment waits, and since when (slots: for free slots).
type wait struct {
	reason string
	since  time.Time
	slots  bool
}

// noteWait records that jobID's deployment waits for reason and returns since when it has
// waited for slots without a break (a wait for another reason starts the clock again).
func (t *term) noteWait(jobID, reason string, slots bool) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	w, ok := t.waits[jobID]
	if !ok || w.slots != slots {
		w = wait{since: time.Now(), slots: slots}
	}
	w.reason = reason
	t.waits[jobID] = w
	return w.since
}

// failForSlots fails a running job whose deployment waited past the slot timeout.
func (t *term) failForSlots(jobID, cause string) {
	t.jm.log.Error("job fails: no slots within the slot timeout", "job", jobID, "cause", cause)
	if _, err := t.jm.Commit(t.ctx, pb.CommandType_COMMAND_TYPE_SET_JOB_STATUS, &pb.SetJobStatusCommand{
		JobId: jobID, Status: jobFailing, Expected: jobRunning, Cause: cause, Timestamp: nowMillis(),
	}); err != nil {
		t.jm.log.Warn("commit FAILING after the slot timeout", "job", jobID, "error", err)
		return
	}
	t.mu.Lock()
	delete(t.waits, jobID)
	t.mu.Unlock()
	delete(t.waiting, jobID)
	t.kick(jobID)
}

// deploy places the tasks, commits their new attempts (write-ahead) and DEPLOYING, and only
// then submits them to their TMs. restart commits the region restart (Restarts + 1) first.
func (t *term) deploy(jobID string, tasks []deployTask, restart bool) error {
	if len(tasks) == 0 {
		return nil
	}
	places, err := t.allocate(tasks)
	if err != nil {
		return err
	}
	ts := nowMillis()
	cmd := &pb.CreateAttemptsCommand{JobId: jobID, Timestamp: ts, Attempts: attemptSpecs(tasks, places, newID)}
	deploying := &pb.UpdateExecutionStatesCommand{Updates: deployingUpdates(jobID, cmd.Attempts, ts)}
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
	failpoint.Inject(t.ctx, failpoint.BeforeDeployingCommit)
	if _, err := t.jm.Commit(t.ctx, pb.CommandType_COMMAND_TYPE_UPDATE_EXECUTION_STATES, deploying); err != nil {
		return fmt.Errorf("commit deploying: %w", err)
	}
	return t.submitCommitted(jobID, cmd.Attempts)
}

// attemptSpecs pairs each task with its placement and a fresh attempt id.
func attemptSpecs(tasks []deployTask, places []placement, id func() string) []*pb.AttemptSpec {
	out := make([]*pb.AttemptSpec, len(tasks))
	for i, task := range tasks {
		p := places[i]
		out[i] = &pb.AttemptSpec{
			VertexId: task.vertexID, SubtaskIndex: task.subtask, AttemptId: id(), AttemptNumber: task.number,
			Slot:          &pb.SlotID{TmId: p.tm.ID, Index: p.slot},
			TmGrpcAddress: p.tm.GRPCAddr, TmDataAddress: p.tm.DataAddr,
		}
	}
	return out
}

func deployingUpdates(jobID string, attempts []*pb.AttemptSpec, ts int64) []*pb.ExecutionStateUpdate {
	out := make([]*pb.ExecutionStateUpdate, len(attempts))
	for i, a := range attempts {
		out[i] = &pb.ExecutionStateUpdate{JobId: jobID, AttemptId: a.AttemptId, State: stDeploying, Timestamp: ts}
	}
	return out
}

// resume carries out an actResume: step 2 and 3 of a deployment whose step 2 failed.
func (t *term) resume(jobID string, a action) {
	deploying := &pb.UpdateExecutionStatesCommand{Updates: deployingUpdates(jobID, a.attempts, nowMillis())}
	if _, err := t.jm.Commit(t.ctx, pb.CommandType_COMMAND_TYPE_UPDATE_EXECUTION_STATES, deploying); err != nil {
		t.jm.deployFailures.Add(1)
		t.jm.log.Warn("commit deploying of scheduled attempts", "job", jobID, "error", err)
		return
	}
	_ = t.submitCommitted(jobID, a.attempts)
	t.kick(jobID)
}

// armRestart and disarmRestart keep the restart delays of a job's regions (volatile, per term).
func (t *term) armRestart(jobID string, region int, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.restartAt[jobID] == nil {
		t.restartAt[jobID] = map[int]time.Time{}
	}
	if _, ok := t.restartAt[jobID][region]; !ok {
		t.restartAt[jobID][region] = at
	}
}

func (t *term) disarmRestart(jobID string, region int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.restartAt[jobID], region)
	if len(t.restartAt[jobID]) == 0 {
		delete(t.restartAt, jobID)
	}
}

// restartDelays copies the job's armed restart delays for the plan's view.
func (t *term) restartDelays(jobID string) map[int]time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[int]time.Time, len(t.restartAt[jobID]))
	for r, at := range t.restartAt[jobID] {
		out[r] = at
	}
	return out
}

func (t *term) failAsync(jobID, attemptID, cause string) {
	t.spawn(func() { t.fail(jobID, attemptID, cause) })
}

func (t *term) fail(jobID, attemptID, cause string) {
	t.batch.commit(t.ctx, []*pb.ExecutionStateUpdate{{
		JobId: jobID, AttemptId: attemptID, State: stFailed, FailureCause: cause, Timestamp: nowMillis(),
	}})
}
