package graph

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/jmcluster/jmcluster/testkit/operatorcases"
	"github.com/jmcluster/jmcluster/transport/pb"
)

func keyBy(id string, p int32) *pb.JobVertex {
	return &pb.JobVertex{Id: id, Name: id, Parallelism: p, Operator: &pb.Operator{
		Kind: &pb.Operator_JsonKeyBy{JsonKeyBy: &pb.JsonKeyBy{Path: "user"}}}}
}

func jsonFilterVertex(id string, p int32) *pb.JobVertex {
	return &pb.JobVertex{Id: id, Name: id, Parallelism: p, Operator: &pb.Operator{
		Kind: &pb.Operator_JsonFilter{JsonFilter: &pb.JsonFilter{Path: "amount", Op: pb.CompareOp_COMPARE_OP_GREATER, Value: "10"}}}}
}

func fileSinkOp(path string) *pb.Operator {
	return &pb.Operator{Kind: &pb.Operator_FileSink{FileSink: &pb.FileSink{Path: path, Format: pb.FileSinkFormat_FILE_SINK_FORMAT_VALUE}}}
}

// deadLetterJob is src(2) -> key(2) -> filter(2) -> sink(1), and src -> map(2) -> sink, with
// dead_letters a file sink of parallelism 0: key and filter can send dead letters.
func deadLetterJob() *pb.JobGraph {
	jg := job([]*pb.JobVertex{source("src", 2, 0), keyBy("key", 2), jsonFilterVertex("filter", 2), mapper("map", 2), sink("sink", 1)},
		fwd("src", "key"), all("key", "filter"), all("filter", "sink"), fwd("src", "map"), all("map", "sink"))
	jg.DeadLetters = &pb.DeadLetters{Operator: fileSinkOp("dead-{subtask}.jsonl")}
	return jg
}

func dlEdge(s string) *pb.JobEdge {
	e := all(s, DeadLetterVertexID)
	e.DeadLetters = true
	return e
}

// TestExpandDeadLetters: the dead-letter output becomes the vertex "dead-letters" (its
// operator, parallelism 0 -> 1, its name) with an ALL_TO_ALL PIPELINED dead_letters edge from
// every vertex that can send dead letters, in vertex order, after the job's own; the input is
// not changed, and a second expansion changes nothing.
func TestExpandDeadLetters(t *testing.T) {
	jg := deadLetterJob()
	before := proto.CloneOf(jg)
	x := ExpandDeadLetters(jg)
	if !proto.Equal(jg, before) {
		t.Fatal("ExpandDeadLetters changed its input")
	}
	want := proto.CloneOf(jg)
	want.Vertices = append(want.Vertices, &pb.JobVertex{Id: "dead-letters", Name: "dead letters", Parallelism: 1, Operator: fileSinkOp("dead-{subtask}.jsonl")})
	want.Edges = append(want.Edges, dlEdge("key"), dlEdge("filter"))
	if !proto.Equal(x, want) {
		t.Fatalf("expanded\n%v\nwant\n%v", x, want)
	}
	if again := ExpandDeadLetters(x); again != x {
		t.Fatalf("a second expansion made a new graph:\n%v", again)
	}
	if err := Validate(x, DefaultLimits()); err != nil {
		t.Fatal(err)
	}
	if err := Validate(jg, DefaultLimits()); err != nil {
		t.Fatalf("the graph before expansion: %v", err)
	}
	// Parallelism as given; an edge the graph already has is not added again.
	jg.DeadLetters.Parallelism = 3
	jg.Vertices = append(jg.Vertices, &pb.JobVertex{Id: "dead-letters", Name: "dead letters", Parallelism: 3, Operator: fileSinkOp("dead-{subtask}.jsonl")})
	jg.Edges = append(jg.Edges, dlEdge("filter"))
	x = ExpandDeadLetters(jg)
	if n, e := len(x.Vertices), x.Edges[len(x.Edges)-1]; n != 6 || len(x.Edges) != 7 || e.Source != "key" {
		t.Fatalf("expanded a partly expanded graph to %d vertices and edges %v", n, x.Edges)
	}
	if err := Validate(x, DefaultLimits()); err != nil {
		t.Fatal(err)
	}
	// No dead_letters, or nothing to send them: unchanged.
	for _, g := range []*pb.JobGraph{pipeline(2, 2), func() *pb.JobGraph { g := pipeline(2, 2); g.DeadLetters = deadLetterJob().DeadLetters; return g }()} {
		if ExpandDeadLetters(g) != g {
			t.Fatalf("expanded %v", g)
		}
	}
}

// TestExpandedGraphBuildsAndDeploys: the dead-letter vertex is an ordinary vertex of the
// ExecutionGraph, its results' partitions are dead_letters in the producers' descriptors, and
// a sender's records still go to its other partitions.
func TestExpandedGraphBuildsAndDeploys(t *testing.T) {
	jg := ExpandDeadLetters(deadLetterJob())
	eg, err := BuildExecutionGraph(jg)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range AllExecutions(eg) {
		ev.Current = &pb.Execution{AttemptId: fmt.Sprintf("%s-%d", ev.VertexId, ev.SubtaskIndex), Slot: &pb.SlotID{TmId: "tm1"}}
	}
	RefreshProducers(eg)
	rec := &pb.JobRecord{JobGraph: jg, ExecutionGraph: eg}
	tdd, err := TaskDeploymentDescriptor(rec, "key", 1)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range tdd.Produced {
		got = append(got, fmt.Sprintf("%s:%d:%v", p.ResultId, p.NumSubpartitions, p.DeadLetters))
	}
	if s := strings.Join(got, " "); s != "key->filter:2:false key->dead-letters:1:true" {
		t.Fatalf("key's partitions %s", s)
	}
	dl, err := TaskDeploymentDescriptor(rec, DeadLetterVertexID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(dl.Inputs) != 2 || dl.Inputs[0].ResultId != "filter->dead-letters" || dl.Inputs[1].ResultId != "key->dead-letters" || dl.Operator.GetFileSink() == nil {
		t.Fatalf("the dead-letter vertex's descriptor: %v", dl)
	}
	src, _ := TaskDeploymentDescriptor(rec, "src", 0)
	for _, p := range src.Produced {
		if p.DeadLetters {
			t.Fatalf("src sends no dead letters: %v", p)
		}
	}
}

// TestValidateDeadLetters: every rule of the dead-letter output, each refused with exactly
// the problem naming its field.
func TestValidateDeadLetters(t *testing.T) {
	for _, c := range []struct {
		name   string
		mutate func(jg *pb.JobGraph)
		field  string
		msg    string
	}{
		{"no dead_letters with a vertex that sends them", func(jg *pb.JobGraph) {
			jg.DeadLetters = nil
			jg.Vertices[2] = mapper("filter", 2)
		}, "vertices[1]",
			`vertex "key" (json_key_by) can send dead letters, but the job has no dead-letter output: add "dead_letters": {"operator": {"file_sink"`},
		{"dead_letters of a transform", func(jg *pb.JobGraph) {
			jg.DeadLetters.Operator = &pb.Operator{Kind: &pb.Operator_Map{Map: &pb.MapOperator{}}}
		}, "dead_letters.operator", "map is a transform: the dead-letter output is a sink (file_sink, log_sink, checksum_sink, nats_sink)"},
		{"dead_letters of a source", func(jg *pb.JobGraph) {
			jg.DeadLetters.Operator = &pb.Operator{Kind: &pb.Operator_SequenceSource{SequenceSource: &pb.SequenceSource{}}}
		}, "dead_letters.operator", "sequence_source is a source: the dead-letter output is a sink"},
		{"dead_letters without operator", func(jg *pb.JobGraph) { jg.DeadLetters.Operator = nil }, "dead_letters.operator", "is missing"},
		{"dead_letters of a bad sink", func(jg *pb.JobGraph) { jg.DeadLetters.Operator = fileSinkOp("/abs/{subtask}") }, "dead_letters.operator.file_sink.path", "is absolute"},
		{"dead_letters of a negative parallelism", func(jg *pb.JobGraph) { jg.DeadLetters.Parallelism = -1 }, "dead_letters.parallelism", "-1 is out of range [0, 1024] (0 means 1)"},
		{"dead_letters of a too large parallelism", func(jg *pb.JobGraph) { jg.DeadLetters.Parallelism = 1025 }, "dead_letters.parallelism", "1025 is out of range [0, 1024]"},
		{"dead_letters that nothing sends", func(jg *pb.JobGraph) {
			jg.Vertices[1], jg.Vertices[2] = mapper("key", 2), mapper("filter", 2)
		}, "dead_letters", "no vertex of the job can send dead letters (json_key_by, json_filter, json_project, window, postgres_sink, a source with event_time.time_path): remove dead_letters"},
		{"a vertex of the reserved id", func(jg *pb.JobGraph) {
			jg.Vertices[3].Id = "dead-letters"
			jg.Edges[3].Target, jg.Edges[4].Source = "dead-letters", "dead-letters"
		}, "vertices[3].id", `"dead-letters" is reserved for the job's dead-letter output (dead_letters): give the vertex another id`},
		{"a flagged edge to another vertex", func(jg *pb.JobGraph) { jg.Edges[2].DeadLetters = true }, "edges[2].dead_letters",
			`edge filter->sink carries dead letters, but only edges to the dead-letter vertex "dead-letters" do`},
		{"an edge to the dead-letter vertex without the flag", func(jg *pb.JobGraph) {
			jg.Edges = append(jg.Edges, all("key", "dead-letters"))
		}, "edges[5].dead_letters", `edge key->dead-letters to the dead-letter vertex must carry dead letters (dead_letters: true)`},
		{"a flagged edge from a vertex that sends none", func(jg *pb.JobGraph) {
			jg.Edges = append(jg.Edges, dlEdge("map"))
		}, "edges[5].dead_letters", `vertex "map" sends no dead letters`},
	} {
		t.Run(c.name, func(t *testing.T) {
			jg := deadLetterJob()
			c.mutate(jg)
			for _, g := range []*pb.JobGraph{jg, ExpandDeadLetters(jg)} {
				err := Validate(g, DefaultLimits())
				var ve *ValidationError
				if !errors.As(err, &ve) || len(ve.Problems) != 1 || ve.Problems[0].Field != c.field || !strings.Contains(ve.Problems[0].Message, c.msg) {
					t.Fatalf("Validate = %v\nwant exactly %s: %s", err, c.field, c.msg)
				}
			}
		})
	}
	// A flagged edge in a job without dead_letters, to a vertex of the reserved id (allowed
	// then).
	jg := pipeline(1, 1)
	jg.Vertices[2].Id = "dead-letters"
	jg.Edges[1].Target, jg.Edges[1].DeadLetters = "dead-letters", true
	err := Validate(jg, DefaultLimits())
	if err == nil || !strings.Contains(err.Error(), `edges[1].dead_letters: the job has no dead_letters`) || strings.Count(err.Error(), "\n") != 1 {
		t.Fatalf("Validate = %v", err)
	}
	jg.Edges[1].DeadLetters = false
	if err := Validate(jg, DefaultLimits()); err != nil {
		t.Fatalf("a vertex named dead-letters in a job without dead_letters: %v", err)
	}
}

// TestOperatorCasesHaveDeadLettersWhereNeeded: the operator cases' jobs have a dead-letter
// output exactly when their vertex can send dead letters (the table keeps its own list of
// such kinds: it cannot import graph).
func TestOperatorCasesHaveDeadLettersWhereNeeded(t *testing.T) {
	for _, k := range OperatorKinds() {
		if !k.deadLetters {
			continue
		}
		op := &pb.Operator{}
		fd := op.ProtoReflect().Descriptor().Fields().ByName(protoreflect.Name(k.Name))
		op.ProtoReflect().Set(fd, op.ProtoReflect().NewField(fd))
		c := operatorcases.Case{Op: op, Wiring: operatorcases.Between}
		if c.JobGraph().DeadLetters == nil {
			t.Errorf("kind %s can send dead letters, but operatorcases gives its job no dead_letters", k.Name)
		}
	}
	for _, c := range operatorcases.All() {
		jg := c.JobGraph()
		if c.Op != nil && CanSendDeadLetters(jg.Vertices[operatorcases.VertexIndex]) != (jg.DeadLetters != nil) {
			t.Errorf("%s: dead_letters %v", c.Name, jg.DeadLetters)
		}
	}
}
