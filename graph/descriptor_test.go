package graph

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// deployedRecord is pipeline(p, q) with a second input into the sink (a BLOCKING ALL_TO_ALL
// edge from a side source), every subtask with a current attempt.
func deployedRecord(t *testing.T, p, q int32) *pb.JobRecord {
	t.Helper()
	jg := pipeline(p, q)
	jg.Vertices = append(jg.Vertices, source("side", 1, 5))
	jg.Edges = append(jg.Edges, blocking(all("side", "sink")))
	eg, err := BuildExecutionGraph(jg)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range AllExecutions(eg) {
		ev.Current = &pb.Execution{
			AttemptId: fmt.Sprintf("%s-%d", ev.VertexId, ev.SubtaskIndex), AttemptNumber: 1, StartTimestamp: 7,
			State: pb.ExecutionState_EXECUTION_STATE_DEPLOYING, Slot: &pb.SlotID{TmId: "tm1", Index: ev.SubtaskIndex},
		}
	}
	RefreshProducers(eg)
	return &pb.JobRecord{JobGraph: jg, ExecutionGraph: eg}
}

func TestTaskDeploymentDescriptor(t *testing.T) {
	rec := deployedRecord(t, 3, 2)
	before := proto.Clone(rec)

	tdd, err := TaskDeploymentDescriptor(rec, "sink", 1)
	if err != nil {
		t.Fatal(err)
	}
	if tdd.AttemptId != "sink-1" || tdd.AttemptNumber != 1 || tdd.SlotIndex != 1 || tdd.Parallelism != 2 || tdd.StartTimestamp != 7 {
		t.Fatalf("header: %v", tdd)
	}
	if len(tdd.Produced) != 0 {
		t.Fatalf("a sink produces nothing: %v", tdd.Produced)
	}
	// One gate per consumed result, in result-id order, with a channel per producer subtask.
	var gates []string
	for _, g := range tdd.Inputs {
		gates = append(gates, fmt.Sprintf("%s:%d:%s", g.ResultId, len(g.Channels), g.ResultType))
	}
	if got, want := strings.Join(gates, " "), "map->sink:3:RESULT_TYPE_PIPELINED side->sink:1:RESULT_TYPE_BLOCKING"; got != want {
		t.Fatalf("gates %q, want %q", got, want)
	}

	src, err := TaskDeploymentDescriptor(rec, "map", 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(src.Produced) != 1 || src.Produced[0].ResultId != "map->sink" || src.Produced[0].PartitionIndex != 2 || src.Produced[0].NumSubpartitions != 2 {
		t.Fatalf("produced: %v", src.Produced)
	}

	// A pure function that copies what it returns: the record is unchanged, also after the
	// descriptor is changed, and a second call gives the same descriptor.
	tdd.Operator.Kind = nil
	tdd.Inputs[0].Channels[0].ProducerAttemptId = "changed"
	if !proto.Equal(before, rec) {
		t.Fatal("the descriptor shares messages with the record")
	}
	again, _ := TaskDeploymentDescriptor(rec, "map", 2)
	if !proto.Equal(src, again) {
		t.Fatalf("second call differs:\n%v\n%v", src, again)
	}

	for _, bad := range []struct {
		vertex  string
		subtask int32
	}{{"nope", 0}, {"sink", 5}} {
		if _, err := TaskDeploymentDescriptor(rec, bad.vertex, bad.subtask); err == nil {
			t.Errorf("%s[%d]: no error", bad.vertex, bad.subtask)
		}
	}
	graph := deployedRecord(t, 1, 1)
	FindVertex(graph.ExecutionGraph, "map", 0).Current = nil
	if _, err := TaskDeploymentDescriptor(graph, "map", 0); err == nil {
		t.Error("a subtask without an attempt: no error")
	}
}

// TestDescriptorBuilderSharesWideGates: the consumers of an ALL_TO_ALL edge of at least
// MinSharedChannels producers refer to one shared list, each at its own subpartition, and
// inlining it gives exactly what TaskDeploymentDescriptor builds; a smaller gate is inline; a
// producer restarted before the next builder is in that builder's list; the record is not
// changed.
func TestDescriptorBuilderSharesWideGates(t *testing.T) {
	rec := deployedRecord(t, MinSharedChannels, 3)
	before := proto.Clone(rec)
	b := NewDescriptorBuilder(rec)
	for sub := int32(0); sub < 3; sub++ {
		tdd, err := b.Build("sink", sub)
		if err != nil {
			t.Fatal(err)
		}
		wide, small := tdd.Inputs[0], tdd.Inputs[1]
		if small.SharedChannels != 0 || len(small.Channels) != 1 {
			t.Fatalf("sink[%d]: the one-channel gate is %v, want it inline", sub, small)
		}
		if wide.SharedChannels != 1 || wide.SubpartitionIndex != sub || len(wide.Channels) != 0 {
			t.Fatalf("sink[%d]: wide gate shared %d at %d with %d inline channels; want list 1 at %d", sub, wide.SharedChannels, wide.SubpartitionIndex, len(wide.Channels), sub)
		}
		plain, err := TaskDeploymentDescriptor(rec, "sink", sub)
		if err != nil {
			t.Fatal(err)
		}
		if err := InlineShared(tdd, b.Shared); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(tdd, plain) {
			t.Fatalf("sink[%d] inlined differs from TaskDeploymentDescriptor:\n%v\n%v", sub, tdd, plain)
		}
	}
	if len(b.Shared) != 1 || len(b.Shared[0].Channels) != MinSharedChannels {
		t.Fatalf("%d shared lists", len(b.Shared))
	}
	if !proto.Equal(before, rec) {
		t.Fatal("building descriptors changed the record")
	}
	// map[0] restarted: a later builder's list names the new attempt.
	m0 := FindVertex(rec.ExecutionGraph, "map", 0)
	m0.Current.AttemptId = "map-0-again"
	RefreshProducers(rec.ExecutionGraph)
	b2 := NewDescriptorBuilder(rec)
	if _, err := b2.Build("sink", 1); err != nil {
		t.Fatal(err)
	}
	if got := b2.Shared[0].Channels[0].ProducerAttemptId; got != "map-0-again" {
		t.Fatalf("after a restart the shared list names %q", got)
	}
	if err := InlineShared(&pb.TaskDeploymentDescriptor{Inputs: []*pb.InputGateDeploymentDescriptor{{ResultId: "x", SharedChannels: 2}}}, b.Shared); err == nil {
		t.Fatal("a reference past the lists was inlined")
	}
}
