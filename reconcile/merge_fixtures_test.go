package reconcile_test

import (
	"fmt"
	"testing"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/reconcile"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// Fixtures of the merge's tests (merge_test.go, fuzz_test.go, bench_test.go): RECONCILING chain
// jobs and the reports honest TaskManagers would send for them.

const (
	stRunning     = pb.ExecutionState_EXECUTION_STATE_RUNNING
	stFinished    = pb.ExecutionState_EXECUTION_STATE_FINISHED
	stFailed      = pb.ExecutionState_EXECUTION_STATE_FAILED
	stCanceled    = pb.ExecutionState_EXECUTION_STATE_CANCELED
	stCanceling   = pb.ExecutionState_EXECUTION_STATE_CANCELING
	stDeploying   = pb.ExecutionState_EXECUTION_STATE_DEPLOYING
	stReconciling = pb.ExecutionState_EXECUTION_STATE_RECONCILING

	jobRunning     = pb.JobStatus_JOB_STATUS_RUNNING
	jobFailing     = pb.JobStatus_JOB_STATUS_FAILING
	jobFinished    = pb.JobStatus_JOB_STATUS_FINISHED
	jobCancelling  = pb.JobStatus_JOB_STATUS_CANCELLING
	jobReconciling = pb.JobStatus_JOB_STATUS_RECONCILING
)

// chainGraph is source -> map -> sink, FORWARD and PIPELINED, parallelism p.
func chainGraph(jobID string, p int32) *pb.JobGraph {
	fwd := func(s, d string) *pb.JobEdge {
		return &pb.JobEdge{Source: s, Target: d, Distribution: pb.Distribution_DISTRIBUTION_FORWARD, ResultType: pb.ResultType_RESULT_TYPE_PIPELINED}
	}
	return &pb.JobGraph{
		JobId: jobID, Name: jobID, Type: pb.JobType_JOB_TYPE_STREAMING,
		Vertices: []*pb.JobVertex{
			{Id: "source", Parallelism: p, Operator: &pb.Operator{Kind: &pb.Operator_SequenceSource{SequenceSource: &pb.SequenceSource{Keys: 4}}}},
			{Id: "map", Parallelism: p, Operator: &pb.Operator{Kind: &pb.Operator_Map{Map: &pb.MapOperator{Multiply: 2}}}},
			{Id: "sink", Parallelism: p, Operator: &pb.Operator{Kind: &pb.Operator_LogSink{LogSink: &pb.LogSink{}}}},
		},
		Edges: []*pb.JobEdge{fwd("source", "map"), fwd("map", "sink")},
	}
}

func attemptID(vertex string, subtask, number int32) string {
	return fmt.Sprintf("%s-%d-a%d", vertex, subtask, number)
}

// tmOf places subtask i of every vertex on tm<i+1>.
func tmOf(subtask int32) string { return fmt.Sprintf("tm%d", subtask+1) }

// reconcilingJob is a committed job as BeginReconciliation leaves it: RECONCILING, with every
// execution RECONCILING at attempt number n, subtask i on tm<i+1>.
func reconcilingJob(t testing.TB, jobID string, p, n int32) *pb.JobRecord {
	t.Helper()
	jg := chainGraph(jobID, p)
	eg, err := graph.BuildExecutionGraph(jg)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range eg.Vertices {
		for _, ev := range v.Subtasks {
			ev.Current = &pb.Execution{
				AttemptId: attemptID(ev.VertexId, ev.SubtaskIndex, n), AttemptNumber: n, StartTimestamp: 100, State: stReconciling,
				StateTimestamps: []*pb.StateTimestamp{{State: stRunning, Timestamp: 100}, {State: stReconciling, Timestamp: 200}},
				Slot:            &pb.SlotID{TmId: tmOf(ev.SubtaskIndex), Index: 0}, TmGrpcAddress: tmOf(ev.SubtaskIndex) + ":1",
			}
		}
	}
	graph.RefreshProducers(eg)
	return &pb.JobRecord{
		JobGraph: jg, ExecutionGraph: eg, Status: jobReconciling,
		History: []*pb.JobStatusChange{{Status: jobRunning, Timestamp: 100}, {Status: jobReconciling, Timestamp: 200}},
	}
}

// honestReports: every TM reports every execution it holds, in state st, with the partitions
// the graph expects.
func honestReports(rec *pb.JobRecord, st pb.ExecutionState) map[string]*reconcile.Report {
	out := map[string]*reconcile.Report{}
	jobID := rec.JobGraph.JobId
	for _, v := range rec.ExecutionGraph.Vertices {
		for _, ev := range v.Subtasks {
			e := ev.Current
			tm := e.Slot.TmId
			r := out[tm]
			if r == nil {
				r = &reconcile.Report{TMID: tm, Addr: tm + ":1"}
				out[tm] = r
			}
			rep := &pb.ExecutionReport{JobId: jobID, VertexId: ev.VertexId, SubtaskIndex: ev.SubtaskIndex,
				AttemptId: e.AttemptId, AttemptNumber: e.AttemptNumber, StartTimestamp: 150, State: st, SlotIndex: e.Slot.Index}
			for _, res := range rec.ExecutionGraph.Results {
				if res.ProducerVertexId == ev.VertexId {
					rep.Produced = append(rep.Produced, &pb.ProducedPartitionReport{ResultId: res.ResultId, PartitionIndex: ev.SubtaskIndex, Consumable: true})
				}
			}
			for _, in := range graph.Inputs(rec.ExecutionGraph, ev) {
				rep.Consumed = append(rep.Consumed, &pb.ConsumedPartitionReport{ResultId: in.ResultId, PartitionIndex: in.PartitionIndex, ProducerAttemptId: in.ProducerAttemptId})
			}
			r.Executions = append(r.Executions, rep)
		}
	}
	return out
}

// findRep returns the report of vertex[subtask] in reports.
func findRep(reports map[string]*reconcile.Report, vertex string, subtask int32) *pb.ExecutionReport {
	for _, r := range reports {
		for _, e := range r.Executions {
			if e.VertexId == vertex && e.SubtaskIndex == subtask {
				return e
			}
		}
	}
	return nil
}

func planState(p *reconcile.Plan, vertex string, subtask int32) *pb.Execution {
	for _, jp := range p.Jobs {
		for _, re := range jp.Executions {
			if re.VertexId == vertex && re.SubtaskIndex == subtask {
				return re.Execution
			}
		}
	}
	return nil
}
