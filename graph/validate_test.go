package graph

import (
	"errors"
	"strings"
	"testing"

	"github.com/jmcluster/jmcluster/transport/pb"
	"google.golang.org/protobuf/encoding/protowire"
)

func TestValidateAcceptsGoodGraphs(t *testing.T) {
	good := []*pb.JobGraph{
		pipeline(2, 3),
		job([]*pb.JobVertex{source("a", 1, 10), sink("b", 1)}, blocking(fwd("a", "b"))),
		// A STREAMING job may have a bounded source.
		job([]*pb.JobVertex{source("a", 1, 5), sink("b", 2)}, all("a", "b")),
	}
	good[0].JobId = ""
	batch := job([]*pb.JobVertex{source("a", 2, 100), mapper("m", 2), sink("b", 1)}, blocking(fwd("a", "m")), blocking(all("m", "b")))
	batch.Type = pb.JobType_JOB_TYPE_BATCH
	good = append(good, batch)
	for i, jg := range good {
		if err := Validate(jg, DefaultLimits()); err != nil {
			t.Errorf("graph %d: %v", i, err)
		}
	}
}

func TestValidateEveryProblemKind(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(jg *pb.JobGraph)
		field  string
		msg    string
	}{
		{"bad job id", func(jg *pb.JobGraph) { jg.JobId = "ABC" }, "job_id", "32 lower-case hex"},
		{"upper-case job id", func(jg *pb.JobGraph) { jg.JobId = strings.ToUpper(jg.JobId) }, "job_id", "32 lower-case hex"},
		{"empty name", func(jg *pb.JobGraph) { jg.Name = "" }, "name", "is empty"},
		{"long name", func(jg *pb.JobGraph) { jg.Name = strings.Repeat("x", 300) }, "name", "the limit is 256"},
		{"type unspecified", func(jg *pb.JobGraph) { jg.Type = 0 }, "type", "unspecified"},
		{"no vertices", func(jg *pb.JobGraph) { jg.Vertices, jg.Edges = nil, nil }, "vertices", "no vertices"},
		{"empty vertex id", func(jg *pb.JobGraph) { jg.Vertices[2].Id = "" }, "vertices[2].id", "is empty"},
		{"duplicate vertex id", func(jg *pb.JobGraph) { jg.Vertices[2].Id = "map" }, "vertices[2].id", "duplicate vertex id \"map\""},
		{"vertex id charset", func(jg *pb.JobGraph) { jg.Vertices[2].Id = "si nk" }, "vertices[2].id", "may only contain"},
		{"vertex id length", func(jg *pb.JobGraph) { jg.Vertices[2].Id = strings.Repeat("s", 65) }, "vertices[2].id", "the limit is 64"},
		{"parallelism zero", func(jg *pb.JobGraph) { jg.Vertices[2].Parallelism = 0 }, "vertices[2].parallelism", "out of range"},
		{"parallelism too big", func(jg *pb.JobGraph) { jg.Vertices[2].Parallelism = 1025 }, "vertices[2].parallelism", "out of range [1, 1024]"},
		{"operator missing", func(jg *pb.JobGraph) { jg.Vertices[1].Operator = nil }, "vertices[1].operator", "is missing"},
		{"operator kind missing", func(jg *pb.JobGraph) { jg.Vertices[1].Operator = &pb.Operator{} }, "vertices[1].operator", "is missing"},
		{"operator unknown", func(jg *pb.JobGraph) {
			op := &pb.Operator{}
			op.ProtoReflect().SetUnknown(protowire.AppendTag(nil, 99, protowire.BytesType))
			op.ProtoReflect().SetUnknown(protowire.AppendBytes(op.ProtoReflect().GetUnknown(), nil))
			jg.Vertices[1].Operator = op
		}, "vertices[1].operator", "unknown operator kind"},
		{"source count", func(jg *pb.JobGraph) { jg.Vertices[0].Operator.GetSequenceSource().Count = -1 }, "vertices[0].operator.sequence_source.count", "negative"},
		{"source rate", func(jg *pb.JobGraph) { jg.Vertices[0].Operator.GetSequenceSource().RatePerSecond = -1 }, "vertices[0].operator.sequence_source.rate_per_second", ">= 0"},
		{"source keys", func(jg *pb.JobGraph) { jg.Vertices[0].Operator.GetSequenceSource().Keys = -2 }, "vertices[0].operator.sequence_source.keys", "negative"},
		{"filter modulus", func(jg *pb.JobGraph) {
			jg.Vertices[1].Operator = &pb.Operator{Kind: &pb.Operator_Filter{Filter: &pb.FilterOperator{Modulus: 0}}}
		}, "vertices[1].operator.filter.modulus", "must be > 0"},
		{"filter remainder", func(jg *pb.JobGraph) {
			jg.Vertices[1].Operator = &pb.Operator{Kind: &pb.Operator_Filter{Filter: &pb.FilterOperator{Modulus: 3, Remainder: 3}}}
		}, "vertices[1].operator.filter.remainder", "out of range [0, 3)"},
		{"file sink path", func(jg *pb.JobGraph) {
			jg.Vertices[2].Operator = &pb.Operator{Kind: &pb.Operator_FileSink{FileSink: &pb.FileSink{}}}
		}, "vertices[2].operator.file_sink.path", "is empty"},
		{"checksum sink path", func(jg *pb.JobGraph) {
			jg.Vertices[2].Operator = &pb.Operator{Kind: &pb.Operator_ChecksumSink{ChecksumSink: &pb.ChecksumSink{}}}
		}, "vertices[2].operator.checksum_sink.path", "is empty"},
		{"absolute file sink path", func(jg *pb.JobGraph) {
			jg.Vertices[2].Operator = &pb.Operator{Kind: &pb.Operator_FileSink{FileSink: &pb.FileSink{Path: "/some/absolute/path-{subtask}.txt"}}}
		}, "vertices[2].operator.file_sink.path", "is absolute"},
		{"escaping file sink path", func(jg *pb.JobGraph) {
			jg.Vertices[2].Operator = &pb.Operator{Kind: &pb.Operator_FileSink{FileSink: &pb.FileSink{Path: "../../escaped-{subtask}.txt"}}}
		}, "vertices[2].operator.file_sink.path", `has a ".." element`},
		{"unclean checksum sink path", func(jg *pb.JobGraph) {
			jg.Vertices[2].Operator = &pb.Operator{Kind: &pb.Operator_ChecksumSink{ChecksumSink: &pb.ChecksumSink{Path: "out//x.json"}}}
		}, "vertices[2].operator.checksum_sink.path", "is not clean"},
		{"sink path escaping through the vertex id", func(jg *pb.JobGraph) {
			jg.Vertices[2].Id = ".."
			jg.Edges[1].Target = ".."
			jg.Vertices[2].Operator = &pb.Operator{Kind: &pb.Operator_ChecksumSink{ChecksumSink: &pb.ChecksumSink{Path: "{vertex}/x.json"}}}
		}, "vertices[2].operator.checksum_sink.path", `expands to "../x.json"`},
		{"unknown edge source", func(jg *pb.JobGraph) { jg.Edges[0].Source = "nope" }, "edges[0].source", "unknown vertex \"nope\""},
		{"unknown edge target", func(jg *pb.JobGraph) { jg.Edges[1].Target = "nope" }, "edges[1].target", "unknown vertex \"nope\""},
		{"self edge", func(jg *pb.JobGraph) { jg.Edges = append(jg.Edges, all("map", "map")) }, "edges[2]", "self edge"},
		{"duplicate edge", func(jg *pb.JobGraph) { jg.Edges = append(jg.Edges, all("map", "sink")) }, "edges[2]", "duplicate edge map->sink"},
		{"distribution unspecified", func(jg *pb.JobGraph) { jg.Edges[1].Distribution = 0 }, "edges[1].distribution", "unspecified"},
		{"result type unspecified", func(jg *pb.JobGraph) { jg.Edges[1].ResultType = 0 }, "edges[1].result_type", "unspecified"},
		{"forward unequal parallelism", func(jg *pb.JobGraph) { jg.Vertices[1].Parallelism = 3 }, "edges[0].distribution", "equal parallelism"},
		{"cycle", func(jg *pb.JobGraph) {
			jg.Vertices = append(jg.Vertices, mapper("m2", 2), mapper("m3", 2))
			jg.Edges = append(jg.Edges, fwd("map", "m2"), fwd("m2", "m3"), fwd("m3", "map"))
		}, "edges", "cycle map -> m2 -> m3 -> map"},
		{"source with input", func(jg *pb.JobGraph) { jg.Edges = append(jg.Edges, fwd("map", "src")) }, "vertices[0]", "source vertex \"src\" must have no inputs"},
		{"non-source without input", func(jg *pb.JobGraph) { jg.Edges = jg.Edges[1:] }, "vertices[1]", "vertex \"map\" has no inputs"},
		{"sink with output", func(jg *pb.JobGraph) {
			jg.Vertices = append(jg.Vertices, sink("s2", 1))
			jg.Edges = append(jg.Edges, all("sink", "s2"))
		}, "vertices[2]", "sink vertex \"sink\" must have no outgoing edges"},
		{"restart attempts", func(jg *pb.JobGraph) { jg.RestartStrategy = &pb.RestartStrategy{Attempts: -1} }, "restart_strategy.attempts", "negative"},
		{"restart delay", func(jg *pb.JobGraph) { jg.RestartStrategy = &pb.RestartStrategy{DelayMs: -5} }, "restart_strategy.delay_ms", "negative"},
		{"batch unbounded source", func(jg *pb.JobGraph) { jg.Type = pb.JobType_JOB_TYPE_BATCH }, "vertices[0].operator.sequence_source.count", "BATCH job needs bounded sources"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			jg := pipeline(2, 3)
			tc.mutate(jg)
			err := Validate(jg, DefaultLimits())
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Validate = %v, want *ValidationError", err)
			}
			if !errors.Is(err, ErrInvalidJobGraph) {
				t.Errorf("error does not wrap ErrInvalidJobGraph")
			}
			for _, p := range ve.Problems {
				if p.Field == tc.field && strings.Contains(p.Message, tc.msg) {
					return
				}
			}
			t.Errorf("no problem %s: ...%s...; got:\n%v", tc.field, tc.msg, err)
		})
	}
}

func TestValidateNil(t *testing.T) {
	err := Validate(nil, Limits{})
	if !errors.Is(err, ErrInvalidJobGraph) || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("Validate(nil) = %v", err)
	}
}

func TestValidateReportsAllProblemsTogether(t *testing.T) {
	jg := pipeline(2, 3)
	jg.Name = ""
	jg.Vertices[0].Parallelism = 0
	jg.Vertices[2].Id = "map"
	jg.Edges[1].ResultType = 0
	jg.RestartStrategy = &pb.RestartStrategy{Attempts: -1, DelayMs: -1}
	err := Validate(jg, DefaultLimits())
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Validate = %v", err)
	}
	want := []string{"name", "vertices[0].parallelism", "vertices[2].id", "edges[1].result_type",
		"restart_strategy.attempts", "restart_strategy.delay_ms"}
	fields := map[string]bool{}
	for _, p := range ve.Problems {
		fields[p.Field] = true
	}
	for _, f := range want {
		if !fields[f] {
			t.Errorf("missing problem for %s in:\n%v", f, err)
		}
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(ve.Problems)+1 {
		t.Errorf("Error() has %d lines for %d problems:\n%s", len(lines), len(ve.Problems), err)
	}
	// Deterministic: the same input gives the same text.
	if again := Validate(jg, DefaultLimits()); again.Error() != err.Error() {
		t.Errorf("validation output is not deterministic")
	}
}

func TestValidateLimits(t *testing.T) {
	jg := pipeline(8, 8)
	lim := Limits{MaxParallelism: 4, MaxVertices: 2, MaxEdges: 1}
	err := Validate(jg, lim)
	for _, want := range []string{"vertices: 3 vertices, the limit is 2", "edges: 2 edges, the limit is 1", "out of range [1, 4]"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want %q in %v", want, err)
		}
	}
}

func TestCheckSinkPath(t *testing.T) {
	good := []string{"out.txt", "checksum-{job}-{subtask}.json", "checksum/{job}-{vertex}-{subtask}.json", "a/b/c", "..x", "x..", ".hidden"}
	for _, p := range good {
		if err := CheckSinkPath(p); err != nil {
			t.Errorf("CheckSinkPath(%q) = %v, want nil", p, err)
		}
	}
	bad := map[string]string{
		"":                                  "empty",
		"/some/absolute/path-{subtask}.txt": "is absolute",
		"../../escaped-{subtask}.txt":       `".." element`,
		"a/../../b":                         `".." element`,
		"a/..":                              `".." element`,
		"..":                                `".." element`,
		"./a":                               "not clean",
		"a/./b":                             "not clean",
		"a//b":                              "not clean",
		"a/":                                "not clean",
		".":                                 "the work dir itself",
		"a\x00b":                            "NUL",
		"/":                                 "is absolute",
		"//server/share":                    "is absolute",
	}
	for p, want := range bad {
		err := CheckSinkPath(p)
		if !errors.Is(err, ErrSinkPathEscapes) || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckSinkPath(%q) = %v, want ...%s...", p, err, want)
		}
	}
}
