package agent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jmcluster/jmcluster/cluster"

	"github.com/jmcluster/jmcluster/jobmaster"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// updateStream hands out legal execution-state updates for a job committed on a three-node
// Raft cluster, committing fresh attempts (outside the timer) whenever a cycle is used up.
type updateStream struct {
	b      *testing.B
	jm     *jobmaster.JobMaster
	jobID  string
	tasks  int
	cycle  int
	ids    []string
	queued []*pb.ExecutionStateUpdate
}

var cycle = []pb.ExecutionState{
	pb.ExecutionState_EXECUTION_STATE_DEPLOYING, pb.ExecutionState_EXECUTION_STATE_INITIALIZING,
	pb.ExecutionState_EXECUTION_STATE_RUNNING, pb.ExecutionState_EXECUTION_STATE_CANCELING,
	pb.ExecutionState_EXECUTION_STATE_CANCELED,
}

func (s *updateStream) next(n int) []*pb.ExecutionStateUpdate {
	for len(s.queued) < n {
		s.b.StopTimer()
		s.newAttempts()
		for _, st := range cycle {
			for _, id := range s.ids {
				s.queued = append(s.queued, &pb.ExecutionStateUpdate{JobId: s.jobID, AttemptId: id, State: st, Timestamp: time.Now().UnixMilli()})
			}
		}
		s.b.StartTimer()
	}
	out := s.queued[:n]
	s.queued = s.queued[n:]
	return out
}

func (s *updateStream) newAttempts() {
	s.cycle++
	cmd := &pb.CreateAttemptsCommand{JobId: s.jobID, Timestamp: time.Now().UnixMilli()}
	s.ids = s.ids[:0]
	for i := 0; i < s.tasks; i++ {
		id := fmt.Sprintf("%08x%08x%016x", s.cycle, i, 0)
		s.ids = append(s.ids, id)
		cmd.Attempts = append(cmd.Attempts, &pb.AttemptSpec{VertexId: "v", SubtaskIndex: int32(i), AttemptId: id, AttemptNumber: int32(s.cycle),
			Slot: &pb.SlotID{TmId: "bench-tm", Index: int32(i)}})
	}
	if _, err := s.jm.Commit(context.Background(), pb.CommandType_COMMAND_TYPE_CREATE_ATTEMPTS, cmd); err != nil {
		s.b.Fatal(err)
	}
}

func benchCommit(b *testing.B, perEntry int) {
	// Production Raft timings: the fast test timings may elect a new leader under a saturated
	// CPU, and a new leader would reconcile the benchmark's attempts away.
	c := testcluster.New(b, testcluster.Options{JMs: 3, LogLevel: hclog.Warn, Raft: func(cc *cluster.Config) {
		d := cluster.DefaultConfig()
		cc.HeartbeatTimeout, cc.ElectionTimeout, cc.LeaderLeaseTimeout = d.HeartbeatTimeout, d.ElectionTimeout, d.LeaderLeaseTimeout
	}})
	l := c.Leader()
	jobID := jobmaster.NewJobID()
	jg := &pb.JobGraph{JobId: jobID, Name: "bench", Type: pb.JobType_JOB_TYPE_STREAMING, Vertices: []*pb.JobVertex{
		{Id: "v", Parallelism: 500, Operator: &pb.Operator{Kind: &pb.Operator_SequenceSource{SequenceSource: &pb.SequenceSource{}}}},
		{Id: "k", Parallelism: 1, Operator: &pb.Operator{Kind: &pb.Operator_LogSink{LogSink: &pb.LogSink{}}}},
	}, Edges: []*pb.JobEdge{{Source: "v", Target: "k", Distribution: pb.Distribution_DISTRIBUTION_ALL_TO_ALL, ResultType: pb.ResultType_RESULT_TYPE_PIPELINED}}}
	if _, err := l.A.JM.Commit(context.Background(), pb.CommandType_COMMAND_TYPE_SUBMIT_JOB, &pb.SubmitJobCommand{JobGraph: jg, Timestamp: 1}); err != nil {
		b.Fatal(err)
	}
	// Hold the job in RECONCILING, which the scheduler leaves alone: the benchmark's attempts
	// have no TaskManager behind them and must not be deployed or failed over.
	if _, err := l.A.JM.Commit(context.Background(), pb.CommandType_COMMAND_TYPE_SET_JOB_STATUS, &pb.SetJobStatusCommand{JobId: jobID, Status: pb.JobStatus_JOB_STATUS_RECONCILING, Timestamp: 2}); err != nil {
		b.Fatal(err)
	}
	s := &updateStream{b: b, jm: l.A.JM, jobID: jobID, tasks: 500}
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += perEntry {
		n := min(perEntry, b.N-done)
		res, err := l.A.JM.Commit(context.Background(), pb.CommandType_COMMAND_TYPE_UPDATE_EXECUTION_STATES, &pb.UpdateExecutionStatesCommand{Updates: s.next(n)})
		if err != nil {
			b.Fatal(err)
		}
		for _, e := range res.Value.(*pb.UpdateExecutionStatesResult).Errors {
			if e != "" {
				b.Fatal(e)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/update")
}

// BenchmarkCommitStateUpdate1 commits execution-state updates one per Raft entry on a
// three-node cluster over loopback: the baseline for the batched commit below.
func BenchmarkCommitStateUpdate1(b *testing.B) { benchCommit(b, 1) }

// BenchmarkCommitStateUpdate100 commits the same updates 100 per Raft entry, as the leader's
// batcher does under load.
func BenchmarkCommitStateUpdate100(b *testing.B) { benchCommit(b, 100) }
