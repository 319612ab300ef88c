package jobmaster

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// Service implements pb.JobMasterServiceServer (TM -> JM) on every JM replica. Followers
// answer NOT_LEADER with the leader's address; the leader answers RECONCILING while its gate
// is closed, except for registration and heartbeats, which reconciliation needs.
type Service struct {
	pb.UnimplementedJobMasterServiceServer
	jm *JobMaster
}

// NewService returns the TM-facing gRPC service of jm.
func NewService(jm *JobMaster) *Service { return &Service{jm: jm} }

// gateErr maps the JobMaster's leadership state to the protocol's statuses.
func (s *Service) gateErr(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, ErrReconciling):
		return transport.ReconcilingError(s.jm.cfg.RetryAfter)
	case errors.Is(err, ErrNotLeader):
		hint := ""
		if !s.jm.raft.IsLeader() {
			c, cancel := context.WithTimeout(ctx, s.jm.cfg.RetryAfter)
			_, hint, _ = s.jm.raft.LeaderGRPCAddr(c)
			cancel()
		}
		return transport.NotLeaderError(hint)
	}
	return err
}

func (s *Service) RegisterTaskManager(ctx context.Context, req *pb.RegisterTaskManagerRequest) (*pb.RegisterTaskManagerResponse, error) {
	t, err := s.jm.currentTerm()
	if err != nil {
		return nil, s.gateErr(ctx, err)
	}
	if req.TmId == "" || req.GrpcAddress == "" || req.DataAddress == "" {
		return nil, status.Error(codes.InvalidArgument, "register: tm_id, grpc_address and data_address are required")
	}
	if req.Slots < 1 || req.Slots > 1024 {
		return nil, status.Errorf(codes.InvalidArgument, "register: slots must be in [1, 1024], got %d", req.Slots)
	}
	if req.EpochSeen > t.epoch {
		return nil, transport.StaleEpochError(t.epoch, req.EpochSeen)
	}
	s.jm.tms.Upsert(req.TmId, req.GrpcAddress, req.DataAddress, req.Slots, true)
	s.jm.log.Info("task manager registered", "tm", req.TmId, "grpc", req.GrpcAddress, "slots", req.Slots)
	t.kick("")
	return &pb.RegisterTaskManagerResponse{
		Epoch: t.epoch, LeaderId: s.jm.raft.ID(), HeartbeatIntervalMs: s.jm.cfg.HeartbeatInterval.Milliseconds(),
	}, nil
}

func (s *Service) Heartbeat(ctx context.Context, req *pb.HeartbeatRequest) (*pb.HeartbeatResponse, error) {
	t, err := s.jm.currentTerm()
	if err != nil {
		return nil, s.gateErr(ctx, err)
	}
	if req.TmId == "" {
		return nil, status.Error(codes.InvalidArgument, "heartbeat: tm_id is required")
	}
	if req.EpochSeen > t.epoch {
		return nil, transport.StaleEpochError(t.epoch, req.EpochSeen)
	}
	if !s.jm.tms.Touch(req.TmId) {
		return &pb.HeartbeatResponse{Epoch: t.epoch, UnknownTaskManager: true}, nil
	}
	if s.jm.gateOpen.Load() {
		t.checkDeployment(req)
	}
	return &pb.HeartbeatResponse{Epoch: t.epoch}, nil
}

// lookup validates that an attempt is the current attempt of a job's ExecutionVertex on the
// calling TM, with clear errors for every way it is not.
func (s *Service) lookup(jobID, attemptID, tmID string) (*pb.ExecutionVertex, error) {
	if jobID == "" || attemptID == "" {
		return nil, status.Error(codes.InvalidArgument, "job_id and attempt_id are required")
	}
	var out *pb.ExecutionVertex
	var err error
	found := s.jm.state.WithJob(jobID, func(rec *pb.JobRecord) {
		if ev := graph.FindAttempt(rec.ExecutionGraph, attemptID); ev != nil {
			if tmID != "" && ev.Current.GetSlot().GetTmId() != tmID {
				err = status.Errorf(codes.PermissionDenied, "attempt %s of %s[%d] is assigned to %s, not %s",
					attemptID, ev.VertexId, ev.SubtaskIndex, ev.Current.GetSlot().GetTmId(), tmID)
				return
			}
			out = proto.Clone(ev).(*pb.ExecutionVertex)
			return
		}
		forEachExecution(rec, func(ev *pb.ExecutionVertex) {
			for _, h := range ev.History {
				if h.AttemptId == attemptID && err == nil {
					err = status.Errorf(codes.FailedPrecondition, "stale attempt %s (number %d) of %s[%d]: the current attempt is number %d",
						attemptID, h.AttemptNumber, ev.VertexId, ev.SubtaskIndex, ev.GetCurrent().GetAttemptNumber())
				}
			}
		})
		if err == nil {
			err = status.Errorf(codes.NotFound, "unknown attempt %s of job %s", attemptID, jobID)
		}
	})
	if !found {
		return nil, status.Errorf(codes.NotFound, "unknown job %s", jobID)
	}
	return out, err
}

func (s *Service) UpdateTaskExecutionState(ctx context.Context, req *pb.UpdateTaskExecutionStateRequest) (*pb.UpdateTaskExecutionStateResponse, error) {
	t, err := s.jm.openTerm()
	if err != nil {
		return nil, s.gateErr(ctx, err)
	}
	if req.State == pb.ExecutionState_EXECUTION_STATE_UNSPECIFIED || pb.ExecutionState_name[int32(req.State)] == "" {
		return nil, status.Errorf(codes.InvalidArgument, "invalid execution state %d", req.State)
	}
	if req.TmId == "" {
		return nil, status.Error(codes.InvalidArgument, "tm_id is required")
	}
	ev, err := s.lookup(req.JobId, req.AttemptId, req.TmId)
	if err != nil {
		return nil, err
	}
	if ev.Current.State == req.State {
		return &pb.UpdateTaskExecutionStateResponse{Accepted: true}, nil // a retried message
	}
	errs := t.batch.commit(ctx, []*pb.ExecutionStateUpdate{{
		JobId: req.JobId, AttemptId: req.AttemptId, State: req.State, FailureCause: req.FailureCause, Timestamp: nowMillis(),
	}})
	if errs[0] == "" {
		return &pb.UpdateTaskExecutionStateResponse{Accepted: true}, nil
	}
	ended := false
	s.jm.state.WithJob(req.JobId, func(rec *pb.JobRecord) {
		cur := graph.FindAttempt(rec.ExecutionGraph, req.AttemptId)
		ended = cur != nil && isTerminal(cur.Current.State)
	})
	if ended {
		// The graph already ended this attempt (e.g. failed it as missing): the TM must stop it.
		return &pb.UpdateTaskExecutionStateResponse{Accepted: false}, nil
	}
	if errors.Is(ctx.Err(), context.Canceled) || !s.jm.Active() {
		return nil, s.gateErr(ctx, ErrNotLeader)
	}
	return nil, status.Errorf(codes.FailedPrecondition, "update %s: %s", req.AttemptId, errs[0])
}

func (s *Service) ScheduleOrUpdateConsumers(ctx context.Context, req *pb.ScheduleOrUpdateConsumersRequest) (*pb.ScheduleOrUpdateConsumersResponse, error) {
	t, err := s.jm.openTerm()
	if err != nil {
		return nil, s.gateErr(ctx, err)
	}
	ev, err := s.lookup(req.JobId, req.ProducerAttemptId, req.TmId)
	if err != nil {
		return nil, err
	}
	if err := checkPartition(s.jm, req.JobId, req.ResultId, ev, req.PartitionIndex); err != nil {
		return nil, err
	}
	t.kick(req.JobId)
	return &pb.ScheduleOrUpdateConsumersResponse{}, nil
}

func (s *Service) RequestPartitionState(ctx context.Context, req *pb.RequestPartitionStateRequest) (*pb.RequestPartitionStateResponse, error) {
	if _, err := s.jm.openTerm(); err != nil {
		return nil, s.gateErr(ctx, err)
	}
	var resp *pb.RequestPartitionStateResponse
	err := status.Errorf(codes.NotFound, "unknown result %s of job %s", req.ResultId, req.JobId)
	if !s.jm.state.WithJob(req.JobId, func(rec *pb.JobRecord) {
		for _, res := range rec.ExecutionGraph.Results {
			if res.ResultId != req.ResultId {
				continue
			}
			if req.PartitionIndex < 0 || int(req.PartitionIndex) >= len(res.Partitions) {
				err = status.Errorf(codes.InvalidArgument, "result %s has %d partitions, not %d", req.ResultId, len(res.Partitions), req.PartitionIndex+1)
				return
			}
			producer := graph.FindVertex(rec.ExecutionGraph, res.ProducerVertexId, req.PartitionIndex)
			resp, err = &pb.RequestPartitionStateResponse{
				CurrentProducerAttemptId: producer.GetCurrent().GetAttemptId(),
				ProducerDataAddress:      producer.GetCurrent().GetTmDataAddress(),
				ProducerState:            producer.GetCurrent().GetState(),
			}, nil
			return
		}
	}) {
		return nil, status.Errorf(codes.NotFound, "unknown job %s", req.JobId)
	}
	return resp, err
}

func checkPartition(jm *JobMaster, jobID, resultID string, ev *pb.ExecutionVertex, index int32) error {
	err := status.Errorf(codes.NotFound, "unknown result %s of job %s", resultID, jobID)
	jm.state.WithJob(jobID, func(rec *pb.JobRecord) {
		for _, res := range rec.GetExecutionGraph().GetResults() {
			if res.ResultId == resultID {
				err = nil
				if res.ProducerVertexId != ev.VertexId || index != ev.SubtaskIndex {
					err = status.Errorf(codes.InvalidArgument, "partition %s/%d is not produced by %s[%d]", resultID, index, ev.VertexId, ev.SubtaskIndex)
				}
			}
		}
	})
	return err
}

// SubmitJob validates and commits a job on the established leader; the scheduler deploys it.
// A job whose expanded size is over the configured limits is refused before anything is
// committed (a *graph.SizeError naming each limit).
func (jm *JobMaster) SubmitJob(ctx context.Context, jg *pb.JobGraph) (string, uint64, error) {
	t, err := jm.openTerm()
	if err != nil {
		return "", 0, err
	}
	if jg != nil && jg.JobId == "" {
		jg.JobId = NewJobID()
	}
	if err := graph.Validate(jg, graph.DefaultLimits()); err != nil {
		return "", 0, err
	}
	if err := graph.CheckSize(jg, jm.cfg.SizeLimits); err != nil {
		return "", 0, err
	}
	res, err := jm.Commit(ctx, pb.CommandType_COMMAND_TYPE_SUBMIT_JOB, &pb.SubmitJobCommand{JobGraph: jg, Timestamp: nowMillis()})
	if err != nil {
		return "", 0, err
	}
	t.kick(jg.JobId)
	return jg.JobId, res.Index, nil
}

// CancelJob commits the cancellation; the scheduler then cancels the tasks.
func (jm *JobMaster) CancelJob(ctx context.Context, jobID string) (pb.JobStatus, error) {
	t, err := jm.openTerm()
	if err != nil {
		return 0, err
	}
	if _, err := jm.Commit(ctx, pb.CommandType_COMMAND_TYPE_CANCEL_JOB, &pb.CancelJobCommand{JobId: jobID, Timestamp: nowMillis()}); err != nil {
		return 0, err
	}
	t.kick(jobID)
	var st pb.JobStatus
	if !jm.state.WithJob(jobID, func(rec *pb.JobRecord) { st = rec.Status }) {
		return 0, fmt.Errorf("job %s vanished", jobID)
	}
	return st, nil
}
