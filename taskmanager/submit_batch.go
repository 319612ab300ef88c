package taskmanager

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/internal/logsum"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// SubmitTasks deploys a batch of tasks. Descriptors are validated and their tasks prepared
// before the TM's lock is taken; under the lock the epoch is checked once for the batch and
// each task is accepted on its own (the rules of SubmitTask: a redelivered attempt is OK, a
// stale attempt number FAILED_PRECONDITION, a busy slot RESOURCE_EXHAUSTED). Accepted tasks are
// placed in their slots and their goroutines started; the answer does not wait for any of
// them to run, so the TM's own start-up work cannot hold the leader's call past its deadline.
func (s *controlService) SubmitTasks(ctx context.Context, req *pb.SubmitTasksRequest) (*pb.SubmitTasksResponse, error) {
	tm := s.tm
	tasks := req.GetTasks()
	if len(tasks) == 0 {
		return nil, status.Error(codes.InvalidArgument, "submit tasks: tasks is empty")
	}
	results := make([]*pb.SubmitTaskResult, len(tasks))
	prepared := make([]*task, len(tasks))
	var problems []string
	if n := expandedChannels(req); n > maxSubmitChannels {
		// Shared lists let a small request name many channels (a list of a hundred thousand
		// and thousands of gates referring to it): what the TM builds for it is bounded.
		return nil, status.Errorf(codes.InvalidArgument, "submit tasks: the tasks read %d input channels in all, over the limit of %d per request (maxSubmitChannels)", n, maxSubmitChannels)
	}
	shared := checkSharedLists(req.GetSharedChannels())
	for i, d := range tasks {
		results[i] = &pb.SubmitTaskResult{AttemptId: d.GetAttemptId()}
		if err := validateTDD(d, tm.cfg.Slots, shared); err != nil {
			results[i].Code, results[i].Message = int32(codes.InvalidArgument), err.Error()
			problems = append(problems, fmt.Sprintf("tasks[%d]: %v", i, err))
			continue
		}
		prepared[i] = tm.newTask(d, shared)
	}
	if len(problems) == len(tasks) {
		// Nothing in the batch is deployable: refuse it whole, changing nothing (no epoch
		// adopted, no leader contact).
		return nil, status.Error(codes.InvalidArgument, "submit tasks: "+logsum.Joined(problems, "; "))
	}

	// The epoch rule of every call (epoch.go): a higher epoch only when a JobMaster names it.
	if err := tm.admit(ctx, req.GetEpoch(), "SubmitTasks", nil, false); err != nil {
		cancelPrepared(prepared)
		return nil, err
	}
	tm.mu.Lock()
	if err := tm.fenceLocked(req.GetEpoch(), "SubmitTasks"); err != nil {
		tm.mu.Unlock()
		cancelPrepared(prepared)
		return nil, err
	}
	if tm.stopping.Load() {
		tm.mu.Unlock()
		cancelPrepared(prepared)
		return nil, status.Error(codes.Unavailable, ErrStopped.Error())
	}
	accepted := 0
	var started []*pb.TaskDeploymentDescriptor
	var launch []*task
	for i, t := range prepared {
		if t == nil {
			continue
		}
		code, msg := tm.admitLocked(t.tdd)
		results[i].Code, results[i].Message = int32(code), msg
		if code == codes.ResourceExhausted {
			results[i].BusyWithJobId, results[i].BusyWithAttemptId = tm.busyWithLocked(t.tdd)
		}
		if code != codes.OK || msg != "" {
			t.cancel()
			if code == codes.OK {
				accepted++ // a redelivered attempt: already there
			}
			continue
		}
		tm.placeLocked(t, req.GetEpoch())
		launch = append(launch, t)
		started = append(started, t.tdd)
		accepted++
	}
	gate := newStartGate(len(launch))
	for _, t := range launch {
		t.batch = gate
		go tm.runTask(t)
	}
	tm.mu.Unlock()
	if len(started) > 0 {
		d := started[0]
		tm.log.Info("tasks submitted", "job", d.GetJobId(), "tasks", len(started), "accepted", accepted, "batch", len(tasks),
			"first", fmt.Sprintf("%s[%d]", d.GetVertexId(), d.GetSubtaskIndex()))
	}
	return &pb.SubmitTasksResponse{Results: results}, nil
}

// admitLocked decides whether a validated descriptor may start now: codes.OK with an empty
// message to start it, codes.OK with a message for a redelivered attempt, or the refusal.
func (tm *TaskManager) admitLocked(d *pb.TaskDeploymentDescriptor) (codes.Code, string) {
	if _, ok := tm.tasks[d.GetAttemptId()]; ok {
		return codes.OK, "already submitted"
	}
	if tm.cancelledUnseen.has(d.GetAttemptId()) {
		return codes.FailedPrecondition, fmt.Sprintf("attempt %s of %s[%d] was cancelled by the leader before it reached %s: not starting it",
			d.GetAttemptId(), d.GetVertexId(), d.GetSubtaskIndex(), tm.cfg.ID)
	}
	if d.GetCheckpointed() && tm.ckpt == nil {
		return codes.FailedPrecondition, fmt.Sprintf("job %s is checkpointed, but %s has no checkpoint storage (start it with --checkpoint-dir, the directory every JobMaster and TaskManager shares): not starting %s[%d]",
			d.GetJobId(), tm.cfg.ID, d.GetVertexId(), d.GetSubtaskIndex())
	}
	if o := tm.newerAttemptLocked(d); o != nil {
		return codes.FailedPrecondition, fmt.Sprintf("stale attempt number %d of %s[%d]: attempt %s (number %d, %s) is already on %s",
			d.GetAttemptNumber(), d.GetVertexId(), d.GetSubtaskIndex(), o.attempt(), o.tdd.GetAttemptNumber(), o.state, tm.cfg.ID)
	}
	// Slot sharing: a slot runs tasks of one job, at most one subtask of each vertex.
	for _, o := range tm.slots[d.GetSlotIndex()] {
		if o.tdd.GetJobId() != d.GetJobId() || o.tdd.GetVertexId() == d.GetVertexId() {
			return codes.ResourceExhausted, fmt.Sprintf("slot %d of %s is busy with attempt %s (job %s, %s/%d, %s)",
				d.GetSlotIndex(), tm.cfg.ID, o.attempt(), o.tdd.GetJobId(), o.tdd.GetVertexId(), o.tdd.GetSubtaskIndex(), o.state)
		}
	}
	return codes.OK, ""
}

// busyWithLocked names the task that keeps d out of its slot.
func (tm *TaskManager) busyWithLocked(d *pb.TaskDeploymentDescriptor) (jobID, attemptID string) {
	for _, o := range tm.slots[d.GetSlotIndex()] {
		if o.tdd.GetJobId() != d.GetJobId() || o.tdd.GetVertexId() == d.GetVertexId() {
			return o.tdd.GetJobId(), o.attempt()
		}
	}
	return "", ""
}

// cancelPrepared releases the contexts of tasks that were prepared but never launched.
func cancelPrepared(ts []*task) {
	for _, t := range ts {
		if t != nil {
			t.cancel()
		}
	}
}

// maxSubmitChannels bounds the input channels the tasks of one SubmitTasks request read, shared
// lists counted once per gate that refers to them: four times the channels of a 512 x 512 job,
// which the leader sends in two batches to the TM holding most of it.
const maxSubmitChannels = 1 << 20

// expandedChannels counts the input channels the tasks of req read (a reference out of range
// counts nothing: validation refuses it).
func expandedChannels(req *pb.SubmitTasksRequest) int {
	lists := req.GetSharedChannels()
	n := 0
	for _, d := range req.GetTasks() {
		for _, g := range d.GetInputs() {
			if r := g.GetSharedChannels(); r != 0 && int(r) <= len(lists) {
				n += len(lists[r-1].GetChannels())
			}
			n += len(g.GetChannels())
		}
	}
	return n
}
