package testcluster

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/taskmanager"
	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// LiveSim is a simulated TaskManager that lives the protocol's whole life against JobMasters it
// can only reach over gRPC (processes): it registers (protocol taskmanager.ProtocolVersion),
// heartbeats at the interval the leader answers with every task it holds and the pool version it
// was given (so the isolation rule makes it placeable), takes SubmitTasks and SubmitTask,
// reports each task RUNNING through UpdateTaskExecutionState, answers RequestReport (chunked
// with taskmanager.ChunkReport), CancelTask, AcknowledgeTerminal and UpdatePartitionInfo, and
// follows a new leader: the one whose RequestReport announced it, or the one a JobMaster's
// ClusterStatus names. Every TaskManagerService call is fenced by epoch as SimTM fences it.
//
// It is cheap: its tasks do nothing and have no goroutine. Per TM there is one leader loop
// (register, heartbeat) and LiveSimSenders outbox senders; like the real outbox, messages of
// one attempt are sent in order (an attempt always goes to the same sender) and many attempts'
// messages are in flight at once, which the leader's batcher commits together.
type LiveSim struct {
	pb.UnimplementedTaskManagerServiceServer
	ID, Addr, Incarnation string
	Slots                 int32
	jms                   []string
	srv                   *grpc.Server
	ctx                   context.Context

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
	kick           chan struct{}

	shards []*simShard

	Registrations, Heartbeats, Reports, Cancels, Updates atomic.Int64
}

type simTask struct {
	jobID string
	rep   *pb.ExecutionReport // immutable once stored: a change stores a new one
}

// LiveSimSenders is the number of outbox senders per simulated TM: how many of its state updates
// may be in flight at once.
const LiveSimSenders = 16

// simShard is one outbox sender's FIFO queue.
type simShard struct {
	mu    sync.Mutex
	queue []*pb.UpdateTaskExecutionStateRequest
	ready chan struct{} // a message was queued (capacity 1)
	nudge chan struct{} // closed and replaced to wake a sender backing off: a new leader
}

// StartLiveSims starts n simulated TMs named live00, live01, ... with slots slots each, that
// find the leader through the JobMasters at jms (gRPC addresses), and stops them when the test
// ends.
func StartLiveSims(t testing.TB, n int, slots int32, jms []string) []*LiveSim {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	out := make([]*LiveSim, n)
	for i := range out {
		out[i] = startLiveSim(t, ctx, &wg, fmt.Sprintf("live%02d", i), slots, jms)
	}
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
	return out
}

func startLiveSim(t testing.TB, ctx context.Context, wg *sync.WaitGroup, id string, slots int32, jms []string) *LiveSim {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &LiveSim{ID: id, Addr: l.Addr().String(), Incarnation: fmt.Sprintf("%016x", rand.Uint64()), Slots: slots,
		jms: jms, ctx: ctx, srv: grpc.NewServer(transport.ServerOptions(0)...), conns: map[string]*grpc.ClientConn{},
		tasks: map[string]*simTask{}, kick: make(chan struct{}, 1), hb: time.Second}
	pb.RegisterTaskManagerServiceServer(s.srv, s)
	for range LiveSimSenders {
		s.shards = append(s.shards, &simShard{ready: make(chan struct{}, 1), nudge: make(chan struct{})})
	}
	wg.Add(2 + len(s.shards))
	go func() { defer wg.Done(); _ = s.srv.Serve(l) }()
	go func() { defer wg.Done(); s.leaderLoop() }()
	for _, sh := range s.shards {
		go func() { defer wg.Done(); s.sender(sh) }()
	}
	return s
}

// Leader is the JobMaster the TM follows, its id, the highest epoch seen, and whether the TM is
// registered with it.
func (s *LiveSim) Leader() (addr, id string, epoch uint64, registered bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leader, s.leaderID, s.epoch, s.registered
}

// Tasks is how many tasks the TM holds and how many of them are RUNNING.
func (s *LiveSim) Tasks() (held, running int) {
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

func (s *LiveSim) conn(addr string) (*grpc.ClientConn, error) {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	if c := s.conns[addr]; c != nil {
		return c, nil
	}
	c, err := grpc.NewClient(addr, append(transport.DialOptions(0, "simulated TaskManager"), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		return nil, err
	}
	s.conns[addr] = c
	return c, nil
}

func (s *LiveSim) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// followLocked makes addr the leader (not registered with it yet) and wakes the loop and the
// senders.
func (s *LiveSim) followLocked(addr, id string) {
	s.leader, s.leaderID, s.registered = addr, id, false
	s.wake()
	for _, sh := range s.shards {
		sh.mu.Lock()
		close(sh.nudge)
		sh.nudge = make(chan struct{})
		sh.mu.Unlock()
	}
}

// failed reacts to a failed call to the leader at addr: a gate closed keeps it, a NOT_LEADER
// hint is followed, anything else makes the TM resolve the leader again.
func (s *LiveSim) failed(addr string, err error) {
	if transport.IsReconciling(err) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if addr != s.leader {
		return
	}
	if hint := transport.LeaderHint(err); hint != "" && hint != addr {
		s.followLocked(hint, "")
		return
	}
	s.leader, s.registered = "", false
	s.wake()
}

// resolve asks the JobMasters' ClusterStatus for the established leader.
func (s *LiveSim) resolve(ctx context.Context) string {
	for _, jm := range s.jms {
		c, err := s.conn(jm)
		if err != nil {
			continue
		}
		cs, err := pb.NewClientServiceClient(c).ClusterStatus(ctx, &pb.ClusterStatusRequest{})
		if err == nil && cs.GetLeaderGrpcAddress() != "" && cs.GetEpoch() >= s.seen() {
			return cs.GetLeaderGrpcAddress()
		}
	}
	return ""
}

func (s *LiveSim) seen() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epoch
}

func (s *LiveSim) leaderLoop() {
	failures := 0
	for {
		s.mu.Lock()
		addr, registered, iv := s.leader, s.registered, s.hb
		s.mu.Unlock()
		var err error
		ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
		switch {
		case addr == "":
			if a := s.resolve(ctx); a != "" {
				s.mu.Lock()
				if s.leader == "" {
					s.followLocked(a, "")
				}
				s.mu.Unlock()
				cancel()
				continue
			}
			err = fmt.Errorf("no leader named")
		case !registered:
			err = s.register(ctx, addr)
		default:
			err = s.heartbeat(ctx, addr)
		}
		cancel()
		if s.ctx.Err() != nil {
			return
		}
		wait := iv
		if err != nil {
			failures++
			wait = min(10*time.Millisecond<<min(failures-1, 6), iv)
		} else {
			failures = 0
		}
		timer := time.NewTimer(wait)
		select {
		case <-s.ctx.Done():
			timer.Stop()
			return
		case <-s.kick:
		case <-timer.C:
		}
		timer.Stop()
	}
}

func (s *LiveSim) register(ctx context.Context, addr string) error {
	c, err := s.conn(addr)
	if err != nil {
		return err
	}
	resp, err := pb.NewJobMasterServiceClient(c).RegisterTaskManager(ctx, &pb.RegisterTaskManagerRequest{
		TmId: s.ID, GrpcAddress: s.Addr, DataAddress: s.Addr, Slots: s.Slots, EpochSeen: s.seen(),
		Incarnation: s.Incarnation, ProtocolVersion: taskmanager.ProtocolVersion,
	})
	if err != nil {
		s.failed(addr, err)
		return err
	}
	s.Registrations.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if resp.GetEpoch() < s.epoch || addr != s.leader {
		s.leader, s.registered = "", false // a deposed leader, or one we no longer follow
		return fmt.Errorf("registration with %s at epoch %d, seen %d", addr, resp.GetEpoch(), s.epoch)
	}
	s.epoch, s.leaderID, s.registered = resp.GetEpoch(), resp.GetLeaderId(), true
	if ms := resp.GetHeartbeatIntervalMs(); ms > 0 {
		s.hb = time.Duration(ms) * time.Millisecond
	}
	s.adoptPoolLocked(resp.GetPool())
	s.wake() // the first heartbeat at once: it confirms the pool version, which makes the TM placeable
	return nil
}

func (s *LiveSim) adoptPoolLocked(v *pb.PoolView) {
	if v != nil && v.GetRevision() > s.poolRev {
		s.poolV, s.poolRev = v.GetVersion(), v.GetRevision()
	}
}

func (s *LiveSim) heartbeat(ctx context.Context, addr string) error {
	s.mu.Lock()
	req := &pb.HeartbeatRequest{TmId: s.ID, EpochSeen: s.epoch, Incarnation: s.Incarnation, PoolVersion: s.poolV, PoolRevision: s.poolRev,
		Deployed: make([]*pb.DeployedExecution, 0, len(s.tasks))}
	for id, t := range s.tasks {
		req.Deployed = append(req.Deployed, &pb.DeployedExecution{JobId: t.jobID, AttemptId: id, State: t.rep.State})
	}
	req.FreeSlots = s.freeSlotsLocked()
	s.mu.Unlock()
	c, err := s.conn(addr)
	if err != nil {
		return err
	}
	resp, err := pb.NewJobMasterServiceClient(c).Heartbeat(ctx, req)
	if err != nil {
		s.failed(addr, err)
		return err
	}
	s.Heartbeats.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if resp.GetEpoch() < s.epoch {
		s.leader, s.registered = "", false
		return fmt.Errorf("heartbeat answered by %s at epoch %d, seen %d", addr, resp.GetEpoch(), s.epoch)
	}
	s.epoch = resp.GetEpoch()
	s.adoptPoolLocked(resp.GetPool())
	if resp.GetUnknownTaskManager() {
		s.registered = false
		s.wake()
	}
	return nil
}

// freeSlotsLocked counts the slots without a live task.
func (s *LiveSim) freeSlotsLocked() int32 {
	used := map[int32]bool{}
	for _, t := range s.tasks {
		if !terminal(t.rep.State) {
			used[t.rep.SlotIndex] = true
		}
	}
	return s.Slots - int32(len(used))
}

func terminal(st pb.ExecutionState) bool {
	switch st {
	case pb.ExecutionState_EXECUTION_STATE_FINISHED, pb.ExecutionState_EXECUTION_STATE_CANCELED, pb.ExecutionState_EXECUTION_STATE_FAILED:
		return true
	}
	return false
}

// fence refuses an epoch below the highest seen and adopts a higher one (under s.mu).
func (s *LiveSim) fenceLocked(epoch uint64) error {
	if epoch < s.epoch {
		return transport.StaleEpochError(epoch, s.epoch)
	}
	s.epoch = epoch
	return nil
}

// enqueue queues a state update behind the attempt's earlier ones.
func (s *LiveSim) enqueue(m *pb.UpdateTaskExecutionStateRequest) {
	h := fnv.New32a()
	h.Write([]byte(m.AttemptId))
	sh := s.shards[h.Sum32()%uint32(len(s.shards))]
	sh.mu.Lock()
	sh.queue = append(sh.queue, m)
	sh.mu.Unlock()
	select {
	case sh.ready <- struct{}{}:
	default:
	}
}

// sender delivers its queue's messages one at a time, each until the leader answers it:
// retryable refusals (the gate closed, not the leader, no connection) wait for the RetryInfo
// delay, a backoff, or a new leader.
func (s *LiveSim) sender(sh *simShard) {
	backoff := 10 * time.Millisecond
	for {
		sh.mu.Lock()
		var m *pb.UpdateTaskExecutionStateRequest
		if len(sh.queue) > 0 {
			m = sh.queue[0]
		}
		nudge := sh.nudge
		sh.mu.Unlock()
		if m == nil {
			select {
			case <-s.ctx.Done():
				return
			case <-sh.ready:
			}
			continue
		}
		addr, _, _, _ := s.Leader()
		err := fmt.Errorf("no leader")
		if addr != "" {
			var c *grpc.ClientConn
			if c, err = s.conn(addr); err == nil {
				ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
				_, err = pb.NewJobMasterServiceClient(c).UpdateTaskExecutionState(ctx, m)
				cancel()
			}
		}
		if s.ctx.Err() != nil {
			return
		}
		if err == nil || !transport.Retryable(err) {
			// Accepted, or refused for good (the leader owns the attempt no longer): either way
			// the message is done.
			s.Updates.Add(1)
			sh.mu.Lock()
			sh.queue = sh.queue[1:]
			sh.mu.Unlock()
			backoff = 10 * time.Millisecond
			continue
		}
		if addr != "" {
			s.failed(addr, err)
		} else {
			s.wake()
		}
		delay, ok := transport.RetryAfter(err)
		if !ok {
			delay = backoff/2 + rand.N(backoff/2+1)
			backoff = min(2*backoff, time.Second)
		}
		timer := time.NewTimer(delay)
		select {
		case <-s.ctx.Done():
			timer.Stop()
			return
		case <-nudge:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// SubmitTasks takes a batch: every task starts at once (it does nothing) and is reported
// RUNNING.
func (s *LiveSim) SubmitTasks(_ context.Context, req *pb.SubmitTasksRequest) (*pb.SubmitTasksResponse, error) {
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
func (s *LiveSim) SubmitTask(_ context.Context, req *pb.SubmitTaskRequest) (*pb.SubmitTaskResponse, error) {
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
func (s *LiveSim) startLocked(d *pb.TaskDeploymentDescriptor, shared []*pb.SharedChannels) *pb.UpdateTaskExecutionStateRequest {
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
	return &pb.UpdateTaskExecutionStateRequest{TmId: s.ID, JobId: d.GetJobId(), AttemptId: d.GetAttemptId(), State: pb.ExecutionState_EXECUTION_STATE_RUNNING}
}

// RequestReport streams every task the TM holds, chunked as a TaskManager chunks its report; a
// higher epoch announces a new leader, which the TM then registers with and follows.
func (s *LiveSim) RequestReport(req *pb.RequestReportRequest, stream pb.TaskManagerService_RequestReportServer) error {
	s.mu.Lock()
	newer := req.GetEpoch() > s.epoch
	if err := s.fenceLocked(req.GetEpoch()); err != nil {
		s.mu.Unlock()
		return err
	}
	if addr := req.GetLeaderGrpcAddress(); addr != "" && (newer || addr != s.leader) {
		s.followLocked(addr, req.GetLeaderId())
	}
	execs := make([]*pb.ExecutionReport, 0, len(s.tasks))
	for _, t := range s.tasks {
		execs = append(execs, t.rep)
	}
	s.mu.Unlock()
	s.Reports.Add(1)
	slices.SortFunc(execs, func(a, b *pb.ExecutionReport) int {
		return cmp.Or(cmp.Compare(a.JobId, b.JobId), cmp.Compare(a.VertexId, b.VertexId), cmp.Compare(a.SubtaskIndex, b.SubtaskIndex))
	})
	base := &pb.TaskManagerReport{TmId: s.ID, GrpcAddress: s.Addr, DataAddress: s.Addr, Slots: s.Slots, Incarnation: s.Incarnation}
	for _, c := range taskmanager.AnswerReport(base, execs, req, int(req.GetChunkSize()), int(req.GetMaxChunkBytes())) {
		if err := stream.Send(c); err != nil {
			return err
		}
	}
	return nil
}

// CancelTask ends the attempt CANCELED (an unknown one is answered CANCELED) and reports it.
func (s *LiveSim) CancelTask(_ context.Context, req *pb.CancelTaskRequest) (*pb.CancelTaskResponse, error) {
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
	s.mu.Unlock()
	s.enqueue(&pb.UpdateTaskExecutionStateRequest{TmId: s.ID, JobId: t.jobID, AttemptId: req.GetAttemptId(), State: pb.ExecutionState_EXECUTION_STATE_CANCELED})
	return &pb.CancelTaskResponse{State: pb.ExecutionState_EXECUTION_STATE_CANCELED}, nil
}

// AcknowledgeTerminal forgets the terminal attempts named.
func (s *LiveSim) AcknowledgeTerminal(_ context.Context, req *pb.AcknowledgeTerminalRequest) (*pb.AcknowledgeTerminalResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.fenceLocked(req.GetEpoch()); err != nil {
		return nil, err
	}
	for _, id := range req.GetAttemptIds() {
		if t := s.tasks[id]; t != nil && terminal(t.rep.State) {
			delete(s.tasks, id)
		}
	}
	return &pb.AcknowledgeTerminalResponse{}, nil
}

// UpdatePartitionInfo accepts (the tasks read nothing).
func (s *LiveSim) UpdatePartitionInfo(_ context.Context, req *pb.UpdatePartitionInfoRequest) (*pb.UpdatePartitionInfoResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.fenceLocked(req.GetEpoch()); err != nil {
		return nil, err
	}
	return &pb.UpdatePartitionInfoResponse{}, nil
}
