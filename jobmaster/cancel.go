package jobmaster

import (
	"context"
	"time"

	"github.com/jmcluster/jmcluster/internal/failpoint"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// cancelExecutions carries out an actCancel: it commits CANCELING (or CANCELED for executions that
// never started) first (write-ahead) and then sends CancelTask for each attempt once; the TM's
// answer (or report) commits the terminal state. A failed commit sends nothing.
func (t *term) cancelExecutions(jobID string, a action) {
	if len(a.updates) > 0 {
		if _, err := t.jm.Commit(t.ctx, pb.CommandType_COMMAND_TYPE_UPDATE_EXECUTION_STATES, &pb.UpdateExecutionStatesCommand{Updates: a.updates}); err != nil {
			t.jm.log.Warn("commit canceling", "job", jobID, "error", err)
			return
		}
	}
	for _, s := range a.sends {
		t.sendCancel(jobID, s.attemptID, s.addr, true)
	}
}

// cancelKey names a CancelTask: the attempt and the address of the TM it was sent to.
type cancelKey struct{ attemptID, addr string }

// sendCancel sends CancelTask once per attempt and term (again after a failed call, or once
// prune forgot it). For an
// attempt of the graph (owned), a terminal answer is committed; for an attempt the graph does
// not own on that TM, nothing is committed: the attempt id may be the graph's current attempt
// on another TM, whose state a false report must not change.
func (t *term) sendCancel(jobID, attemptID, addr string, owned bool) {
	key := cancelKey{attemptID, addr}
	t.mu.Lock()
	if _, sent := t.cancelSent[key]; sent || t.stopping {
		t.mu.Unlock()
		return
	}
	t.cancelSent[key] = time.Now()
	// Under the lock that stop takes first: reconciliation calls this from outside the
	// term's goroutines, and nothing may join the wait group once stop waits on it.
	t.spawnLocked(func() {
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
	})
	t.mu.Unlock()
}

// cancelOnTM cancels an attempt the graph does not own on that TM (a heartbeat's deployment
// report, or reconciliation through Term.Cancel); nothing is committed because there is
// nothing in the graph to change.
func (t *term) cancelOnTM(addr, jobID, attemptID string) {
	t.sendCancel(jobID, attemptID, addr, false)
}
