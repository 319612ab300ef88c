package jobmaster

import (
	"time"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/internal/logsum"
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

// jobRegions caches a job's failover regions for the term: they depend on the JobGraph only,
// which never changes after submission. The create index tells a resubmitted job of the same
// id apart.
type jobRegions struct {
	createIndex uint64
	regions     []graph.Region
	err         error
}

// drive looks at one job's committed state and takes the next step. It is level-triggered:
// called after any change and on every tick, it derives what to do from the state alone, so a
// new leader simply drives every job. The decision (nextSteps, plan.go) runs on the FSM's live
// record under its read lock, without copying the job; the actions it returns hold copies and
// are carried out after the lock is released.
func (t *term) drive(jobID string) {
	if t.ctx.Err() != nil {
		return
	}
	v := view{now: time.Now(), restartAt: t.restartDelays(jobID), held: t.watch.heldTMs(), drained: t.jm.state.Drained()}
	var steps []action
	var regionsErr error
	var status pb.JobStatus
	ok := t.jm.state.WithJob(jobID, func(rec *pb.JobRecord) {
		t.driven[jobID] = rec.ModifyIndex
		status = rec.Status
		if rec.Status == jobRunning {
			r := t.regionsOf(jobID, rec)
			if regionsErr = r.err; regionsErr != nil {
				return
			}
			v.regions = r.regions
		}
		steps = nextSteps(rec, v)
	})
	if !ok {
		return
	}
	t.mu.Lock()
	delete(t.retryCancel, jobID)
	t.mu.Unlock()
	if regionsErr != nil {
		t.jm.log.Error("failover regions", "job", jobID, "error", regionsErr)
		return
	}
	t.act(jobID, status, steps)
}

// regionsOf returns the job's failover regions, computed once per term (loop goroutine only).
func (t *term) regionsOf(jobID string, rec *pb.JobRecord) jobRegions {
	if r, ok := t.regions[jobID]; ok && r.createIndex == rec.CreateIndex {
		return r
	}
	regions, err := graph.FailoverRegions(rec.JobGraph)
	r := jobRegions{createIndex: rec.CreateIndex, regions: regions, err: err}
	t.regions[jobID] = r
	return r
}

// act carries out the plan's actions in order. A deployment that has to wait ends the pass
// (it is the last action anyway). Then it records why the job waits, if it does (wait.go).
func (t *term) act(jobID string, status pb.JobStatus, steps []action) {
	var holds []action
	defer func() {
		h, key := summariseHolds(holds)
		if key != t.holding[jobID] {
			if h != "" {
				t.jm.log.Info("restart waits", "job", jobID, "reason", h)
			}
			t.holding[jobID] = key
		}
		t.noteJobWait(jobID, status, h)
	}()
	for _, a := range steps {
		if t.ctx.Err() != nil {
			return
		}
		switch a.kind {
		case actStatus:
			if t.setStatus(jobID, a) && a.kick {
				t.kick(jobID)
			}
		case actCancel:
			t.cancelExecutions(jobID, a)
		case actArmRestart:
			t.armRestart(jobID, a.region, a.notBefore)
		case actDeploy:
			if !t.tryDeploy(jobID, a) {
				return
			}
			if in := t.jm.cfg.Instruments; in != nil && len(a.regions) > 0 {
				in.RegionsRestarted(len(a.regions), a.restart)
			}
			t.kick(jobID) // later regions read the updated state on the next pass
		case actResume:
			t.resume(jobID, a)
		case actHold:
			holds = append(holds, a)
		}
	}
}

// setStatus commits a job status change and reports whether it was committed.
func (t *term) setStatus(jobID string, a action) bool {
	if _, err := t.jm.Commit(t.ctx, pb.CommandType_COMMAND_TYPE_SET_JOB_STATUS, &pb.SetJobStatusCommand{
		JobId: jobID, Status: a.to, Expected: a.from, Timestamp: nowMillis(), Cause: a.cause,
	}); err != nil {
		t.jm.log.Warn("job status change failed", "job", jobID, "to", graph.JobStatusName(a.to), "error", err)
		return false
	}
	t.jm.log.Info("job status", "job", jobID, "from", graph.JobStatusName(a.from), "to", graph.JobStatusName(a.to), "cause", logsum.Text(a.cause))
	return true
}
