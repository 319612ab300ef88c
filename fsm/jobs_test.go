package fsm

import (
	"errors"
	"testing"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/transport/pb"
)

const (
	submitT = pb.CommandType_COMMAND_TYPE_SUBMIT_JOB
	statusT = pb.CommandType_COMMAND_TYPE_SET_JOB_STATUS
	createT = pb.CommandType_COMMAND_TYPE_CREATE_ATTEMPTS
	updateT = pb.CommandType_COMMAND_TYPE_UPDATE_EXECUTION_STATES
	cancelT = pb.CommandType_COMMAND_TYPE_CANCEL_JOB
	leaderT = pb.CommandType_COMMAND_TYPE_ESTABLISH_LEADERSHIP
	beginT  = pb.CommandType_COMMAND_TYPE_BEGIN_RECONCILIATION
	reconT  = pb.CommandType_COMMAND_TYPE_RECONCILE_JOB
	endT    = pb.CommandType_COMMAND_TYPE_END_RECONCILIATION
	noopT   = pb.CommandType_COMMAND_TYPE_NOOP
	removeT = pb.CommandType_COMMAND_TYPE_REMOVE_JOBS
)

func TestSubmitJob(t *testing.T) {
	h := newHarness(t)
	id := jobIDN(0)
	h.submit(streamingJob(id, 2, 3))
	rec := h.job(id)
	if rec.Status != pb.JobStatus_JOB_STATUS_CREATED || len(rec.History) != 1 || rec.History[0].Timestamp != 1000 {
		t.Errorf("status/history: %v %v", rec.Status, rec.History)
	}
	if rec.SubmittedAt != 1000 || rec.CreateIndex != 1 || rec.ModifyIndex != 1 {
		t.Errorf("submitted_at %d create %d modify %d", rec.SubmittedAt, rec.CreateIndex, rec.ModifyIndex)
	}
	if len(graph.AllExecutions(rec.ExecutionGraph)) != 7 || rec.ExecutionGraph.JobId != id {
		t.Errorf("execution graph not built: %v", rec.ExecutionGraph)
	}

	h.fails(submitT, &pb.SubmitJobCommand{JobGraph: streamingJob(id, 1, 1)}, ErrJobExists)
	noID := streamingJob(jobIDN(1), 1, 1)
	noID.JobId = ""
	h.fails(submitT, &pb.SubmitJobCommand{JobGraph: noID}, ErrInvalidCommand)
	h.fails(submitT, &pb.SubmitJobCommand{}, ErrInvalidCommand)
	bad := streamingJob(jobIDN(2), 2, 3)
	bad.Vertices[1].Parallelism = 5
	bad.Name = ""
	res := h.apply(submitT, &pb.SubmitJobCommand{JobGraph: bad})
	var ve *graph.ValidationError
	if !errors.As(res.Err, &ve) || len(ve.Problems) != 2 || !errors.Is(res.Err, graph.ErrInvalidJobGraph) {
		t.Errorf("invalid graph: %v", res.Err)
	}
	if ids := h.f.JobIDs(); len(ids) != 1 || ids[0] != id {
		t.Errorf("JobIDs = %v", ids)
	}
}

func TestSetJobStatus(t *testing.T) {
	h := newHarness(t)
	id := jobIDN(0)
	h.submit(streamingJob(id, 1, 1))

	h.fails(statusT, &pb.SetJobStatusCommand{JobId: "nope", Status: pb.JobStatus_JOB_STATUS_RUNNING}, ErrUnknownJob)
	h.fails(statusT, &pb.SetJobStatusCommand{JobId: id}, ErrInvalidCommand)
	h.fails(statusT, &pb.SetJobStatusCommand{JobId: id, Status: pb.JobStatus_JOB_STATUS_RUNNING, AddRestarts: -1}, ErrInvalidCommand)
	h.fails(statusT, &pb.SetJobStatusCommand{JobId: id, Status: pb.JobStatus_JOB_STATUS_RUNNING,
		Expected: pb.JobStatus_JOB_STATUS_RUNNING}, ErrStatusMismatch)
	h.fails(statusT, &pb.SetJobStatusCommand{JobId: id, Status: pb.JobStatus_JOB_STATUS_FINISHED}, graph.ErrIllegalTransition)

	h.ok(statusT, &pb.SetJobStatusCommand{JobId: id, Status: pb.JobStatus_JOB_STATUS_RUNNING,
		Expected: pb.JobStatus_JOB_STATUS_CREATED, Timestamp: 2000})
	rec := h.job(id)
	if rec.Status != pb.JobStatus_JOB_STATUS_RUNNING || len(rec.History) != 2 || rec.ModifyIndex != h.index {
		t.Fatalf("after RUNNING: %v %v %d", rec.Status, rec.History, rec.ModifyIndex)
	}

	// Same status: no history entry, no modify index change.
	before := h.f.Hash()
	h.ok(statusT, &pb.SetJobStatusCommand{JobId: id, Status: pb.JobStatus_JOB_STATUS_RUNNING})
	if h.f.Hash() != before {
		t.Errorf("same-status command changed the state")
	}
	// Same status with restarts: counted (a region restart keeps the job RUNNING).
	h.ok(statusT, &pb.SetJobStatusCommand{JobId: id, Status: pb.JobStatus_JOB_STATUS_RUNNING, AddRestarts: 1})
	if rec := h.job(id); rec.Restarts != 1 || len(rec.History) != 2 {
		t.Errorf("restarts %d history %d", rec.Restarts, len(rec.History))
	}

	h.ok(statusT, &pb.SetJobStatusCommand{JobId: id, Status: pb.JobStatus_JOB_STATUS_FAILING, Cause: "boom", Timestamp: 3000})
	h.ok(statusT, &pb.SetJobStatusCommand{JobId: id, Status: pb.JobStatus_JOB_STATUS_RESTARTING, AddRestarts: 2})
	rec = h.job(id)
	if rec.FailureCause != "boom" || rec.Restarts != 3 || rec.History[2].Cause != "boom" || rec.History[2].Timestamp != 3000 {
		t.Errorf("failing: cause %q restarts %d history %v", rec.FailureCause, rec.Restarts, rec.History)
	}
	h.setStatus(id, pb.JobStatus_JOB_STATUS_FAILED)
	h.fails(statusT, &pb.SetJobStatusCommand{JobId: id, Status: pb.JobStatus_JOB_STATUS_RUNNING}, graph.ErrIllegalTransition)
}

func TestCancelJob(t *testing.T) {
	h := newHarness(t)
	idle, busy := jobIDN(0), jobIDN(1)
	h.submit(streamingJob(idle, 1, 1))
	h.submit(streamingJob(busy, 2, 2))
	h.fails(cancelT, &pb.CancelJobCommand{JobId: "nope"}, ErrUnknownJob)

	// No attempts: straight to CANCELED through CANCELLING.
	h.ok(cancelT, &pb.CancelJobCommand{JobId: idle, Timestamp: 5000})
	rec := h.job(idle)
	if rec.Status != pb.JobStatus_JOB_STATUS_CANCELED || len(rec.History) != 3 ||
		rec.History[1].Status != pb.JobStatus_JOB_STATUS_CANCELLING || rec.History[2].Timestamp != 5000 {
		t.Errorf("idle cancel: %v %v", rec.Status, rec.History)
	}
	h.fails(cancelT, &pb.CancelJobCommand{JobId: idle}, ErrJobTerminal)

	h.setStatus(busy, pb.JobStatus_JOB_STATUS_RUNNING)
	h.attemptAll(busy, 0)
	h.moveAll(busy, pb.ExecutionState_EXECUTION_STATE_DEPLOYING)
	src0 := attemptID(busy, "src", 0, 0)
	h.ok(updateT, &pb.UpdateExecutionStatesCommand{Updates: []*pb.ExecutionStateUpdate{
		{JobId: busy, AttemptId: src0, State: pb.ExecutionState_EXECUTION_STATE_FINISHED},
	}})
	h.ok(cancelT, &pb.CancelJobCommand{JobId: busy, Timestamp: 6000})
	rec = h.job(busy)
	if rec.Status != pb.JobStatus_JOB_STATUS_CANCELLING {
		t.Fatalf("busy status = %v", rec.Status)
	}
	counts := graph.CountByState(rec.ExecutionGraph)
	if counts[pb.ExecutionState_EXECUTION_STATE_CANCELING] != 5 || counts[pb.ExecutionState_EXECUTION_STATE_FINISHED] != 1 {
		t.Errorf("counts after cancel: %v", counts)
	}
	// Cancelling again is accepted and changes nothing but the modify index.
	h.ok(cancelT, &pb.CancelJobCommand{JobId: busy, Timestamp: 6001})
	if c := graph.CountByState(h.job(busy).ExecutionGraph); c[pb.ExecutionState_EXECUTION_STATE_CANCELING] != 5 {
		t.Errorf("second cancel: %v", c)
	}
	// A SUSPENDED job cannot be cancelled.
	sus := jobIDN(2)
	h.submit(streamingJob(sus, 1, 1))
	h.setStatus(sus, pb.JobStatus_JOB_STATUS_SUSPENDED)
	h.fails(cancelT, &pb.CancelJobCommand{JobId: sus}, graph.ErrIllegalTransition)
}

// TestFailedWhileCancelingCompletesTheCancel: a task that fails while it is being cancelled
// (its producer was cancelled first) ends CANCELED, as in Flink.
func TestFailedWhileCancelingCompletesTheCancel(t *testing.T) {
	h := newHarness(t)
	id := jobIDN(7)
	h.submit(streamingJob(id, 1, 1))
	h.setStatus(id, pb.JobStatus_JOB_STATUS_RUNNING)
	h.attemptAll(id, 0)
	h.moveAll(id, pb.ExecutionState_EXECUTION_STATE_DEPLOYING)
	h.moveAll(id, pb.ExecutionState_EXECUTION_STATE_RUNNING)
	h.ok(cancelT, &pb.CancelJobCommand{JobId: id, Timestamp: 7000})
	h.moveAll(id, pb.ExecutionState_EXECUTION_STATE_FAILED)
	c := graph.CountByState(h.job(id).ExecutionGraph)
	if n := len(graph.AllExecutions(h.job(id).ExecutionGraph)); c[pb.ExecutionState_EXECUTION_STATE_CANCELED] != n || c[pb.ExecutionState_EXECUTION_STATE_FAILED] != 0 {
		t.Fatalf("states after FAILED reports during cancel: %v", c)
	}
	// Outside a cancellation FAILED stays FAILED.
	other := jobIDN(8)
	h.submit(streamingJob(other, 1, 1))
	h.setStatus(other, pb.JobStatus_JOB_STATUS_RUNNING)
	h.attemptAll(other, 0)
	h.moveAll(other, pb.ExecutionState_EXECUTION_STATE_DEPLOYING)
	h.moveAll(other, pb.ExecutionState_EXECUTION_STATE_FAILED)
	if c := graph.CountByState(h.job(other).ExecutionGraph); c[pb.ExecutionState_EXECUTION_STATE_FAILED] != len(graph.AllExecutions(h.job(other).ExecutionGraph)) {
		t.Fatalf("states after FAILED reports: %v", c)
	}
}
