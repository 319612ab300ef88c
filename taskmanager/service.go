package taskmanager

import (
	"context"

	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/dataplane"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// controlService is the TaskManagerService the leader calls. Every call passes admit first
// (stale epoch, validation, unannounced epoch: refused, nothing changes), then fence.accept in
// the critical section of its effect; every refusal goes out through Status (errors.go).
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
	if err := tm.fence.admit(ctx, req.GetEpoch(), "SubmitTask", invalid, false); err != nil {
		return nil, Status(err)
	}
	tm.mu.Lock()
	defer tm.mu.Unlock()
	seen, err := tm.fence.accept(req.GetEpoch(), "SubmitTask")
	if err != nil {
		return nil, Status(err)
	}
	if tm.stopping.Load() {
		if _, ok := tm.table.tasks[d.GetAttemptId()]; !ok {
			return nil, Status(ErrStopped)
		}
	}
	switch redelivered, err := tm.table.admitLocked(d); {
	case err != nil:
		return nil, Status(err)
	case redelivered:
		return &pb.SubmitTaskResponse{}, nil // idempotent redelivery
	}
	t := tm.newTask(proto.Clone(d).(*pb.TaskDeploymentDescriptor), nil)
	tm.table.placeLocked(t, req.GetEpoch(), seen)
	go tm.runTask(t)
	tm.log.Info("task submitted", "job", d.GetJobId(), "vertex", d.GetVertexId(), "subtask", d.GetSubtaskIndex(),
		"attempt", d.GetAttemptId(), "attempt_number", d.GetAttemptNumber(), "slot", d.GetSlotIndex())
	return &pb.SubmitTaskResponse{}, nil
}

func (s *controlService) CancelTask(ctx context.Context, req *pb.CancelTaskRequest) (*pb.CancelTaskResponse, error) {
	tm := s.tm
	if err := tm.fence.admit(ctx, req.GetEpoch(), "CancelTask", validateCancel(req), false); err != nil {
		return nil, Status(err)
	}
	tm.mu.Lock()
	if _, err := tm.fence.accept(req.GetEpoch(), "CancelTask"); err != nil {
		tm.mu.Unlock()
		return nil, Status(err)
	}
	t := tm.table.tasks[req.GetAttemptId()]
	if t == nil {
		// Nothing to stop: an attempt this TM never ran (or forgot) is as good as cancelled.
		// The tombstone keeps a SubmitTask that this cancel overtook from starting it.
		tm.table.cancelled.add(req.GetAttemptId())
		tm.mu.Unlock()
		return &pb.CancelTaskResponse{State: pb.ExecutionState_EXECUTION_STATE_CANCELED}, nil
	}
	if j := t.tdd.GetJobId(); j != req.GetJobId() {
		tm.mu.Unlock()
		return nil, Status(errorf(ErrUnknownAttempt, "attempt %s on %s belongs to job %s, not %s", req.GetAttemptId(), tm.cfg.ID, j, req.GetJobId()))
	}
	if isTerminal(t.state) {
		st := t.state
		tm.mu.Unlock()
		tm.dp.ReleaseAttempt(t.attempt()) // a cancelled producer's BLOCKING data is not needed
		return &pb.CancelTaskResponse{State: st}, nil
	}
	t.cancelWith("cancelled by the leader")
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
	if err := tm.fence.admit(ctx, req.GetEpoch(), "UpdatePartitionInfo", validatePartitionInfo(req), false); err != nil {
		return nil, Status(err)
	}
	tm.mu.Lock()
	if _, err := tm.fence.accept(req.GetEpoch(), "UpdatePartitionInfo"); err != nil {
		tm.mu.Unlock()
		return nil, Status(err)
	}
	t := tm.table.tasks[req.GetConsumerAttemptId()]
	tm.mu.Unlock()
	if t == nil {
		return nil, Status(errorf(ErrUnknownAttempt, "attempt %s is not on %s", req.GetConsumerAttemptId(), tm.cfg.ID))
	}
	if j := t.tdd.GetJobId(); j != req.GetJobId() {
		return nil, Status(errorf(ErrUnknownAttempt, "attempt %s on %s belongs to job %s, not %s", req.GetConsumerAttemptId(), tm.cfg.ID, j, req.GetJobId()))
	}
	chs := make([]*dataplane.InputChannel, len(req.GetChannels()))
	for i, c := range req.GetChannels() {
		if chs[i] = dataplane.FindChannel(t.gates, c.GetResultId(), c.GetPartitionIndex()); chs[i] == nil {
			return nil, Status(errorf(ErrInvalidRequest, "attempt %s has no input channel for result %q partition %d",
				req.GetConsumerAttemptId(), c.GetResultId(), c.GetPartitionIndex()))
		}
	}
	for i, c := range req.GetChannels() {
		chs[i].Update(c)
	}
	return &pb.UpdatePartitionInfoResponse{}, nil
}

func (s *controlService) RequestReport(req *pb.RequestReportRequest, stream pb.TaskManagerService_RequestReportServer) error {
	tm := s.tm
	if err := tm.fence.admit(stream.Context(), req.GetEpoch(), "RequestReport", validateReport(req), true); err != nil {
		return Status(err)
	}
	tm.mu.Lock()
	if _, err := tm.fence.accept(req.GetEpoch(), "RequestReport"); err != nil {
		tm.mu.Unlock()
		return Status(err)
	}
	newLeader := tm.link.announced(req.GetLeaderGrpcAddress(), req.GetLeaderId(), req.GetEpoch())
	execs := make([]*pb.ExecutionReport, 0, len(tm.table.tasks))
	for _, t := range sortedTasks(tm.table.tasks) {
		execs = append(execs, tm.executionReportLocked(t))
	}
	base := &pb.TaskManagerReport{TmId: tm.cfg.ID, GrpcAddress: tm.cfg.AdvertiseGRPC, DataAddress: tm.cfg.AdvertiseData, Slots: int32(tm.cfg.Slots),
		Incarnation: tm.cfg.Incarnation}
	tm.mu.Unlock()
	if newLeader {
		tm.link.wake()
		tm.outbox.wake()
	}
	size := int(req.GetChunkSize())
	if size <= 0 {
		size = tm.cfg.ReportChunkSize
	}
	for _, c := range AnswerReport(base, execs, req, size, reportChunkBytes(tm.cfg, req.GetMaxChunkBytes())) {
		if err := stream.Send(c); err != nil {
			return err
		}
	}
	return nil
}

func (s *controlService) AcknowledgeTerminal(ctx context.Context, req *pb.AcknowledgeTerminalRequest) (*pb.AcknowledgeTerminalResponse, error) {
	tm := s.tm
	if err := tm.fence.admit(ctx, req.GetEpoch(), "AcknowledgeTerminal", validateAck(req), false); err != nil {
		return nil, Status(err)
	}
	tm.mu.Lock()
	defer tm.mu.Unlock()
	if _, err := tm.fence.accept(req.GetEpoch(), "AcknowledgeTerminal"); err != nil {
		return nil, Status(err)
	}
	for _, id := range req.GetAttemptIds() {
		if t := tm.table.tasks[id]; t != nil && isTerminal(t.state) {
			tm.table.dropLocked(id)
		}
	}
	return &pb.AcknowledgeTerminalResponse{}, nil
}
