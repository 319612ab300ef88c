package jobmaster

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// Fixtures of the pure rules' tests (plan_test.go, checkpoint_rules_test.go, ...): committed
// job records built from small graphs, without a cluster.

// planChain is source -> map -> sink, FORWARD and PIPELINED, parallelism p: p failover
// regions, region i holding subtask i of every vertex.
func planChain(p int32) *pb.JobGraph {
	fwd := func(a, b string) *pb.JobEdge {
		return &pb.JobEdge{Source: a, Target: b, Distribution: pb.Distribution_DISTRIBUTION_FORWARD, ResultType: pb.ResultType_RESULT_TYPE_PIPELINED}
	}
	return &pb.JobGraph{
		JobId: "job", Name: "chain", Type: pb.JobType_JOB_TYPE_STREAMING,
		Vertices: []*pb.JobVertex{
			{Id: "source", Parallelism: p, Operator: &pb.Operator{Kind: &pb.Operator_SequenceSource{SequenceSource: &pb.SequenceSource{RatePerSecond: 10}}}},
			{Id: "map", Parallelism: p, Operator: &pb.Operator{Kind: &pb.Operator_Map{Map: &pb.MapOperator{Multiply: 1}}}},
			{Id: "sink", Parallelism: p, Operator: &pb.Operator{Kind: &pb.Operator_LogSink{LogSink: &pb.LogSink{}}}},
		},
		Edges: []*pb.JobEdge{fwd("source", "map"), fwd("map", "sink")},
	}
}

// planBatch is source -> sink, ALL_TO_ALL and BLOCKING, parallelism 2 each: four regions of
// one subtask; the sinks' input is the sources' blocking result.
func planBatch() *pb.JobGraph {
	return &pb.JobGraph{
		JobId: "job", Name: "batch", Type: pb.JobType_JOB_TYPE_BATCH,
		Vertices: []*pb.JobVertex{
			{Id: "source", Parallelism: 2, Operator: &pb.Operator{Kind: &pb.Operator_SequenceSource{SequenceSource: &pb.SequenceSource{Count: 10}}}},
			{Id: "sink", Parallelism: 2, Operator: &pb.Operator{Kind: &pb.Operator_LogSink{LogSink: &pb.LogSink{}}}},
		},
		Edges: []*pb.JobEdge{{Source: "source", Target: "sink", Distribution: pb.Distribution_DISTRIBUTION_ALL_TO_ALL, ResultType: pb.ResultType_RESULT_TYPE_BLOCKING}},
	}
}

// planJob builds a committed job record: status, and the current execution of each subtask
// named in states ("vertex[i]" -> state, attempt "vertex-i-a<n>", number n, on tm<i+1>).
// Subtasks not named were never deployed.
func planJob(t *testing.T, jg *pb.JobGraph, status pb.JobStatus, n int32, states map[string]pb.ExecutionState) *pb.JobRecord {
	t.Helper()
	eg, err := graph.BuildExecutionGraph(jg)
	if err != nil {
		t.Fatal(err)
	}
	for key, st := range states {
		var vertex string
		var subtask int32
		if _, err := fmt.Sscanf(strings.Replace(key, "[", " ", 1), "%s %d]", &vertex, &subtask); err != nil {
			t.Fatalf("bad key %q: %v", key, err)
		}
		ev := graph.FindVertex(eg, vertex, subtask)
		if ev == nil {
			t.Fatalf("no subtask %s", key)
		}
		tm := fmt.Sprintf("tm%d", subtask+1)
		ev.Current = &pb.Execution{
			AttemptId: fmt.Sprintf("%s-%d-a%d", vertex, subtask, n), AttemptNumber: n, State: st,
			Slot: &pb.SlotID{TmId: tm, Index: 0}, TmGrpcAddress: tm + ":1", TmDataAddress: tm + ":2",
		}
		if st == stFailed {
			ev.Current.FailureCause = "boom"
		}
	}
	return &pb.JobRecord{JobGraph: jg, ExecutionGraph: eg, Status: status, FailureCause: "boom"}
}

// every names each subtask of a chain of parallelism p with state st.
func every(p int32, st pb.ExecutionState) map[string]pb.ExecutionState {
	out := map[string]pb.ExecutionState{}
	for _, v := range []string{"source", "map", "sink"} {
		for i := range p {
			out[fmt.Sprintf("%s[%d]", v, i)] = st
		}
	}
	return out
}

// with returns m with the given keys changed.
func with(m map[string]pb.ExecutionState, kv ...any) map[string]pb.ExecutionState {
	out := map[string]pb.ExecutionState{}
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(out, kv[i].(string))
			continue
		}
		out[kv[i].(string)] = kv[i+1].(pb.ExecutionState)
	}
	return out
}

// planTMs are usable TaskManagers with the given slot counts, tm1, tm2, ...
func planTMs(slots ...int32) []TaskManager {
	out := make([]TaskManager, len(slots))
	for i, s := range slots {
		id := fmt.Sprintf("tm%d", i+1)
		out[i] = TaskManager{ID: id, GRPCAddr: id + ":1", DataAddr: id + ":2", Slots: s}
	}
	return out
}
