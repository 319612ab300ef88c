package jobmaster

import (
	"context"

	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/internal/failpoint"
	"github.com/jmcluster/jmcluster/transport/pb"
)

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
