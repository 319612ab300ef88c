package jobmaster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// localRaft applies commands straight to an FSM, refusing those fail picks (as a commit that
// did not reach a quorum).
type localRaft struct {
	f    *fsm.FSM
	mu   sync.Mutex
	idx  uint64
	fail func(pb.CommandType) bool
}

func (r *localRaft) Apply(_ context.Context, cmd []byte) (*fsm.Result, error) {
	c, err := fsm.Decode(cmd)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil && r.fail(c.Type) {
		return nil, errors.New("commit failed: no quorum")
	}
	r.idx++
	return r.f.Apply(&raft.Log{Index: r.idx, Term: 1, Type: raft.LogCommand, Data: cmd}).(*fsm.Result), nil
}
func (r *localRaft) ID() string       { return "jm1" }
func (r *localRaft) GRPCAddr() string { return "127.0.0.1:1" }
func (r *localRaft) IsLeader() bool   { return true }
func (r *localRaft) LeaderGRPCAddr(context.Context) (string, string, error) {
	return "jm1", "127.0.0.1:1", nil
}

// recordingTM is a TaskManagerService that checks, at every SubmitTask, that the attempt is
// the committed current attempt in DEPLOYING: the write-ahead rule seen from the receiving end.
type recordingTM struct {
	pb.UnimplementedTaskManagerServiceServer
	state *fsm.FSM

	// noBatch makes it a TaskManager without SubmitTasks (UNIMPLEMENTED), as an older one.
	noBatch bool

	mu         sync.Mutex
	submitted  []string
	violations []string
	batches    int
	single     int
}

func (s *recordingTM) SubmitTask(_ context.Context, req *pb.SubmitTaskRequest) (*pb.SubmitTaskResponse, error) {
	s.mu.Lock()
	s.single++
	s.mu.Unlock()
	s.check(req.GetTask())
	return &pb.SubmitTaskResponse{}, nil
}

func (s *recordingTM) SubmitTasks(_ context.Context, req *pb.SubmitTasksRequest) (*pb.SubmitTasksResponse, error) {
	if s.noBatch {
		return nil, status.Error(codes.Unimplemented, "method SubmitTasks not implemented")
	}
	s.mu.Lock()
	s.batches++
	s.mu.Unlock()
	resp := &pb.SubmitTasksResponse{}
	for _, d := range req.GetTasks() {
		s.check(d)
		resp.Results = append(resp.Results, &pb.SubmitTaskResult{AttemptId: d.AttemptId})
	}
	return resp, nil
}

// check records a submitted task and whether it was the committed attempt in DEPLOYING.
func (s *recordingTM) check(d *pb.TaskDeploymentDescriptor) {
	var problem string
	found := s.state.WithJob(d.JobId, func(rec *pb.JobRecord) {
		ev := graph.FindAttempt(rec.ExecutionGraph, d.AttemptId)
		switch {
		case ev == nil:
			problem = "not committed"
		case ev.Current.State != pb.ExecutionState_EXECUTION_STATE_DEPLOYING:
			problem = "committed but " + graph.ExecutionStateName(ev.Current.State)
		}
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	if !found {
		problem = "unknown job"
	}
	if problem != "" {
		s.violations = append(s.violations, fmt.Sprintf("%s[%d] %s: %s", d.VertexId, d.SubtaskIndex, d.AttemptId, problem))
	}
	s.submitted = append(s.submitted, d.AttemptId)
}

func (s *recordingTM) calls() (batches, single int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.batches, s.single
}

func (s *recordingTM) view() (submitted, violations []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.submitted...), append([]string(nil), s.violations...)
}

// TestDeployingCommitFailureIsResumed: when the attempts are committed but their DEPLOYING
// commit fails, nothing is submitted; the next pass commits DEPLOYING for the same attempts and
// only then submits them (no new attempt, no restart). Every SubmitTask finds its attempt
// committed in DEPLOYING.
func TestDeployingCommitFailureIsResumed(t *testing.T) {
	f := fsm.New(nil)
	failed := 0
	r := &localRaft{f: f}
	r.fail = func(typ pb.CommandType) bool {
		if typ == pb.CommandType_COMMAND_TYPE_UPDATE_EXECUTION_STATES && failed == 0 {
			failed++
			return true
		}
		return false
	}
	tm := &recordingTM{state: f}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterTaskManagerServiceServer(srv, tm)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	jm := New(Config{TickInterval: 10 * time.Millisecond, HeartbeatTimeout: time.Minute}, r, f)
	t.Cleanup(jm.Shutdown)
	if err := jm.EstablishLeadership(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	jm.Registry().Upsert("tm1", lis.Addr().String(), "127.0.0.1:2", 4, true)
	id, _, err := jm.SubmitJob(context.Background(), chainJob())
	if err != nil {
		t.Fatal(err)
	}

	waitFor(t, 10*time.Second, "three submitted tasks", func() (bool, string) {
		s, v := tm.view()
		return len(s) == 3, fmt.Sprintf("submitted %v, violations %v, deploy failures %d", s, v, jm.DeployFailures())
	})
	submitted, violations := tm.view()
	if len(violations) != 0 {
		t.Fatalf("tasks submitted before their commit: %v", violations)
	}
	if n := jm.DeployFailures(); n != 1 {
		t.Fatalf("deploy failures %d, want 1 (the failed DEPLOYING commit)", n)
	}
	rec, _ := f.Job(id)
	seen := map[string]bool{}
	for _, a := range submitted {
		seen[a] = true
	}
	forEachExecution(rec, func(ev *pb.ExecutionVertex) {
		e := ev.Current
		if e.AttemptNumber != 0 || !seen[e.AttemptId] || len(ev.History) != 0 {
			t.Errorf("%s[%d]: current %v, history %v; submitted %v", ev.VertexId, ev.SubtaskIndex, e, ev.History, submitted)
		}
	})
	if rec.Restarts != 0 {
		t.Fatalf("restarts = %d, want 0", rec.Restarts)
	}
	if b, single := tm.calls(); b != 1 || single != 0 {
		t.Fatalf("%d SubmitTasks batches and %d SubmitTask calls, want the 3 tasks in 1 batch", b, single)
	}
}

// chainJob is a streaming source -> map -> log sink job, one subtask each.
func chainJob() *pb.JobGraph {
	fwd := func(a, b string) *pb.JobEdge {
		return &pb.JobEdge{Source: a, Target: b, Distribution: pb.Distribution_DISTRIBUTION_FORWARD, ResultType: pb.ResultType_RESULT_TYPE_PIPELINED}
	}
	return &pb.JobGraph{
		Name: "resume", Type: pb.JobType_JOB_TYPE_STREAMING,
		Vertices: []*pb.JobVertex{
			{Id: "source", Parallelism: 1, Operator: &pb.Operator{Kind: &pb.Operator_SequenceSource{SequenceSource: &pb.SequenceSource{RatePerSecond: 10}}}},
			{Id: "map", Parallelism: 1, Operator: &pb.Operator{Kind: &pb.Operator_Map{Map: &pb.MapOperator{Multiply: 1}}}},
			{Id: "sink", Parallelism: 1, Operator: &pb.Operator{Kind: &pb.Operator_LogSink{LogSink: &pb.LogSink{}}}},
		},
		Edges: []*pb.JobEdge{fwd("source", "map"), fwd("map", "sink")},
	}
}

// waitFor polls cond until it holds or the timeout passes, then fails with what it last saw.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, seen := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last seen: %s", timeout, what, seen)
		}
		<-time.After(10 * time.Millisecond)
	}
}
