package jobmaster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// The calls TaskManagers make (JobMasterService), as plain methods: the gRPC handlers in
// jmserver call them, and the edge's policy table has already refused a call on a node
// that is not the established leader and, for the gated ones, while the gate is closed. Each
// still takes its term (currentTerm or openTerm), so a call that raced a change of leadership
// or of the gate is refused with the same sentinel errors.

// RegisterTaskManager records (or refreshes) a TaskManager; served while the gate is closed,
// since reconciliation needs it.
func (jm *JobMaster) RegisterTaskManager(ctx context.Context, req *pb.RegisterTaskManagerRequest) (*pb.RegisterTaskManagerResponse, error) {
	t, err := jm.currentTerm()
	if err != nil {
		return nil, err
	}
	if req.TmId == "" || req.GrpcAddress == "" || req.DataAddress == "" {
		return nil, jm.refuseRegistration(req, "invalid_argument", errorf(ErrInvalidRequest, "register: tm_id, grpc_address and data_address are required"))
	}
	if req.Slots < transport.MinSlots || req.Slots > transport.MaxSlots {
		return nil, jm.refuseRegistration(req, "invalid_argument", errorf(ErrInvalidRequest, "register: slots must be in [%d, %d], got %d", transport.MinSlots, transport.MaxSlots, req.Slots))
	}
	if err := CheckTMProtocol(req.ProtocolVersion, MinTMProtocol, MaxTMProtocol); err != nil {
		return nil, jm.refuseRegistration(req, "protocol", fmt.Errorf("register %s: %w", req.TmId, err))
	}
	if err := t.watch.answersTaskManagers(time.Now()); err != nil {
		return nil, err
	}
	if req.EpochSeen > t.epoch {
		jm.witnessEpoch(req.GrpcAddress)
		return nil, &StaleEpochError{Current: t.epoch, Seen: req.EpochSeen}
	}
	// The attempts of a replaced incarnation are listed before the new one is usable, so none
	// placed on the new process is among them.
	var old []*pb.ExecutionStateUpdate
	if tm, ok := jm.tms.Get(req.TmId); ok && tm.Incarnation != "" && req.Incarnation != "" && tm.Incarnation != req.Incarnation {
		old = t.attemptsOn(req.TmId, fmt.Sprintf("TaskManager %s restarted: its process (incarnation %s) is gone", req.TmId, tm.Incarnation))
	}
	// The pool first: a TM is registered (usable, given tasks) only once it is a member, so
	// every TM that holds tasks knows a pool the leader knows of, and one that could not be
	// added is refused and holds nothing (isolation.go, a TM outside the pool).
	if err := jm.tms.CheckReplaced(req.TmId, req.Incarnation); err != nil {
		return nil, jm.refuseReplaced(err)
	}
	if err := t.watch.poolOnRegister(ctx, req.TmId, req.GrpcAddress, req.Incarnation); err != nil {
		return nil, fmt.Errorf("register %s: add it to the pool: %w", req.TmId, err)
	}
	previous, err := jm.tms.Register(req.TmId, req.Incarnation, req.GrpcAddress, req.DataAddress, req.Slots)
	if err != nil {
		return nil, jm.refuseReplaced(err)
	}
	jm.tms.SetProtocol(req.TmId, req.ProtocolVersion)
	jm.log.Info("task manager registered", "tm", req.TmId, "grpc", req.GrpcAddress, "slots", req.Slots, "incarnation", req.Incarnation)
	if previous != "" {
		t.failAttempts(old)
	}
	t.watch.streakOf(req.TmId)
	t.kick("")
	resp := &pb.RegisterTaskManagerResponse{
		Epoch: t.epoch, LeaderId: jm.raft.ID(), HeartbeatIntervalMs: jm.cfg.HeartbeatInterval.Milliseconds(),
		FenceTimeoutMs: jm.cfg.FenceTimeout.Milliseconds(), PoolQueryIntervalMs: jm.cfg.PoolQueryInterval.Milliseconds(),
		PoolQueryTimeoutMs: jm.cfg.PoolQueryTimeout.Milliseconds(), LeaderGraceMs: jm.cfg.TMLeaderGrace.Milliseconds(),
	}
	if _, _, rev, member := jm.state.PoolMember(req.TmId); member {
		resp.Pool = t.watch.poolView(rev)
	}
	return resp, nil
}

// refuseReplaced counts the refusal of a replaced incarnation's registration and returns err. It
// is not recorded for the id: a newer process of it is registered and working.
func (jm *JobMaster) refuseReplaced(err error) error {
	if in, ok := jm.cfg.Instruments.(registrationRefusals); ok {
		in.RegistrationRefused("replaced_incarnation")
	}
	return err
}

// registrationRefusals is implemented by the instruments that count refused registrations
// (metrics.JobMaster), by kind.
type registrationRefusals interface{ RegistrationRefused(kind string) }

// refuseRegistration makes a refusal of a TM's registration visible and returns err: it is
// recorded in the registry for the TM (shown by tm list, status, the REST view and the UI as
// "refused: <reason>"), counted, and logged at ERROR once per TM and distinct reason (the TM
// retries every heartbeat interval). A request without a TM id is only counted (and logged at
// debug: it names nobody to tell).
func (jm *JobMaster) refuseRegistration(req *pb.RegisterTaskManagerRequest, kind string, err error) error {
	reason := strings.TrimPrefix(strings.TrimPrefix(err.Error(), "register: "), "register "+req.TmId+": ")
	if in, ok := jm.cfg.Instruments.(registrationRefusals); ok {
		in.RegistrationRefused(kind)
	}
	if req.TmId == "" {
		jm.log.Debug("refused a registration without a TaskManager id", "grpc", req.GrpcAddress, "reason", reason)
		return err
	}
	if jm.tms.Refuse(req.TmId, reason) {
		jm.log.Error("refused a TaskManager's registration: it gets no work until it registers", "tm", req.TmId, "grpc", req.GrpcAddress, "slots", req.Slots, "reason", reason)
	}
	return err
}

// Heartbeat refreshes a TaskManager's deadline and, once the gate is open, checks the attempts
// it reports against the graph; served while the gate is closed.
func (jm *JobMaster) Heartbeat(ctx context.Context, req *pb.HeartbeatRequest) (*pb.HeartbeatResponse, error) {
	t, err := jm.currentTerm()
	if err != nil {
		return nil, err
	}
	if req.TmId == "" {
		return nil, errorf(ErrInvalidRequest, "heartbeat: tm_id is required")
	}
	if err := t.watch.answersTaskManagers(time.Now()); err != nil {
		return nil, err
	}
	if req.EpochSeen > t.epoch {
		if tm, ok := jm.tms.Get(req.TmId); ok {
			jm.witnessEpoch(tm.GRPCAddr)
		}
		return nil, &StaleEpochError{Current: t.epoch, Seen: req.EpochSeen}
	}
	if !jm.tms.TouchOf(req.TmId, req.Incarnation) {
		t.watch.noteAnswer(req.TmId) // an answer is contact for the TM's fence, even this one
		return &pb.HeartbeatResponse{Epoch: t.epoch, UnknownTaskManager: true}, nil
	}
	if jm.gateOpen.Load() {
		t.checkDeployment(req)
	}
	t.watch.streakOf(req.TmId)
	return &pb.HeartbeatResponse{Epoch: t.epoch, Pool: t.watch.poolOnHeartbeat(req.TmId, req.PoolVersion, req.PoolRevision)}, nil
}

// lookup validates that an attempt is the current attempt of a job's ExecutionVertex on the
// calling TM, with clear errors for every way it is not. It returns a copy of the vertex's
// identity and current attempt only.
func (jm *JobMaster) lookup(jobID, attemptID, tmID string) (*pb.ExecutionVertex, error) {
	if jobID == "" || attemptID == "" {
		return nil, errorf(ErrInvalidRequest, "job_id and attempt_id are required")
	}
	var out *pb.ExecutionVertex
	var err error
	// The FSM's index of current attempts, read before WithJob (both take the FSM's read
	// lock): a scan of the graph for each state update was most of the leader's CPU while a
	// job of 100,000 executions deployed. The index is checked against the graph in WithJob
	// (an entry applied in between may have changed it), and the scan is the fallback.
	refJob, refVertex, refSubtask, indexed := jm.state.LocateAttempt(attemptID)
	found := jm.state.WithJob(jobID, func(rec *pb.JobRecord) {
		var ev *pb.ExecutionVertex
		if indexed && refJob == jobID {
			if e := graph.FindVertex(rec.ExecutionGraph, refVertex, refSubtask); e.GetCurrent().GetAttemptId() == attemptID {
				ev = e
			}
		}
		if ev == nil {
			ev = graph.FindAttempt(rec.ExecutionGraph, attemptID)
		}
		if ev != nil {
			if tmID != "" && ev.Current.GetSlot().GetTmId() != tmID {
				err = errorf(ErrNotAssigned, "attempt %s of %s[%d] is assigned to %s, not %s",
					attemptID, ev.VertexId, ev.SubtaskIndex, ev.Current.GetSlot().GetTmId(), tmID)
				return
			}
			// Its identity and current attempt, not its inputs (a wide consumer has hundreds,
			// and cloning them for each state update was most of the leader's work while a
			// 512 x 512 job deployed).
			out = &pb.ExecutionVertex{VertexId: ev.VertexId, SubtaskIndex: ev.SubtaskIndex, Current: proto.CloneOf(ev.Current)}
			return
		}
		forEachExecution(rec, func(ev *pb.ExecutionVertex) {
			for _, h := range ev.History {
				if h.AttemptId == attemptID && err == nil {
					err = errorf(ErrStaleAttempt, "stale attempt %s (number %d) of %s[%d]: the current attempt is number %d",
						attemptID, h.AttemptNumber, ev.VertexId, ev.SubtaskIndex, ev.GetCurrent().GetAttemptNumber())
				}
			}
		})
		if err == nil {
			err = errorf(ErrUnknownAttempt, "unknown attempt %s of job %s", attemptID, jobID)
		}
	})
	if !found {
		return nil, errorf(fsm.ErrUnknownJob, "unknown job %s", jobID)
	}
	return out, err
}

// UpdateTaskExecutionState commits a TaskManager's report of an attempt's new state. Accepted
// false tells the TM the graph already ended the attempt, so it must stop it.
func (jm *JobMaster) UpdateTaskExecutionState(ctx context.Context, req *pb.UpdateTaskExecutionStateRequest) (*pb.UpdateTaskExecutionStateResponse, error) {
	t, err := jm.openTerm()
	if err != nil {
		return nil, err
	}
	if req.State == pb.ExecutionState_EXECUTION_STATE_UNSPECIFIED || pb.ExecutionState_name[int32(req.State)] == "" {
		return nil, errorf(ErrInvalidRequest, "invalid execution state %d", req.State)
	}
	if req.TmId == "" {
		return nil, errorf(ErrInvalidRequest, "tm_id is required")
	}
	ev, err := jm.lookup(req.JobId, req.AttemptId, req.TmId)
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
	jm.state.WithJob(req.JobId, func(rec *pb.JobRecord) {
		cur := graph.FindAttempt(rec.ExecutionGraph, req.AttemptId)
		ended = cur != nil && isTerminal(cur.Current.State)
	})
	if ended {
		// The graph already ended this attempt (e.g. failed it as missing): the TM must stop it.
		return &pb.UpdateTaskExecutionStateResponse{Accepted: false}, nil
	}
	if errors.Is(ctx.Err(), context.Canceled) || !jm.Active() {
		return nil, ErrNotLeader
	}
	return nil, errorf(ErrUpdateRefused, "update %s: %s", req.AttemptId, errs[0])
}

// ScheduleOrUpdateConsumers: a producer's partition has data; the scheduler looks at the job.
func (jm *JobMaster) ScheduleOrUpdateConsumers(ctx context.Context, req *pb.ScheduleOrUpdateConsumersRequest) (*pb.ScheduleOrUpdateConsumersResponse, error) {
	t, err := jm.openTerm()
	if err != nil {
		return nil, err
	}
	ev, err := jm.lookup(req.JobId, req.ProducerAttemptId, req.TmId)
	if err != nil {
		return nil, err
	}
	if err := checkPartition(jm, req.JobId, req.ResultId, ev, req.PartitionIndex); err != nil {
		return nil, err
	}
	t.kick(req.JobId)
	return &pb.ScheduleOrUpdateConsumersResponse{}, nil
}

// RequestPartitionState names the current producer of a partition and where it runs.
func (jm *JobMaster) RequestPartitionState(ctx context.Context, req *pb.RequestPartitionStateRequest) (*pb.RequestPartitionStateResponse, error) {
	if _, err := jm.openTerm(); err != nil {
		return nil, err
	}
	var resp *pb.RequestPartitionStateResponse
	err := errorf(ErrUnknownResult, "unknown result %s of job %s", req.ResultId, req.JobId)
	if !jm.state.WithJob(req.JobId, func(rec *pb.JobRecord) {
		for _, res := range rec.ExecutionGraph.Results {
			if res.ResultId != req.ResultId {
				continue
			}
			if req.PartitionIndex < 0 || int(req.PartitionIndex) >= len(res.Partitions) {
				err = errorf(ErrInvalidRequest, "result %s has %d partitions, not %d", req.ResultId, len(res.Partitions), req.PartitionIndex+1)
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
		return nil, errorf(fsm.ErrUnknownJob, "unknown job %s", req.JobId)
	}
	return resp, err
}

func checkPartition(jm *JobMaster, jobID, resultID string, ev *pb.ExecutionVertex, index int32) error {
	err := errorf(ErrUnknownResult, "unknown result %s of job %s", resultID, jobID)
	jm.state.WithJob(jobID, func(rec *pb.JobRecord) {
		for _, res := range rec.GetExecutionGraph().GetResults() {
			if res.ResultId == resultID {
				err = nil
				if res.ProducerVertexId != ev.VertexId || index != ev.SubtaskIndex {
					err = errorf(ErrInvalidRequest, "partition %s/%d is not produced by %s[%d]", resultID, index, ev.VertexId, ev.SubtaskIndex)
				}
			}
		}
	})
	return err
}

// epochWitness is implemented by the Raft side (cluster.Node.NoteSeenEpoch): a TaskManager has
// seen an epoch above this leader's, so either a newer leader exists or this cluster's state was
// lost; the node checks which by establishing again.
type epochWitness interface{ NoteSeenEpoch(epoch uint64) }

// probeEvery bounds how often one TaskManager is asked for its epoch.
const probeEvery = 2 * time.Second

// witnessEpoch checks a TaskManager's claim (in a registration or heartbeat) to have seen an
// epoch above this leader's by asking the TaskManager at addr itself (ProbeEpoch), once per
// probeEvery: the claim is the caller's word, and a made-up one must not stop a leader. A seen
// epoch the TaskManager confirms goes to the Raft side.
func (jm *JobMaster) witnessEpoch(addr string) {
	w, ok := jm.raft.(epochWitness)
	if !ok || addr == "" {
		return
	}
	jm.probeMu.Lock()
	if at, ok := jm.probed[addr]; ok && time.Since(at) < probeEvery {
		jm.probeMu.Unlock()
		return
	}
	if jm.probed == nil {
		jm.probed = map[string]time.Time{}
	}
	jm.probed[addr] = time.Now()
	jm.probeMu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), jm.cfg.RPCTimeout)
		defer cancel()
		if seen, err := jm.ProbeEpoch(ctx, addr); err == nil && seen > 0 {
			w.NoteSeenEpoch(seen)
		}
	}()
}

// ProbeEpoch asks the TaskManager at addr which leader epoch it has seen, changing nothing there:
// AcknowledgeTerminal at epoch 0 with no attempts is refused STALE_EPOCH naming the epoch it has
// seen, or INVALID_ARGUMENT by one that has seen none (0).
func (jm *JobMaster) ProbeEpoch(ctx context.Context, addr string) (uint64, error) {
	err := jm.tms.Call(ctx, addr, func(ctx context.Context, c pb.TaskManagerServiceClient) error {
		_, err := c.AcknowledgeTerminal(ctx, &pb.AcknowledgeTerminalRequest{Epoch: 0})
		return err
	})
	if seen, ok := transport.StaleEpochSeen(err); ok {
		return seen, nil
	}
	if status.Code(err) == codes.InvalidArgument {
		return 0, nil
	}
	if err == nil {
		return 0, errors.New("probe epoch: the TaskManager accepted an empty acknowledgement")
	}
	return 0, err
}
