package taskmanager

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	gproto "google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// testLogger routes logs through t.Log.
func testLogger(t testing.TB) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: tWriter{t}})
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// waitFor polls cond until it holds or the deadline passes; it fails with what was last seen.
func waitFor(t testing.TB, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	last := ""
	for {
		ok, seen := cond()
		if ok {
			return
		}
		last = seen
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s; last seen: %s", d, what, last)
		}
		<-tick.C
	}
}

// update is one UpdateTaskExecutionState call the test JM saw.
type update struct {
	attempt  string
	state    pb.ExecutionState
	cause    string
	seq      uint64
	accepted bool // false when refused with an error or answered accepted=false
}

// testJM is a recording JobMasterService (and ClientService.ClusterStatus) for tests.
type testJM struct {
	pb.UnimplementedJobMasterServiceServer
	pb.UnimplementedClientServiceServer
	addr string
	srv  *grpc.Server

	mu        sync.Mutex
	refuse    int             // refuse this many UpdateTaskExecutionState calls (RECONCILING)
	reject    map[string]bool // attempts whose updates are refused with FAILED_PRECONDITION
	disown    map[string]bool // attempts answered with accepted=false
	updates   []update        // every call, refused ones included
	consumers []*pb.ScheduleOrUpdateConsumersRequest
	acks      []*pb.AcknowledgeCheckpointRequest
	declines  []*pb.DeclineCheckpointRequest
	registers []*pb.RegisterTaskManagerRequest
	beats     []*pb.HeartbeatRequest
	epoch     uint64
	// notLeader makes registration and heartbeats answer NOT_LEADER while ClusterStatus still
	// names this JM (a leader between winning an election and establishing its term).
	notLeader bool
	// pool and rule, when set, are sent as a leader sends them: the pool view in registration
	// and heartbeat responses (when the TM's version differs), the isolation rule's timings at
	// registration.
	pool *pb.PoolView
	rule *pb.RegisterTaskManagerResponse
}

func startJM(t testing.TB) *testJM {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// A leader always has an epoch >= 1, and names it in ClusterStatus.
	jm := &testJM{addr: l.Addr().String(), srv: grpc.NewServer(), disown: map[string]bool{}, reject: map[string]bool{}, epoch: 1}
	pb.RegisterJobMasterServiceServer(jm.srv, jm)
	pb.RegisterClientServiceServer(jm.srv, jm)
	go func() { _ = jm.srv.Serve(l) }()
	t.Cleanup(jm.srv.Stop)
	return jm
}

func (j *testJM) ClusterStatus(context.Context, *pb.ClusterStatusRequest) (*pb.ClusterStatusResponse, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return &pb.ClusterStatusResponse{NodeId: "jm", LeaderId: "jm", LeaderGrpcAddress: j.addr, Epoch: j.epoch}, nil
}

// setEpoch changes the epoch the JM names (a new leader term).
func (j *testJM) setEpoch(e uint64) {
	j.mu.Lock()
	j.epoch = e
	j.mu.Unlock()
}

func (j *testJM) RegisterTaskManager(_ context.Context, r *pb.RegisterTaskManagerRequest) (*pb.RegisterTaskManagerResponse, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.registers = append(j.registers, r)
	if j.notLeader {
		return nil, transport.NotLeaderError("")
	}
	resp := &pb.RegisterTaskManagerResponse{Epoch: j.epoch, LeaderId: "jm", HeartbeatIntervalMs: 20, Pool: j.pool}
	if j.rule != nil {
		resp.FenceTimeoutMs, resp.PoolQueryIntervalMs, resp.PoolQueryTimeoutMs = j.rule.FenceTimeoutMs, j.rule.PoolQueryIntervalMs, j.rule.PoolQueryTimeoutMs
	}
	return resp, nil
}

func (j *testJM) Heartbeat(_ context.Context, r *pb.HeartbeatRequest) (*pb.HeartbeatResponse, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.beats = append(j.beats, r)
	if j.notLeader {
		return nil, transport.NotLeaderError("")
	}
	resp := &pb.HeartbeatResponse{Epoch: j.epoch}
	if j.pool != nil && r.PoolVersion != j.pool.Version {
		resp.Pool = j.pool
	}
	return resp, nil
}

func (j *testJM) UpdateTaskExecutionState(_ context.Context, r *pb.UpdateTaskExecutionStateRequest) (*pb.UpdateTaskExecutionStateResponse, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	u := update{attempt: r.GetAttemptId(), state: r.GetState(), cause: r.GetFailureCause(), seq: r.GetSequence()}
	if j.refuse > 0 {
		j.refuse--
		j.updates = append(j.updates, u)
		return nil, transport.ReconcilingError(20 * time.Millisecond)
	}
	if j.reject[r.GetAttemptId()] {
		j.updates = append(j.updates, u)
		return nil, status.Error(codes.FailedPrecondition, "illegal state transition")
	}
	u.accepted = !j.disown[r.GetAttemptId()]
	j.updates = append(j.updates, u)
	return &pb.UpdateTaskExecutionStateResponse{Accepted: u.accepted}, nil
}

func (j *testJM) ScheduleOrUpdateConsumers(_ context.Context, r *pb.ScheduleOrUpdateConsumersRequest) (*pb.ScheduleOrUpdateConsumersResponse, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.consumers = append(j.consumers, r)
	return &pb.ScheduleOrUpdateConsumersResponse{}, nil
}

func (j *testJM) AcknowledgeCheckpoint(_ context.Context, r *pb.AcknowledgeCheckpointRequest) (*pb.AcknowledgeCheckpointResponse, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.acks = append(j.acks, r)
	return &pb.AcknowledgeCheckpointResponse{Accepted: true}, nil
}

func (j *testJM) DeclineCheckpoint(_ context.Context, r *pb.DeclineCheckpointRequest) (*pb.DeclineCheckpointResponse, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.declines = append(j.declines, r)
	return &pb.DeclineCheckpointResponse{}, nil
}

// checkpointAcks returns the acknowledgements of checkpoint id so far, by "vertex[subtask]".
func (j *testJM) checkpointAcks(id uint64) map[string]*pb.TaskCheckpointAck {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := map[string]*pb.TaskCheckpointAck{}
	for _, r := range j.acks {
		if r.GetCheckpointId() != id {
			continue
		}
		for _, a := range r.GetAcks() {
			out[fmt.Sprintf("%s[%d]", a.GetVertexId(), a.GetSubtaskIndex())] = a
		}
	}
	return out
}

// accepted returns the states the JM accepted for an attempt, in order.
func (j *testJM) accepted(attempt string) []pb.ExecutionState {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []pb.ExecutionState
	for _, u := range j.updates {
		if u.attempt == attempt && u.accepted {
			out = append(out, u.state)
		}
	}
	return out
}

// lastState returns the last accepted state of an attempt and its cause.
func (j *testJM) lastState(attempt string) (pb.ExecutionState, string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for i := len(j.updates) - 1; i >= 0; i-- {
		if u := j.updates[i]; u.attempt == attempt && u.accepted {
			return u.state, u.cause
		}
	}
	return pb.ExecutionState_EXECUTION_STATE_UNSPECIFIED, ""
}

// waitState waits until the JM accepted state for the attempt.
func (j *testJM) waitState(t *testing.T, attempt string, want pb.ExecutionState) string {
	t.Helper()
	var cause string
	waitFor(t, 20*time.Second, fmt.Sprintf("%s to report %s", attempt, want), func() (bool, string) {
		var st pb.ExecutionState
		st, cause = j.lastState(attempt)
		return st == want, fmt.Sprintf("%v %q", j.accepted(attempt), cause)
	})
	return cause
}

// newTM starts a TM registered with jm (via ClusterStatus) with fast test timings.
func newTM(t testing.TB, id string, jm *testJM, mutate func(*Config)) *TaskManager {
	t.Helper()
	cfg := DefaultConfig()
	cfg.ID = id
	cfg.HeartbeatInterval = 20 * time.Millisecond
	cfg.OutboxBackoffMin = 5 * time.Millisecond
	cfg.OutboxBackoffMax = 50 * time.Millisecond
	cfg.RPCTimeout = 2 * time.Second
	cfg.InputConnectTimeout = 20 * time.Second
	cfg.ShutdownTimeout = 2 * time.Second
	cfg.Logger = testLogger(t)
	cfg.WorkDir = t.TempDir()
	if jm != nil {
		cfg.JobMasters = []string{jm.addr}
	}
	if mutate != nil {
		mutate(&cfg)
	}
	tm, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := tm.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tm.Stop)
	return tm
}

// client returns a TaskManagerService client for tm.
func client(t *testing.T, tm *TaskManager) pb.TaskManagerServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(tm.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return pb.NewTaskManagerServiceClient(conn)
}

func submit(t *testing.T, c pb.TaskManagerServiceClient, epoch uint64, d *pb.TaskDeploymentDescriptor) {
	t.Helper()
	if _, err := c.SubmitTask(context.Background(), &pb.SubmitTaskRequest{Epoch: epoch, Task: d}); err != nil {
		t.Fatalf("SubmitTask %s: %v", d.GetAttemptId(), err)
	}
}

// report collects a full RequestReport.
func report(t *testing.T, c pb.TaskManagerServiceClient, req *pb.RequestReportRequest) []*pb.TaskManagerReport {
	t.Helper()
	s, err := c.RequestReport(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var out []*pb.TaskManagerReport
	for {
		r, err := s.Recv()
		if err != nil {
			if len(out) == 0 || !out[len(out)-1].GetLast() {
				t.Fatalf("report stream ended: %v", err)
			}
			return out
		}
		out = append(out, r)
	}
}

func findTask(tm *TaskManager, attempt string) (TaskInfo, bool) {
	for _, ti := range tm.Tasks() {
		if ti.AttemptID == attempt {
			return ti, true
		}
	}
	return TaskInfo{}, false
}

// TDD builders.

func source(job, vertex string, subtask, par int32, attempt string, slot int32, cfg *pb.SequenceSource, produced ...*pb.ResultPartitionDeploymentDescriptor) *pb.TaskDeploymentDescriptor {
	return &pb.TaskDeploymentDescriptor{
		JobId: job, VertexId: vertex, SubtaskIndex: subtask, Parallelism: par, AttemptId: attempt,
		SlotIndex: slot, StartTimestamp: 1, Operator: &pb.Operator{Kind: &pb.Operator_SequenceSource{SequenceSource: cfg}},
		Produced: produced,
	}
}

func deploy(job, vertex string, subtask, par int32, attempt string, slot int32, op *pb.Operator, inputs []*pb.InputGateDeploymentDescriptor, produced ...*pb.ResultPartitionDeploymentDescriptor) *pb.TaskDeploymentDescriptor {
	return &pb.TaskDeploymentDescriptor{
		JobId: job, VertexId: vertex, SubtaskIndex: subtask, Parallelism: par, AttemptId: attempt,
		SlotIndex: slot, StartTimestamp: 1, Operator: op, Inputs: inputs, Produced: produced,
	}
}

func produces(result string, index, subs int32, dist pb.Distribution, typ pb.ResultType) *pb.ResultPartitionDeploymentDescriptor {
	return &pb.ResultPartitionDeploymentDescriptor{ResultId: result, PartitionIndex: index, NumSubpartitions: subs, Distribution: dist, ResultType: typ}
}

func gate(result string, typ pb.ResultType, chans ...*pb.InputChannelDescriptor) []*pb.InputGateDeploymentDescriptor {
	return []*pb.InputGateDeploymentDescriptor{{ResultId: result, ResultType: typ, Channels: chans}}
}

func channel(result string, partition, sub int32, producer, addr string) *pb.InputChannelDescriptor {
	return &pb.InputChannelDescriptor{ResultId: result, PartitionIndex: partition, SubpartitionIndex: sub, ProducerAttemptId: producer, ProducerDataAddress: addr}
}

func checksumOp(path string) *pb.Operator {
	return &pb.Operator{Kind: &pb.Operator_ChecksumSink{ChecksumSink: &pb.ChecksumSink{Path: path, FlushIntervalMs: 20}}}
}

const (
	pipelined = pb.ResultType_RESULT_TYPE_PIPELINED
	blocking  = pb.ResultType_RESULT_TYPE_BLOCKING
	forward   = pb.Distribution_DISTRIBUTION_FORWARD
	allToAll  = pb.Distribution_DISTRIBUTION_ALL_TO_ALL
	running   = pb.ExecutionState_EXECUTION_STATE_RUNNING
	finished  = pb.ExecutionState_EXECUTION_STATE_FINISHED
	canceled  = pb.ExecutionState_EXECUTION_STATE_CANCELED
	failed    = pb.ExecutionState_EXECUTION_STATE_FAILED
)

// cloneTDD copies a descriptor.
func cloneTDD(d *pb.TaskDeploymentDescriptor) *pb.TaskDeploymentDescriptor {
	return gproto.Clone(d).(*pb.TaskDeploymentDescriptor)
}
