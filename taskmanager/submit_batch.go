package taskmanager

import (
	"context"
	"errors"
	"fmt"

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
		return nil, Status(errorf(ErrInvalidRequest, "submit tasks: tasks is empty"))
	}
	results := make([]*pb.SubmitTaskResult, len(tasks))
	prepared := make([]*task, len(tasks))
	var problems []string
	if n := expandedChannels(req); n > maxSubmitChannels {
		// Shared lists let a small request name many channels (a list of a hundred thousand
		// and thousands of gates referring to it): what the TM builds for it is bounded.
		return nil, Status(errorf(ErrInvalidRequest, "submit tasks: the tasks read %d input channels in all, over the limit of %d per request (maxSubmitChannels)", n, maxSubmitChannels))
	}
	shared := checkSharedLists(req.GetSharedChannels())
	for i, d := range tasks {
		results[i] = &pb.SubmitTaskResult{AttemptId: d.GetAttemptId()}
		if err := validateTDD(d, tm.cfg.Slots, shared); err != nil {
			results[i].Code, results[i].Message = int32(codeOf(invalidRequest(err))), err.Error()
			problems = append(problems, fmt.Sprintf("tasks[%d]: %v", i, err))
			continue
		}
		prepared[i] = tm.newTask(d, shared)
	}
	if len(problems) == len(tasks) {
		// Nothing in the batch is deployable: refuse it whole, changing nothing (no epoch
		// adopted, no leader contact).
		return nil, Status(errorf(ErrInvalidRequest, "submit tasks: %s", logsum.Joined(problems, "; ")))
	}

	// The epoch rule of every call (epoch.go): a higher epoch only when a JobMaster names it.
	if err := tm.fence.admit(ctx, req.GetEpoch(), "SubmitTasks", nil, false); err != nil {
		cancelPrepared(prepared)
		return nil, Status(err)
	}
	tm.mu.Lock()
	seen, err := tm.fence.accept(req.GetEpoch(), "SubmitTasks")
	if err != nil {
		tm.mu.Unlock()
		cancelPrepared(prepared)
		return nil, Status(err)
	}
	if tm.stopping.Load() {
		tm.mu.Unlock()
		cancelPrepared(prepared)
		return nil, Status(ErrStopped)
	}
	accepted := 0
	var started []*pb.TaskDeploymentDescriptor
	var launch []*task
	for i, t := range prepared {
		if t == nil {
			continue
		}
		redelivered, err := tm.table.admitLocked(t.tdd)
		results[i].Code = int32(codeOf(err))
		switch {
		case err != nil:
			results[i].Message = err.Error()
		case redelivered:
			results[i].Message = alreadySubmitted
		}
		if errors.Is(err, ErrSlotBusy) {
			o := tm.table.busyWithLocked(t.tdd)
			results[i].BusyWithJobId, results[i].BusyWithAttemptId = o.tdd.GetJobId(), o.attempt()
		}
		if err != nil || redelivered {
			t.cancel()
			if redelivered {
				accepted++ // a redelivered attempt: already there
			}
			continue
		}
		tm.table.placeLocked(t, req.GetEpoch(), seen)
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

// alreadySubmitted is the result message of a redelivered attempt (accepted: it is there).
const alreadySubmitted = "already submitted"

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
