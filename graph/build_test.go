package graph

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/transport/pb"
)

func TestTopologicalOrderDeterministic(t *testing.T) {
	// Vertices listed out of order; ties are broken by list position.
	jg := job([]*pb.JobVertex{sink("sink", 1), mapper("m2", 1), source("b", 1, 0), mapper("m1", 1), source("a", 1, 0)},
		all("a", "m1"), all("b", "m2"), all("m1", "sink"), all("m2", "sink"))
	got, err := TopologicalOrder(jg)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"b", "m2", "a", "m1", "sink"}
	if !slices.Equal(got, want) {
		t.Fatalf("order = %v, want %v", got, want)
	}
	for i := 0; i < 5; i++ {
		again, _ := TopologicalOrder(jg)
		if !slices.Equal(again, got) {
			t.Fatalf("order changed: %v", again)
		}
	}
}

func TestTopologicalOrderErrors(t *testing.T) {
	cyc := job([]*pb.JobVertex{mapper("a", 1), mapper("b", 1)}, all("a", "b"), all("b", "a"))
	unknown := job([]*pb.JobVertex{mapper("a", 1)}, all("a", "zz"))
	dup := job([]*pb.JobVertex{mapper("a", 1), mapper("a", 1)})
	for name, jg := range map[string]*pb.JobGraph{"cycle": cyc, "unknown": unknown, "dup": dup, "nil": nil} {
		if _, err := TopologicalOrder(jg); !errors.Is(err, ErrInvalidJobGraph) {
			t.Errorf("%s: err = %v", name, err)
		}
		if _, err := BuildExecutionGraph(jg); !errors.Is(err, ErrInvalidJobGraph) {
			t.Errorf("%s: build err = %v", name, err)
		}
	}
}

func TestBuildForwardAndAllToAll(t *testing.T) {
	jg := pipeline(2, 3)
	eg, err := BuildExecutionGraph(jg)
	if err != nil {
		t.Fatal(err)
	}
	if eg.JobId != jg.JobId || len(eg.Vertices) != 3 || len(eg.Results) != 2 {
		t.Fatalf("graph shape: %v", eg)
	}
	for i, want := range []struct {
		id string
		p  int32
	}{{"src", 2}, {"map", 2}, {"sink", 3}} {
		ejv := eg.Vertices[i]
		if ejv.VertexId != want.id || ejv.Parallelism != want.p || len(ejv.Subtasks) != int(want.p) {
			t.Errorf("vertex %d = %s/%d/%d", i, ejv.VertexId, ejv.Parallelism, len(ejv.Subtasks))
		}
		for s, ev := range ejv.Subtasks {
			if ev.VertexId != want.id || ev.SubtaskIndex != int32(s) || ev.Current != nil {
				t.Errorf("subtask %s/%d = %v", want.id, s, ev)
			}
		}
	}
	fr := eg.Results[0]
	if fr.ResultId != "src->map" || ResultID("src", "map") != fr.ResultId || len(fr.Partitions) != 2 {
		t.Fatalf("forward result: %v", fr)
	}
	for _, p := range fr.Partitions {
		if p.NumSubpartitions != 1 || p.Consumable || p.ProducerAttemptId != "" {
			t.Errorf("forward partition: %v", p)
		}
	}
	ar := eg.Results[1]
	if ar.ResultId != "map->sink" || ar.Distribution != pb.Distribution_DISTRIBUTION_ALL_TO_ALL || len(ar.Partitions) != 2 {
		t.Fatalf("all-to-all result: %v", ar)
	}
	for _, p := range ar.Partitions {
		if p.NumSubpartitions != 3 {
			t.Errorf("all-to-all partition subpartitions = %d", p.NumSubpartitions)
		}
	}
	// FORWARD: map[i] reads partition i, subpartition 0.
	for i, ev := range eg.Vertices[1].Subtasks {
		if len(Inputs(eg, ev)) != 1 || Inputs(eg, ev)[0].ResultId != "src->map" || Inputs(eg, ev)[0].PartitionIndex != int32(i) || Inputs(eg, ev)[0].SubpartitionIndex != 0 {
			t.Errorf("map[%d] inputs: %v", i, Inputs(eg, ev))
		}
	}
	// ALL_TO_ALL: sink[c] reads every partition p at subpartition c.
	for c, ev := range eg.Vertices[2].Subtasks {
		if len(Inputs(eg, ev)) != 2 {
			t.Fatalf("sink[%d] inputs: %v", c, Inputs(eg, ev))
		}
		for p, in := range Inputs(eg, ev) {
			if in.ResultId != "map->sink" || in.PartitionIndex != int32(p) || in.SubpartitionIndex != int32(c) {
				t.Errorf("sink[%d] input %d: %v", c, p, in)
			}
		}
	}
	if len(Inputs(eg, eg.Vertices[0].Subtasks[0])) != 0 {
		t.Errorf("source has inputs")
	}
}

func TestBuildBlockingAndMixed(t *testing.T) {
	jg := job([]*pb.JobVertex{source("a", 2, 10), source("b", 1, 10), mapper("j", 2), sink("s", 1)},
		blocking(fwd("a", "j")), all("b", "j"), blocking(all("j", "s")))
	eg, err := BuildExecutionGraph(jg)
	if err != nil {
		t.Fatal(err)
	}
	j1 := FindVertex(eg, "j", 1)
	if j1 == nil || len(Inputs(eg, j1)) != 2 {
		t.Fatalf("j[1] inputs: %v", j1)
	}
	if in := Inputs(eg, j1)[0]; in.ResultId != "a->j" || in.PartitionIndex != 1 || in.SubpartitionIndex != 0 {
		t.Errorf("j[1] forward input: %v", in)
	}
	if in := Inputs(eg, j1)[1]; in.ResultId != "b->j" || in.PartitionIndex != 0 || in.SubpartitionIndex != 1 {
		t.Errorf("j[1] all-to-all input: %v", in)
	}
	if eg.Results[0].ResultType != pb.ResultType_RESULT_TYPE_BLOCKING || eg.Results[2].Partitions[1].NumSubpartitions != 1 {
		t.Errorf("results: %v", eg.Results)
	}
}

func attempt(ev *pb.ExecutionVertex, n int) {
	ev.Current = &pb.Execution{
		AttemptId:     fmt.Sprintf("%s-%d-%d", ev.VertexId, ev.SubtaskIndex, n),
		AttemptNumber: int32(n),
		State:         pb.ExecutionState_EXECUTION_STATE_SCHEDULED,
		TmDataAddress: fmt.Sprintf("tm%d:1", ev.SubtaskIndex),
	}
}

func TestExecGraphHelpersAndRefresh(t *testing.T) {
	eg, err := BuildExecutionGraph(pipeline(2, 3))
	if err != nil {
		t.Fatal(err)
	}
	if FindJobVertex(eg, "map") == nil || FindJobVertex(eg, "nope") != nil {
		t.Errorf("FindJobVertex")
	}
	if FindVertex(eg, "sink", 2) == nil || FindVertex(eg, "sink", 3) != nil || FindVertex(eg, "sink", -1) != nil {
		t.Errorf("FindVertex bounds")
	}
	all := AllExecutions(eg)
	if len(all) != 7 || all[0].VertexId != "src" || all[6].VertexId != "sink" || all[6].SubtaskIndex != 2 {
		t.Fatalf("AllExecutions order: %d", len(all))
	}
	if n := len(CountByState(eg)); n != 0 {
		t.Errorf("CountByState with no attempts = %d entries", n)
	}
	for _, ev := range all[:4] { // src and map
		attempt(ev, 0)
	}
	RefreshProducers(eg)
	before := fmt.Sprint(eg)
	RefreshProducers(eg)
	if fmt.Sprint(eg) != before {
		t.Errorf("RefreshProducers is not idempotent")
	}
	if ev := FindAttempt(eg, "map-1-0"); ev == nil || ev.VertexId != "map" || ev.SubtaskIndex != 1 {
		t.Errorf("FindAttempt = %v", ev)
	}
	if FindAttempt(eg, "") != nil || FindAttempt(eg, "zzz") != nil {
		t.Errorf("FindAttempt of unknown id")
	}
	if c := CountByState(eg); c[pb.ExecutionState_EXECUTION_STATE_SCHEDULED] != 4 {
		t.Errorf("CountByState = %v", c)
	}
	p := eg.Results[1].Partitions[1]
	if p.ProducerAttemptId != "map-1-0" || p.DataAddress != "tm1:1" {
		t.Errorf("partition producer: %v", p)
	}
	in := Inputs(eg, FindVertex(eg, "sink", 2))[1]
	if in.ProducerAttemptId != "map-1-0" || in.ProducerDataAddress != "tm1:1" {
		t.Errorf("channel producer: %v", in)
	}
	in = Inputs(eg, FindVertex(eg, "map", 0))[0]
	if in.ProducerAttemptId != "src-0-0" {
		t.Errorf("forward channel producer: %v", in)
	}
	// A new attempt replaces the producer everywhere; clearing it clears the descriptors.
	attempt(FindVertex(eg, "map", 1), 1)
	RefreshProducers(eg)
	if got := Inputs(eg, FindVertex(eg, "sink", 0))[1].ProducerAttemptId; got != "map-1-1" {
		t.Errorf("after new attempt: %q", got)
	}
	FindVertex(eg, "map", 1).Current = nil
	RefreshProducers(eg)
	if in := Inputs(eg, FindVertex(eg, "sink", 0))[1]; in.ProducerAttemptId != "" || in.ProducerDataAddress != "" {
		t.Errorf("after clearing: %v", in)
	}
}

// TestBuiltGraphKeepsNoChannels: BuildExecutionGraph keeps no input channel; InputCount counts
// what Inputs makes; MaterializeInputs writes exactly Inputs into every subtask and StripInputs
// takes them out again, leaving the graph as built.
func TestBuiltGraphKeepsNoChannels(t *testing.T) {
	jg := job([]*pb.JobVertex{source("a", 2, 10), source("b", 3, 10), mapper("j", 2), sink("s", 4)},
		blocking(fwd("a", "j")), all("b", "j"), all("j", "s"))
	eg, err := BuildExecutionGraph(jg)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range AllExecutions(eg) {
		attempt(ev, 0)
	}
	RefreshProducers(eg)
	built := proto.Clone(eg).(*pb.ExecutionGraph)
	want := map[string]int{"a": 0, "b": 0, "j": 1 + 3, "s": 2}
	for _, ev := range AllExecutions(eg) {
		if len(ev.Inputs) != 0 {
			t.Fatalf("%s[%d] keeps %d channels", ev.VertexId, ev.SubtaskIndex, len(ev.Inputs))
		}
		if n := InputCount(eg, ev); n != want[ev.VertexId] || len(Inputs(eg, ev)) != n {
			t.Fatalf("%s[%d]: InputCount %d, Inputs %d, want %d", ev.VertexId, ev.SubtaskIndex, n, len(Inputs(eg, ev)), want[ev.VertexId])
		}
	}
	MaterializeInputs(eg)
	for _, ev := range AllExecutions(eg) {
		if got, want := ev.Inputs, Inputs(built, FindVertex(built, ev.VertexId, ev.SubtaskIndex)); len(got) != len(want) {
			t.Fatalf("%s[%d]: materialized %d channels, want %d", ev.VertexId, ev.SubtaskIndex, len(got), len(want))
		} else {
			for k := range got {
				if !proto.Equal(got[k], want[k]) {
					t.Fatalf("%s[%d] channel %d: %v, want %v", ev.VertexId, ev.SubtaskIndex, k, got[k], want[k])
				}
			}
		}
	}
	if in := FindVertex(eg, "s", 3).Inputs[1]; in.ResultId != "j->s" || in.PartitionIndex != 1 || in.SubpartitionIndex != 3 || in.ProducerAttemptId != FindVertex(eg, "j", 1).Current.AttemptId {
		t.Fatalf("s[3] channel 1: %v", in)
	}
	StripInputs(eg)
	if !proto.Equal(eg, built) {
		t.Fatal("materialized and stripped, the graph differs from the one built")
	}
}
