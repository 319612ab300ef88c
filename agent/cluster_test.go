package agent_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestThreeJobMasters: a job submitted through a follower is on every replica; the leader is
// stopped abruptly; a new leader with a strictly greater epoch has the job and its graph
// intact; the old leader restarts from its data directory and catches up.
func TestThreeJobMasters(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{JMs: 3})
	l1 := c.Leader()
	e1 := l1.A.JM.Epoch()
	if e1 == 0 {
		t.Fatalf("leader %s has epoch 0", l1.ID)
	}
	id := c.Submit(testcluster.StreamingChain("core", 2, 10, 0))
	var want *pb.JobRecord
	testcluster.WaitFor(t, 10*time.Second, "the job on all three replicas", func() (bool, string) {
		var seen []string
		for _, j := range c.Live() {
			rec, ok := j.A.State.Job(id)
			if !ok {
				seen = append(seen, j.ID+": missing")
				continue
			}
			seen = append(seen, j.ID+": "+testcluster.Describe(rec))
		}
		return !strings.Contains(strings.Join(seen, ","), "missing") && len(seen) == 3, strings.Join(seen, "; ")
	})
	want = c.Job(id)

	c.KillJM(l1)
	l2 := c.Leader()
	if l2 == l1 {
		t.Fatal("the killed node is still the leader")
	}
	e2 := l2.A.JM.Epoch()
	if e2 <= e1 {
		t.Fatalf("epoch after the election %d is not greater than %d", e2, e1)
	}
	got := c.Job(id)
	if !proto.Equal(got.JobGraph, want.JobGraph) {
		t.Fatalf("job graph changed across the failover:\nwant %v\ngot  %v", want.JobGraph, got.JobGraph)
	}
	if len(got.ExecutionGraph.Vertices) != 3 || len(got.ExecutionGraph.Results) != 2 {
		t.Fatalf("execution graph not intact: %v", got.ExecutionGraph)
	}
	for i, v := range got.ExecutionGraph.Vertices {
		if v.VertexId != want.ExecutionGraph.Vertices[i].VertexId || len(v.Subtasks) != 2 {
			t.Fatalf("execution job vertex %d: %v", i, v)
		}
	}

	c.StartJM(l1)
	testcluster.WaitFor(t, 15*time.Second, "the restarted replica to catch up", func() (bool, string) {
		leader := c.Leader()
		ok := l1.A.State.AppliedIndex() >= leader.A.State.AppliedIndex() && l1.A.State.Hash() == leader.A.State.Hash()
		return ok, fmt.Sprintf("%s applied %d, leader %s applied %d", l1.ID, l1.A.State.AppliedIndex(), leader.ID, leader.A.State.AppliedIndex())
	})
	if rec, ok := l1.A.State.Job(id); !ok || !proto.Equal(rec.JobGraph, want.JobGraph) {
		t.Fatalf("restarted replica does not have the job: %v", rec)
	}

	// A second election: the epoch grows again.
	l3 := c.Leader()
	c.KillJM(l3)
	l4 := c.Leader()
	if e4 := l4.A.JM.Epoch(); e4 <= e2 {
		t.Fatalf("epoch after the second election %d is not greater than %d", e4, e2)
	}
}

// TestInvalidJobGraphs: every kind of invalid graph gets InvalidArgument naming every problem,
// and nothing is committed.
func TestInvalidJobGraphs(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{JMs: 3})
	before := c.Leader().A.State.Hash()
	src := func(id string, p int32) *pb.JobVertex {
		return &pb.JobVertex{Id: id, Parallelism: p, Operator: &pb.Operator{Kind: &pb.Operator_SequenceSource{SequenceSource: &pb.SequenceSource{Count: 10}}}}
	}
	mapv := func(id string, p int32) *pb.JobVertex {
		return &pb.JobVertex{Id: id, Parallelism: p, Operator: &pb.Operator{Kind: &pb.Operator_Map{Map: &pb.MapOperator{}}}}
	}
	sink := func(id string, p int32) *pb.JobVertex {
		return &pb.JobVertex{Id: id, Parallelism: p, Operator: &pb.Operator{Kind: &pb.Operator_LogSink{LogSink: &pb.LogSink{}}}}
	}
	edge := func(a, b string, d pb.Distribution) *pb.JobEdge {
		return &pb.JobEdge{Source: a, Target: b, Distribution: d, ResultType: pb.ResultType_RESULT_TYPE_PIPELINED}
	}
	fwd, all := pb.Distribution_DISTRIBUTION_FORWARD, pb.Distribution_DISTRIBUTION_ALL_TO_ALL
	stream := pb.JobType_JOB_TYPE_STREAMING
	cases := []struct {
		name string
		jg   *pb.JobGraph
		want []string
	}{
		{"no vertices", &pb.JobGraph{Name: "x", Type: stream}, []string{"vertices"}},
		{"cycle", &pb.JobGraph{Name: "x", Type: stream, Vertices: []*pb.JobVertex{src("s", 1), mapv("a", 1), mapv("b", 1), sink("k", 1)},
			Edges: []*pb.JobEdge{edge("s", "a", fwd), edge("a", "b", fwd), edge("b", "a", fwd), edge("b", "k", fwd)}}, []string{"cycle"}},
		{"unknown vertex", &pb.JobGraph{Name: "x", Type: stream, Vertices: []*pb.JobVertex{src("s", 1), sink("k", 1)},
			Edges: []*pb.JobEdge{edge("s", "k", fwd), edge("s", "nope", fwd)}}, []string{"nope"}},
		{"duplicate ids", &pb.JobGraph{Name: "x", Type: stream, Vertices: []*pb.JobVertex{src("s", 1), src("s", 1), sink("k", 1)},
			Edges: []*pb.JobEdge{edge("s", "k", fwd)}}, []string{"duplicate"}},
		{"parallelism", &pb.JobGraph{Name: "x", Type: stream, Vertices: []*pb.JobVertex{src("s", 0), sink("k", 100000)},
			Edges: []*pb.JobEdge{edge("s", "k", all)}}, []string{"vertices[0].parallelism", "vertices[1].parallelism"}},
		{"unknown operator", &pb.JobGraph{Name: "x", Type: stream, Vertices: []*pb.JobVertex{src("s", 1), {Id: "k", Parallelism: 1}},
			Edges: []*pb.JobEdge{edge("s", "k", fwd)}}, []string{"operator"}},
		{"bad operator config", &pb.JobGraph{Name: "x", Type: stream, Vertices: []*pb.JobVertex{
			{Id: "s", Parallelism: 1, Operator: &pb.Operator{Kind: &pb.Operator_SequenceSource{SequenceSource: &pb.SequenceSource{Count: -1}}}},
			{Id: "f", Parallelism: 1, Operator: &pb.Operator{Kind: &pb.Operator_Filter{Filter: &pb.FilterOperator{Modulus: 0}}}}, sink("k", 1)},
			Edges: []*pb.JobEdge{edge("s", "f", fwd), edge("f", "k", fwd)}}, []string{"count", "modulus"}},
		{"forward with unequal parallelism", &pb.JobGraph{Name: "x", Type: stream, Vertices: []*pb.JobVertex{src("s", 2), sink("k", 3)},
			Edges: []*pb.JobEdge{edge("s", "k", fwd)}}, []string{"FORWARD"}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, j := range c.Live() { // through the leader and through followers
				_, err := c.Client(j).SubmitJob(ctx, &pb.SubmitJobRequest{JobGraph: tc.jg})
				if status.Code(err) != codes.InvalidArgument {
					t.Fatalf("via %s: want InvalidArgument, got %v", j.ID, err)
				}
				for _, w := range tc.want {
					if !strings.Contains(status.Convert(err).Message(), w) {
						t.Fatalf("via %s: error does not mention %q:\n%s", j.ID, w, status.Convert(err).Message())
					}
				}
			}
		})
	}
	if after := c.Leader().A.State.Hash(); after != before {
		t.Fatal("an invalid job changed the replicated state")
	}
	if n := len(c.Leader().A.State.Jobs()); n != 0 {
		t.Fatalf("%d jobs committed", n)
	}
}
