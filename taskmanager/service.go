package taskmanager

import (
	"context"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/dataplane"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// controlService is the TaskManagerService the leader calls. Every call passes admit first
// (stale epoch, validation, unannounced epoch: refused, nothing changes), then fenceLocked in
// the critical section of its effect.
type controlService struct {
	pb.UnimplementedTaskManagerServiceServer
	tm *TaskManager
}

func (s *controlService) SubmitTask(ctx context.Context, req *pb.SubmitTaskRequest) (*pb.SubmitTaskResponse, error) {
	tm := s.tm
	d := req.GetTask()
	invalid := validateTDD(d, tm.cfg.Slots, nil)
	if invalid == nil {
		invalid = validateSinkTarget(d, tm.cfg.WorkDir)
	}
	if err := tm.admit(ctx, req.GetEpoch(), "SubmitTask", invalid, false); err != nil {
		return nil, err
	}
	tm.mu.Lock()
	defer tm.mu.Unlock()
	if err := tm.fenceLocked(req.GetEpoch(), "SubmitTask"); err != nil {
		return nil, err
	}
	if tm.stopping.Load() {
		if _, ok := tm.tasks[d.GetAttemptId()]; !ok {
			return nil, status.Error(codes.Unavailable, ErrStopped.Error())
		}
	}
	switch code, msg := tm.admitLocked(d); {
	case code != codes.OK:
		return nil, status.Error(code, msg)
	case msg != "":
		return &pb.SubmitTaskResponse{}, nil // idempotent redelivery
	}
	tm.startTaskLocked(proto.Clone(d).(*pb.TaskDeploymentDescriptor), req.GetEpoch())
	tm.log.Info("task submitted", "job", d.GetJobId(), "vertex", d.GetVertexId(), "subtask", d.GetSubtaskIndex(),
		"attempt", d.GetAttemptId(), "attempt_number", d.GetAttemptNumber(), "slot", d.GetSlotIndex())
	return &pb.SubmitTaskResponse{}, nil
}

// newerAttemptLocked returns a task of the same ExecutionVertex with an attempt number at or
// above d's (a deployment from an outdated view of the graph), or nil.
func (tm *TaskManager) newerAttemptLocked(d *pb.TaskDeploymentDescriptor) *task {
	for _, o := range tm.bySubtask[subtaskOf(d)] {
		if o.tdd.GetAttemptNumber() >= d.GetAttemptNumber() {
			return o
		}
	}
	return nil
}

// subtaskKey is the subtask a task is an attempt of.
type subtaskKey struct {
	job, vertex string
	subtask     int32
}

func subtaskOf(d *pb.TaskDeploymentDescriptor) subtaskKey {
	return subtaskKey{d.GetJobId(), d.GetVertexId(), d.GetSubtaskIndex()}
}

// addTaskLocked lists a task (tasks, bySubtask).
func (tm *TaskManager) addTaskLocked(t *task) {
	tm.tasks[t.attempt()] = t
	k := subtaskOf(t.tdd)
	tm.bySubtask[k] = append(tm.bySubtask[k], t)
}

// dropTaskLocked forgets the task of an attempt id.
func (tm *TaskManager) dropTaskLocked(id string) {
	t := tm.tasks[id]
	if t == nil {
		return
	}
	delete(tm.tasks, id)
	k := subtaskOf(t.tdd)
	ts := slices.DeleteFunc(tm.bySubtask[k], func(o *task) bool { return o == t })
	if len(ts) == 0 {
		delete(tm.bySubtask, k)
	} else {
		tm.bySubtask[k] = ts
	}
}

func (s *controlService) CancelTask(ctx context.Context, req *pb.CancelTaskRequest) (*pb.CancelTaskResponse, error) {
	tm := s.tm
	if err := tm.admit(ctx, req.GetEpoch(), "CancelTask", validateCancel(req), false); err != nil {
		return nil, err
	}
	tm.mu.Lock()
	if err := tm.fenceLocked(req.GetEpoch(), "CancelTask"); err != nil {
		tm.mu.Unlock()
		return nil, err
	}
	t := tm.tasks[req.GetAttemptId()]
	if t == nil {
		// Nothing to stop: an attempt this TM never ran (or forgot) is as good as cancelled.
		// The tombstone keeps a SubmitTask that this cancel overtook from starting it.
		tm.cancelledUnseen.add(req.GetAttemptId())
		tm.mu.Unlock()
		return &pb.CancelTaskResponse{State: pb.ExecutionState_EXECUTION_STATE_CANCELED}, nil
	}
	if j := t.tdd.GetJobId(); j != req.GetJobId() {
		tm.mu.Unlock()
		return nil, status.Errorf(codes.NotFound, "attempt %s on %s belongs to job %s, not %s", req.GetAttemptId(), tm.cfg.ID, j, req.GetJobId())
	}
	if isTerminal(t.state) {
		st := t.state
		tm.mu.Unlock()
		tm.dp.ReleaseAttempt(t.attempt()) // a cancelled producer's BLOCKING data is not needed
		return &pb.CancelTaskResponse{State: st}, nil
	}
	tm.cancelLocked(t, "cancelled by the leader")
	tm.mu.Unlock()

	t.wait(tm.cfg.CancelWait)
	tm.mu.Lock()
	st := t.state
	tm.mu.Unlock()
	if !isTerminal(st) {
		st = pb.ExecutionState_EXECUTION_STATE_CANCELING
	}
	return &pb.CancelTaskResponse{State: st}, nil
}

func (s *controlService) UpdatePartitionInfo(ctx context.Context, req *pb.UpdatePartitionInfoRequest) (*pb.UpdatePartitionInfoResponse, error) {
	tm := s.tm
	if err := tm.admit(ctx, req.GetEpoch(), "UpdatePartitionInfo", validatePartitionInfo(req), false); err != nil {
		return nil, err
	}
	tm.mu.Lock()
	if err := tm.fenceLocked(req.GetEpoch(), "UpdatePartitionInfo"); err != nil {
		tm.mu.Unlock()
		return nil, err
	}
	t := tm.tasks[req.GetConsumerAttemptId()]
	tm.mu.Unlock()
	if t == nil {
		return nil, status.Errorf(codes.NotFound, "attempt %s is not on %s", req.GetConsumerAttemptId(), tm.cfg.ID)
	}
	if j := t.tdd.GetJobId(); j != req.GetJobId() {
		return nil, status.Errorf(codes.NotFound, "attempt %s on %s belongs to job %s, not %s", req.GetConsumerAttemptId(), tm.cfg.ID, j, req.GetJobId())
	}
	chs := make([]*dataplane.InputChannel, len(req.GetChannels()))
	for i, c := range req.GetChannels() {
		if chs[i] = dataplane.FindChannel(t.gates, c.GetResultId(), c.GetPartitionIndex()); chs[i] == nil {
			return nil, status.Errorf(codes.InvalidArgument, "attempt %s has no input channel for result %q partition %d",
				req.GetConsumerAttemptId(), c.GetResultId(), c.GetPartitionIndex())
		}
	}
	for i, c := range req.GetChannels() {
		chs[i].Update(c)
	}
	return &pb.UpdatePartitionInfoResponse{}, nil
}

func (s *controlService) RequestReport(req *pb.RequestReportRequest, stream pb.TaskManagerService_RequestReportServer) error {
	tm := s.tm
	if err := tm.admit(stream.Context(), req.GetEpoch(), "RequestReport", validateReport(req), true); err != nil {
		return err
	}
	tm.mu.Lock()
	if err := tm.fenceLocked(req.GetEpoch(), "RequestReport"); err != nil {
		tm.mu.Unlock()
		return err
	}
	newLeader := false
	if addr := req.GetLeaderGrpcAddress(); addr != "" && addr != tm.leaderAddr {
		tm.log.Info("leader announced itself", "leader", addr, "leader_id", req.GetLeaderId(), "epoch", req.GetEpoch())
		tm.leaderAddr, tm.leaderID = addr, req.GetLeaderId()
		tm.registered, tm.needResolve = false, false
		newLeader = true
	}
	execs := make([]*pb.ExecutionReport, 0, len(tm.tasks))
	for _, t := range sortedTasks(tm.tasks) {
		execs = append(execs, tm.executionReportLocked(t))
	}
	base := &pb.TaskManagerReport{TmId: tm.cfg.ID, GrpcAddress: tm.cfg.AdvertiseGRPC, DataAddress: tm.cfg.AdvertiseData, Slots: int32(tm.cfg.Slots),
		Incarnation: tm.cfg.Incarnation}
	tm.mu.Unlock()
	if newLeader {
		tm.wake()
		tm.outbox.wake()
	}
	size := int(req.GetChunkSize())
	if size <= 0 {
		size = tm.cfg.ReportChunkSize
	}
	for _, c := range AnswerReport(base, execs, req, size, tm.reportChunkBytes(req.GetMaxChunkBytes())) {
		if err := stream.Send(c); err != nil {
			return err
		}
	}
	return nil
}

func (s *controlService) AcknowledgeTerminal(ctx context.Context, req *pb.AcknowledgeTerminalRequest) (*pb.AcknowledgeTerminalResponse, error) {
	tm := s.tm
	if err := tm.admit(ctx, req.GetEpoch(), "AcknowledgeTerminal", validateAck(req), false); err != nil {
		return nil, err
	}
	tm.mu.Lock()
	defer tm.mu.Unlock()
	if err := tm.fenceLocked(req.GetEpoch(), "AcknowledgeTerminal"); err != nil {
		return nil, err
	}
	for _, id := range req.GetAttemptIds() {
		if t := tm.tasks[id]; t != nil && isTerminal(t.state) {
			tm.dropTaskLocked(id)
		}
	}
	return &pb.AcknowledgeTerminalResponse{}, nil
}
