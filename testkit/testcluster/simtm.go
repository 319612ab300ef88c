package testcluster

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/taskmanager"
	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// SimTM is a simulated TaskManager: it speaks the real TaskManagerService over gRPC (with the
// default message limits), fences every call by epoch (adopting higher ones), holds the tasks
// it is given without running them (they have no goroutine and read no record), and answers
// RequestReport chunked exactly as a TaskManager does (by count and by bytes). It does not
// implement TriggerCheckpoint: a checkpoint trigger fails as Unimplemented.
//
// Started without JobMasters (SimOptions) it never calls a JobMaster: Cluster.DeployOnSims
// commits its attempts and gives it the matching executions, so a test puts a job of 100,000
// executions through a reconciliation without a TaskManager's cost. Started with them it lives
// the protocol's whole life against JobMasters it can reach only over gRPC (processes): it
// registers (protocol taskmanager.ProtocolVersion), heartbeats at the interval the leader
// answers with every task it holds and the pool version it was given (so the isolation rule
// makes it placeable), reports each task's state through UpdateTaskExecutionState, and follows
// a new leader: the one whose RequestReport announced it, a NOT_LEADER hint, or the one a
// JobMaster's ClusterStatus names (simleader.go). It never fences itself (no leader grace, no
// pool questions).
type SimTM struct {
	pb.UnimplementedTaskManagerServiceServer
	ID, Addr, Incarnation string
	// Slots it registers with and reports (0: as many as the executions it holds).
	Slots int32

	jms          []string // JobMasters' gRPC addresses (nil: it never calls one)
	wholeReports bool
	srv          *grpc.Server
	ctx          context.Context

	connMu sync.Mutex
	conns  map[string]*grpc.ClientConn

	mu             sync.Mutex
	epoch          uint64
	leader         string // gRPC address of the JobMaster this TM follows ("" : resolve)
	leaderID       string
	registered     bool
	hb             time.Duration
	poolV, poolRev uint64
	tasks          map[string]*simTask // by attempt id
	// report is the tasks' reports in report order, built once per change of the tasks (a
	// TM of 10,000 executions answers each RequestReport without sorting them again).
	report []*pb.ExecutionReport
	kick   chan struct{}

	shards []*simShard // the outbox senders (none without JobMasters)

	Registrations, Heartbeats, Reports, Chunks, Cancels, Updates atomic.Int64
	// MaxChunkBytes is the largest report chunk sent, as encoded.
	MaxChunkBytes atomic.Int64
}

// SimOptions shape simulated TaskManagers; the zero value is a TM that never calls a
// JobMaster, reports as many slots as it holds executions and answers as a TaskManager does.
type SimOptions struct {
	// JobMasters (gRPC addresses) make each TM find the leader through them, register,
	// heartbeat, report its tasks' states and follow a new leader. Slots must then be set.
	JobMasters []string
	// Slots of each TM (0: as many as the executions it holds).
	Slots int32
	// WholeReports answers every RequestReport with the whole report, chunked, even when the
	// leader's expectation matches it (taskmanager.ChunkReport rather than AnswerReport): for
	// tests that measure the chunks.
	WholeReports bool
	// Prefix of the TMs' ids: PREFIX00, PREFIX01, ... (default "sim").
	Prefix string
}

type simTask struct {
	jobID string
	rep   *pb.ExecutionReport // immutable once stored: a change stores a new one
}

// StartSimTMs starts n simulated TaskManagers named sim00, sim01, ... (SimOptions.Prefix)
// listening on loopback ports, and stops them when the test ends.
func StartSimTMs(t testing.TB, n int, o SimOptions) []*SimTM {
	t.Helper()
	if o.Prefix == "" {
		o.Prefix = "sim"
	}
	if len(o.JobMasters) > 0 && o.Slots <= 0 {
		t.Fatalf("StartSimTMs: %d slots; a TM that registers needs some", o.Slots)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	out := make([]*SimTM, 0, n)
	t.Cleanup(func() {
		cancel()
		for _, s := range out {
			s.srv.Stop()
		}
		wg.Wait()
		for _, s := range out {
			s.connMu.Lock()
			for _, c := range s.conns {
				c.Close()
			}
			s.connMu.Unlock()
		}
	})
	for i := range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := &SimTM{ID: fmt.Sprintf("%s%02d", o.Prefix, i), Addr: l.Addr().String(), Incarnation: fmt.Sprintf("%016x", rand.Uint64()),
			Slots: o.Slots, jms: o.JobMasters, wholeReports: o.WholeReports, ctx: ctx,
			srv: grpc.NewServer(transport.ServerOptions(0)...), conns: map[string]*grpc.ClientConn{},
			tasks: map[string]*simTask{}, kick: make(chan struct{}, 1), hb: time.Second}
		pb.RegisterTaskManagerServiceServer(s.srv, s)
		out = append(out, s)
		wg.Add(1)
		go func() { defer wg.Done(); _ = s.srv.Serve(l) }()
		if s.live() {
			s.startProtocol(&wg)
		}
	}
	return out
}

// live reports whether the TM calls JobMasters (it was given their addresses).
func (s *SimTM) live() bool { return len(s.jms) > 0 }

// Leader is the JobMaster the TM follows, its id, the highest epoch seen, and whether the TM is
// registered with it.
func (s *SimTM) Leader() (addr, id string, epoch uint64, registered bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leader, s.leaderID, s.epoch, s.registered
}

// Epoch is the highest epoch the TM has seen.
func (s *SimTM) Epoch() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epoch
}

// Tasks is how many tasks the TM holds and how many of them are RUNNING.
func (s *SimTM) Tasks() (held, running int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.tasks {
		held++
		if t.rep.State == pb.ExecutionState_EXECUTION_STATE_RUNNING {
			running++
		}
	}
	return held, running
}

// hold makes the TM hold (and report) these executions.
func (s *SimTM) hold(execs ...*pb.ExecutionReport) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range execs {
		s.tasks[r.AttemptId] = &simTask{jobID: r.JobId, rep: r}
	}
	s.report = nil
}

func terminal(st pb.ExecutionState) bool {
	switch st {
	case pb.ExecutionState_EXECUTION_STATE_FINISHED, pb.ExecutionState_EXECUTION_STATE_CANCELED, pb.ExecutionState_EXECUTION_STATE_FAILED:
		return true
	}
	return false
}

// fenceLocked refuses an epoch below the highest seen and adopts a higher one.
func (s *SimTM) fenceLocked(epoch uint64) error {
	if epoch < s.epoch {
		return transport.StaleEpochError(epoch, s.epoch)
	}
	s.epoch = epoch
	return nil
}

// SubmitTasks takes a batch: every task starts at once (it does nothing) and is reported
// RUNNING.
func (s *SimTM) SubmitTasks(_ context.Context, req *pb.SubmitTasksRequest) (*pb.SubmitTasksResponse, error) {
	if len(req.GetTasks()) == 0 {
		return nil, fmt.Errorf("an empty batch")
	}
	s.mu.Lock()
	if err := s.fenceLocked(req.GetEpoch()); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	resp := &pb.SubmitTasksResponse{Results: make([]*pb.SubmitTaskResult, len(req.GetTasks()))}
	var started []*pb.UpdateTaskExecutionStateRequest
	for i, d := range req.GetTasks() {
		resp.Results[i] = &pb.SubmitTaskResult{AttemptId: d.GetAttemptId()}
		if m := s.startLocked(d, req.GetSharedChannels()); m != nil {
			started = append(started, m)
		}
	}
	s.mu.Unlock()
	for _, m := range started {
		s.enqueue(m)
	}
	return resp, nil
}

// SubmitTask takes one task.
func (s *SimTM) SubmitTask(_ context.Context, req *pb.SubmitTaskRequest) (*pb.SubmitTaskResponse, error) {
	s.mu.Lock()
	if err := s.fenceLocked(req.GetEpoch()); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	m := s.startLocked(req.GetTask(), nil)
	s.mu.Unlock()
	if m != nil {
		s.enqueue(m)
	}
	return &pb.SubmitTaskResponse{}, nil
}

// startLocked holds the task RUNNING and returns its state update (nil: already held).
func (s *SimTM) startLocked(d *pb.TaskDeploymentDescriptor, shared []*pb.SharedChannels) *pb.UpdateTaskExecutionStateRequest {
	if _, ok := s.tasks[d.GetAttemptId()]; ok {
		return nil // a redelivery
	}
	rep := &pb.ExecutionReport{JobId: d.GetJobId(), VertexId: d.GetVertexId(), SubtaskIndex: d.GetSubtaskIndex(),
		AttemptId: d.GetAttemptId(), AttemptNumber: d.GetAttemptNumber(), StartTimestamp: d.GetStartTimestamp(),
		State: pb.ExecutionState_EXECUTION_STATE_RUNNING, SlotIndex: d.GetSlotIndex()}
	for _, p := range d.GetProduced() {
		rep.Produced = append(rep.Produced, &pb.ProducedPartitionReport{ResultId: p.GetResultId(), PartitionIndex: p.GetPartitionIndex(), Consumable: true})
	}
	for _, g := range d.GetInputs() {
		chs := g.GetChannels()
		if i := int(g.GetSharedChannels()); i > 0 && i <= len(shared) {
			chs = shared[i-1].GetChannels()
		}
		for _, c := range chs {
			rep.Consumed = append(rep.Consumed, &pb.ConsumedPartitionReport{ResultId: c.GetResultId(), PartitionIndex: c.GetPartitionIndex(), ProducerAttemptId: c.GetProducerAttemptId()})
		}
	}
	s.tasks[d.GetAttemptId()] = &simTask{jobID: d.GetJobId(), rep: rep}
	s.report = nil
	return &pb.UpdateTaskExecutionStateRequest{TmId: s.ID, JobId: d.GetJobId(), AttemptId: d.GetAttemptId(), State: pb.ExecutionState_EXECUTION_STATE_RUNNING}
}

// RequestReport streams every task the TM holds, chunked as a TaskManager chunks its report; a
// higher epoch announces a new leader, which a TM started with JobMasters then registers with
// and follows.
func (s *SimTM) RequestReport(req *pb.RequestReportRequest, stream pb.TaskManagerService_RequestReportServer) error {
	s.mu.Lock()
	newer := req.GetEpoch() > s.epoch
	if err := s.fenceLocked(req.GetEpoch()); err != nil {
		s.mu.Unlock()
		return err
	}
	if addr := req.GetLeaderGrpcAddress(); s.live() && addr != "" && (newer || addr != s.leader) {
		s.followLocked(addr, req.GetLeaderId())
	}
	if s.report == nil {
		s.report = make([]*pb.ExecutionReport, 0, len(s.tasks))
		for _, t := range s.tasks {
			s.report = append(s.report, t.rep)
		}
		slices.SortFunc(s.report, func(a, b *pb.ExecutionReport) int {
			return cmp.Or(cmp.Compare(a.JobId, b.JobId), cmp.Compare(a.VertexId, b.VertexId), cmp.Compare(a.SubtaskIndex, b.SubtaskIndex))
		})
	}
	execs := s.report
	s.mu.Unlock()
	s.Reports.Add(1)
	slots := s.Slots
	if slots == 0 {
		slots = int32(len(execs))
	}
	base := &pb.TaskManagerReport{TmId: s.ID, GrpcAddress: s.Addr, DataAddress: s.Addr, Slots: slots, Incarnation: s.Incarnation}
	var chunks []*pb.TaskManagerReport
	if s.wholeReports {
		chunks = taskmanager.ChunkReport(base, execs, int(req.GetChunkSize()), int(req.GetMaxChunkBytes()))
	} else {
		chunks = taskmanager.AnswerReport(base, execs, req, int(req.GetChunkSize()), int(req.GetMaxChunkBytes()))
	}
	for _, c := range chunks {
		if err := stream.Send(c); err != nil {
			return err
		}
		s.Chunks.Add(1)
		if n := int64(proto.Size(c)); n > s.MaxChunkBytes.Load() {
			s.MaxChunkBytes.Store(n)
		}
	}
	return nil
}

// CancelTask ends the attempt CANCELED (an unknown one is answered CANCELED) and reports it.
func (s *SimTM) CancelTask(_ context.Context, req *pb.CancelTaskRequest) (*pb.CancelTaskResponse, error) {
	s.mu.Lock()
	if err := s.fenceLocked(req.GetEpoch()); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	s.Cancels.Add(1)
	t := s.tasks[req.GetAttemptId()]
	if t == nil || terminal(t.rep.State) {
		s.mu.Unlock()
		if t != nil {
			return &pb.CancelTaskResponse{State: t.rep.State}, nil
		}
		return &pb.CancelTaskResponse{State: pb.ExecutionState_EXECUTION_STATE_CANCELED}, nil
	}
	rep := proto.CloneOf(t.rep)
	rep.State = pb.ExecutionState_EXECUTION_STATE_CANCELED
	for _, p := range rep.Produced {
		p.Consumable = false
	}
	t.rep = rep
	s.report = nil
	s.mu.Unlock()
	s.enqueue(&pb.UpdateTaskExecutionStateRequest{TmId: s.ID, JobId: t.jobID, AttemptId: req.GetAttemptId(), State: pb.ExecutionState_EXECUTION_STATE_CANCELED})
	return &pb.CancelTaskResponse{State: pb.ExecutionState_EXECUTION_STATE_CANCELED}, nil
}

// AcknowledgeTerminal forgets the terminal attempts named.
func (s *SimTM) AcknowledgeTerminal(_ context.Context, req *pb.AcknowledgeTerminalRequest) (*pb.AcknowledgeTerminalResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.fenceLocked(req.GetEpoch()); err != nil {
		return nil, err
	}
	for _, id := range req.GetAttemptIds() {
		if t := s.tasks[id]; t != nil && terminal(t.rep.State) {
			delete(s.tasks, id)
			s.report = nil
		}
	}
	return &pb.AcknowledgeTerminalResponse{}, nil
}

// UpdatePartitionInfo accepts (the tasks read nothing).
func (s *SimTM) UpdatePartitionInfo(_ context.Context, req *pb.UpdatePartitionInfoRequest) (*pb.UpdatePartitionInfoResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.fenceLocked(req.GetEpoch()); err != nil {
		return nil, err
	}
	return &pb.UpdatePartitionInfoResponse{}, nil
}
