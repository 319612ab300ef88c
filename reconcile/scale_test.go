package reconcile_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"google.golang.org/grpc"

	"github.com/jmcluster/jmcluster/cluster"
	"github.com/jmcluster/jmcluster/graph"
	tc "github.com/jmcluster/jmcluster/internal/testcluster"
	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// simTM is a lightweight TaskManager that speaks the real TaskManagerService over gRPC: it
// fences every call by epoch (adopting higher ones), streams its report in chunks, and counts
// cancels and acknowledgements. Its tasks do no work.
type simTM struct {
	pb.UnimplementedTaskManagerServiceServer
	id, addr string
	srv      *grpc.Server

	mu    sync.Mutex
	epoch uint64
	execs []*pb.ExecutionReport

	reports, chunks, cancels, submits atomic.Int64
}

func startSimTM(t *testing.T, id string) *simTM {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &simTM{id: id, addr: l.Addr().String(), srv: grpc.NewServer()}
	pb.RegisterTaskManagerServiceServer(s.srv, s)
	go func() { _ = s.srv.Serve(l) }()
	t.Cleanup(s.srv.Stop)
	return s
}

func (s *simTM) fence(epoch uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if epoch < s.epoch {
		return transport.StaleEpochError(epoch, s.epoch)
	}
	s.epoch = epoch
	return nil
}

func (s *simTM) RequestReport(req *pb.RequestReportRequest, stream pb.TaskManagerService_RequestReportServer) error {
	if err := s.fence(req.GetEpoch()); err != nil {
		return err
	}
	s.reports.Add(1)
	s.mu.Lock()
	execs := s.execs
	s.mu.Unlock()
	size := int(req.GetChunkSize())
	if size <= 0 {
		size = 1000
	}
	for i, n := 0, int32(0); i == 0 || i < len(execs); i, n = i+size, n+1 {
		end := min(i+size, len(execs))
		c := &pb.TaskManagerReport{TmId: s.id, GrpcAddress: s.addr, Slots: int32(len(execs)), Executions: execs[i:end], ChunkIndex: n, Last: end >= len(execs)}
		if err := stream.Send(c); err != nil {
			return err
		}
		s.chunks.Add(1)
	}
	return nil
}

func (s *simTM) SubmitTask(_ context.Context, req *pb.SubmitTaskRequest) (*pb.SubmitTaskResponse, error) {
	if err := s.fence(req.GetEpoch()); err != nil {
		return nil, err
	}
	s.submits.Add(1)
	return &pb.SubmitTaskResponse{}, nil
}

func (s *simTM) CancelTask(_ context.Context, req *pb.CancelTaskRequest) (*pb.CancelTaskResponse, error) {
	if err := s.fence(req.GetEpoch()); err != nil {
		return nil, err
	}
	s.cancels.Add(1)
	return &pb.CancelTaskResponse{State: pb.ExecutionState_EXECUTION_STATE_CANCELED}, nil
}

func (s *simTM) AcknowledgeTerminal(_ context.Context, req *pb.AcknowledgeTerminalRequest) (*pb.AcknowledgeTerminalResponse, error) {
	if err := s.fence(req.GetEpoch()); err != nil {
		return nil, err
	}
	return &pb.AcknowledgeTerminalResponse{}, nil
}

// wideChain is a streaming job of `vertices` FORWARD-chained vertices of parallelism p.
func wideChain(vertices int, p int32) *pb.JobGraph {
	jg := &pb.JobGraph{Name: "wide", Type: pb.JobType_JOB_TYPE_STREAMING,
		RestartStrategy: &pb.RestartStrategy{Kind: pb.RestartKind_RESTART_KIND_NONE}}
	for i := 0; i < vertices; i++ {
		v := &pb.JobVertex{Id: fmt.Sprintf("v%03d", i), Parallelism: p, Operator: &pb.Operator{Kind: &pb.Operator_Map{Map: &pb.MapOperator{Multiply: 1}}}}
		switch i {
		case 0:
			v.Operator = &pb.Operator{Kind: &pb.Operator_SequenceSource{SequenceSource: &pb.SequenceSource{Keys: 1}}}
		case vertices - 1:
			v.Operator = &pb.Operator{Kind: &pb.Operator_LogSink{LogSink: &pb.LogSink{}}}
		}
		jg.Vertices = append(jg.Vertices, v)
		if i > 0 {
			jg.Edges = append(jg.Edges, &pb.JobEdge{Source: jg.Vertices[i-1].Id, Target: v.Id,
				Distribution: pb.Distribution_DISTRIBUTION_FORWARD, ResultType: pb.ResultType_RESULT_TYPE_PIPELINED})
		}
	}
	return jg
}

// scaleVertices is the number of 1000-wide vertices of the scale test: 100 (100,000
// executions), 20 under the race detector (where setting up 100,000 committed executions alone
// takes minutes on two cores), unless JMCLUSTER_SCALE_VERTICES says otherwise.
func scaleVertices(t *testing.T) int {
	if s := os.Getenv("JMCLUSTER_SCALE_VERTICES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 2 || n > 256 {
			t.Fatalf("JMCLUSTER_SCALE_VERTICES=%q: want 2..256", s)
		}
		return n
	}
	if raceEnabled {
		return 20
	}
	return 100
}

// runningCount counts the job's executions in RUNNING on replica j without copying the job.
func runningCount(j *tc.JM, id string) (running, total int) {
	j.A.State.WithJob(id, func(rec *pb.JobRecord) {
		for _, v := range rec.ExecutionGraph.Vertices {
			for _, ev := range v.Subtasks {
				total++
				if ev.GetCurrent().GetState() == stRunning {
					running++
				}
			}
		}
	})
	return running, total
}

// TestReconcile100kExecutions: one job of 100,000 executions on 10 simulated TMs; the leader
// is killed; the new leader asks every TM for its report (streamed in chunks), merges, and
// commits RUNNING for every execution in chunks. The reconciliation time is logged.
func TestReconcile100kExecutions(t *testing.T) {
	const p, nTMs = 1000, 10
	vertices := scaleVertices(t)
	total := vertices * p
	// Entries of thousands of executions, applied under -race on a loaded two-core machine: a
	// follower can be busy for seconds, so Raft timings well above a real deployment's keep the
	// setup's leader in place (with the defaults a leader lost its lease mid-setup under load).
	// The test measures the reconciliation, not the election.
	c := tc.New(t, tc.Options{JMs: 3, ReportDeadline: 30 * time.Second, LogLevel: hclog.Info, Raft: func(cc *cluster.Config) {
		cc.HeartbeatTimeout, cc.ElectionTimeout, cc.LeaderLeaseTimeout = 5*time.Second, 5*time.Second, 3*time.Second
		cc.ApplyTimeout, cc.EstablishTimeout = 60*time.Second, 60*time.Second
	}})
	sims := make([]*simTM, nTMs)
	for i := range sims {
		sims[i] = startSimTM(t, fmt.Sprintf("sim%02d", i))
	}
	jg := wideChain(vertices, p)
	id := c.Submit(jg)
	l1 := c.Leader()
	tc.WaitFor(t, 30*time.Second, "the job RUNNING", func() (bool, string) {
		ok := false
		l1.A.State.WithJob(id, func(rec *pb.JobRecord) { ok = rec.Status == jobRunning })
		return ok, ""
	})

	// Commit the attempts as the leader would, region by region (a region is one subtask index
	// of every vertex), with the simulated TMs' addresses; the TMs hold the same attempts.
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const regionsPerChunk = 50
	slot := make([]int32, nTMs)
	for r0 := 0; r0 < p; r0 += regionsPerChunk {
		ts := time.Now().UnixMilli()
		create := &pb.CreateAttemptsCommand{JobId: id, Timestamp: ts}
		deploying, running := &pb.UpdateExecutionStatesCommand{}, &pb.UpdateExecutionStatesCommand{}
		for sub := r0; sub < min(r0+regionsPerChunk, p); sub++ {
			for v := 0; v < vertices; v++ {
				sim := sims[(sub*vertices+v)%nTMs]
				tmIdx := (sub*vertices + v) % nTMs
				a := &pb.AttemptSpec{VertexId: jg.Vertices[v].Id, SubtaskIndex: int32(sub), AttemptId: fmt.Sprintf("%032x", sub*vertices+v+1),
					Slot: &pb.SlotID{TmId: sim.id, Index: slot[tmIdx]}, TmGrpcAddress: sim.addr, TmDataAddress: sim.addr}
				slot[tmIdx]++
				create.Attempts = append(create.Attempts, a)
				deploying.Updates = append(deploying.Updates, &pb.ExecutionStateUpdate{JobId: id, AttemptId: a.AttemptId, State: stDeploying, Timestamp: ts})
				running.Updates = append(running.Updates, &pb.ExecutionStateUpdate{JobId: id, AttemptId: a.AttemptId, State: stRunning, Timestamp: ts})
				rep := &pb.ExecutionReport{JobId: id, VertexId: a.VertexId, SubtaskIndex: a.SubtaskIndex, AttemptId: a.AttemptId,
					StartTimestamp: ts, State: stRunning, SlotIndex: a.Slot.Index}
				if v < vertices-1 {
					rep.Produced = []*pb.ProducedPartitionReport{{ResultId: graph.ResultID(a.VertexId, jg.Vertices[v+1].Id), PartitionIndex: int32(sub), Consumable: true}}
				}
				if v > 0 {
					rep.Consumed = []*pb.ConsumedPartitionReport{{ResultId: graph.ResultID(jg.Vertices[v-1].Id, a.VertexId), PartitionIndex: int32(sub)}}
				}
				sim.mu.Lock()
				sim.execs = append(sim.execs, rep)
				sim.mu.Unlock()
			}
		}
		if _, err := l1.A.JM.Commit(ctx, pb.CommandType_COMMAND_TYPE_CREATE_ATTEMPTS, create); err != nil {
			t.Fatalf("create attempts at region %d: %v", r0, err)
		}
		for _, u := range []*pb.UpdateExecutionStatesCommand{deploying, running} {
			if _, err := l1.A.JM.Commit(ctx, pb.CommandType_COMMAND_TYPE_UPDATE_EXECUTION_STATES, u); err != nil {
				t.Fatalf("update states at region %d: %v", r0, err)
			}
		}
	}
	if n, all := runningCount(l1, id); n != total || all != total {
		t.Fatalf("%d of %d executions RUNNING after the setup, want %d", n, all, total)
	}
	t.Logf("setup: %d executions committed RUNNING on %d simulated TMs in %s", total, nTMs, time.Since(start).Round(time.Millisecond))

	e1 := l1.A.JM.Epoch()
	killed := time.Now()
	c.KillJM(l1)
	var l2 *tc.JM
	tc.WaitFor(t, 30*time.Second, "a new leader", func() (bool, string) {
		for _, j := range c.Live() {
			if e := j.A.JM.Epoch(); e > e1 {
				l2 = j
				return true, ""
			}
		}
		return false, ""
	})
	e2 := l2.A.JM.Epoch()
	r := c.Reconciliation(l2, e2, "completed", 2*time.Minute)
	wall := time.Since(killed)
	if r.Counts.Executions != int64(total) || r.Counts.KeptRunning != int64(total) || r.Counts.Reports != nTMs ||
		r.Counts.Missing+r.Counts.Failed+r.Counts.Rejected+r.Counts.TmsMissing != 0 {
		t.Fatalf("reconciliation counts %v, want %d executions kept running from %d reports", r.Counts, total, nTMs)
	}
	for _, j := range c.Live() {
		tc.WaitFor(t, time.Minute, j.ID+" applied the reconciled graph", func() (bool, string) {
			n, all := runningCount(j, id)
			st := pb.JobStatus_JOB_STATUS_UNSPECIFIED
			j.A.State.WithJob(id, func(rec *pb.JobRecord) { st = rec.Status })
			return n == total && all == total && st == jobRunning, fmt.Sprintf("%d of %d RUNNING, job %s", n, all, graph.JobStatusName(st))
		})
	}
	var chunks, cancels int64
	for _, s := range sims {
		if s.reports.Load() < 1 {
			t.Fatalf("%s was not asked for a report", s.id)
		}
		chunks += s.chunks.Load()
		cancels += s.cancels.Load()
		s.mu.Lock()
		seen := s.epoch
		s.mu.Unlock()
		if seen < e2 {
			t.Fatalf("%s did not adopt epoch %d", s.id, e2)
		}
	}
	if cancels != 0 {
		t.Fatalf("%d cancels sent to the simulated TMs, want 0", cancels)
	}
	t.Logf("reconciled %d executions from %d TMs (%d report chunks): %d ms from start to commit (record), %s from the kill to the completed record on the new leader",
		total, nTMs, chunks, r.EndedAt-r.StartedAt, wall.Round(time.Millisecond))
}
