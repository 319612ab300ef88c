package jmserver

import (
	"context"

	"github.com/jmcluster/jmcluster/jobmaster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// JobMasterService implements pb.JobMasterServiceServer (TaskManager -> JobMaster) on every
// replica. The policy table keeps every call to the established leader (NOT_LEADER with the
// leader's address elsewhere) and the gated ones out while it reconciles (RECONCILING);
// registration and heartbeats pass the closed gate. The work is the JobMaster's (tmcalls.go).
type JobMasterService struct {
	pb.UnimplementedJobMasterServiceServer
	jm *jobmaster.JobMaster
}

// NewJobMasterService returns the TaskManager-facing service of jm.
func NewJobMasterService(jm *jobmaster.JobMaster) *JobMasterService {
	return &JobMasterService{jm: jm}
}

func (s *JobMasterService) RegisterTaskManager(ctx context.Context, req *pb.RegisterTaskManagerRequest) (*pb.RegisterTaskManagerResponse, error) {
	return s.jm.RegisterTaskManager(ctx, req)
}

func (s *JobMasterService) Heartbeat(ctx context.Context, req *pb.HeartbeatRequest) (*pb.HeartbeatResponse, error) {
	return s.jm.Heartbeat(ctx, req)
}

func (s *JobMasterService) UpdateTaskExecutionState(ctx context.Context, req *pb.UpdateTaskExecutionStateRequest) (*pb.UpdateTaskExecutionStateResponse, error) {
	return s.jm.UpdateTaskExecutionState(ctx, req)
}

func (s *JobMasterService) ScheduleOrUpdateConsumers(ctx context.Context, req *pb.ScheduleOrUpdateConsumersRequest) (*pb.ScheduleOrUpdateConsumersResponse, error) {
	return s.jm.ScheduleOrUpdateConsumers(ctx, req)
}

func (s *JobMasterService) RequestPartitionState(ctx context.Context, req *pb.RequestPartitionStateRequest) (*pb.RequestPartitionStateResponse, error) {
	return s.jm.RequestPartitionState(ctx, req)
}

func (s *JobMasterService) AcknowledgeCheckpoint(ctx context.Context, req *pb.AcknowledgeCheckpointRequest) (*pb.AcknowledgeCheckpointResponse, error) {
	return s.jm.AcknowledgeCheckpoint(ctx, req)
}

func (s *JobMasterService) DeclineCheckpoint(ctx context.Context, req *pb.DeclineCheckpointRequest) (*pb.DeclineCheckpointResponse, error) {
	return s.jm.DeclineCheckpoint(ctx, req)
}
