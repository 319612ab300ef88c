// Package operatorcases is the table of operator configurations, good and bad, that both the
// operator catalogue's test (graph) and the TaskManager's agreement test run: each case is
// tried as a vertex of a JobGraph (graph.Validate) and as the task descriptor the JobMaster
// deploys for it (the TaskManager's descriptor validation and a real SubmitTask).
package operatorcases

import (
	"fmt"
	"math"
	"strings"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// JobID is the id of every case's JobGraph and descriptor.
const JobID = "0123456789abcdef0123456789abcdef"

// Wiring is how a case's vertex "v" is connected in its job, besides a bounded source "src"
// and a log sink "out" (parallelism 1, FORWARD, PIPELINED).
type Wiring int

const (
	// Feeds: v -> out (and src -> out). Right for a source; a transform or sink has no input.
	Feeds Wiring = iota
	// Between: src -> v -> out. Right for a transform; a source has an input, a sink an output.
	Between
	// Fed: src -> v (and src -> out). Right for a sink.
	Fed
	// Alone: v is not connected (src -> out). Right for a source only.
	Alone
)

// Case is one operator configuration in one wiring.
type Case struct {
	Name string
	// Kind is the catalogue name the case is about, "" for an operator of no kind.
	Kind    string
	Op      *pb.Operator
	JobType pb.JobType // 0 means STREAMING
	Vertex  string     // the vertex id; "" means "v"
	Wiring  Wiring
	// Field and Msg name the one problem a bad case must produce: Field relative to the
	// vertex ("operator.filter.remainder", "operator", or "" for the vertex itself) and a part
	// of its message. Msg is "" for a good case.
	Field, Msg string
}

// Good reports whether the case must be accepted.
func (c Case) Good() bool { return c.Msg == "" }

// VertexID is the id of the case's vertex.
func (c Case) VertexID() string {
	if c.Vertex == "" {
		return "v"
	}
	return c.Vertex
}

// VertexIndex is the index of the case's vertex in JobGraph().Vertices.
const VertexIndex = 1

// JobGraph returns the job the case's vertex is tried in, wired as c.Wiring says, with a
// dead-letter output (a log sink) when the case's operator can send dead letters. Everything
// but the case's vertex is valid.
func (c Case) JobGraph() *pb.JobGraph {
	jt := c.JobType
	if jt == 0 {
		jt = pb.JobType_JOB_TYPE_STREAMING
	}
	v := c.VertexID()
	edge := func(s, t string) *pb.JobEdge {
		return &pb.JobEdge{Source: s, Target: t, Distribution: pb.Distribution_DISTRIBUTION_FORWARD, ResultType: pb.ResultType_RESULT_TYPE_PIPELINED}
	}
	var edges []*pb.JobEdge
	switch c.Wiring {
	case Feeds:
		edges = []*pb.JobEdge{edge("src", "out"), edge(v, "out")}
	case Between:
		edges = []*pb.JobEdge{edge("src", v), edge(v, "out")}
	case Fed:
		edges = []*pb.JobEdge{edge("src", "out"), edge("src", v)}
	case Alone:
		edges = []*pb.JobEdge{edge("src", "out")}
	}
	jg := &pb.JobGraph{
		JobId: JobID, Name: c.Name, Type: jt,
		Vertices: []*pb.JobVertex{
			{Id: "src", Parallelism: 1, Operator: &pb.Operator{Kind: &pb.Operator_SequenceSource{SequenceSource: &pb.SequenceSource{Count: 10}}}},
			{Id: v, Parallelism: 1, Operator: c.Op},
			{Id: "out", Parallelism: 1, Operator: &pb.Operator{Kind: &pb.Operator_LogSink{LogSink: &pb.LogSink{}}}},
		},
		Edges: edges,
	}
	if sendsDeadLetters(c.Op) {
		jg.DeadLetters = &pb.DeadLetters{Operator: &pb.Operator{Kind: &pb.Operator_LogSink{LogSink: &pb.LogSink{}}}}
	}
	return jg
}

// deadLetterKinds are the kinds whose catalogue entry can send dead letters (graph's
// OperatorKind.DeadLetters; graph's own tests import this package, so it cannot ask graph).
var deadLetterKinds = map[string]bool{"json_key_by": true, "json_filter": true, "json_project": true, "window": true, "postgres_sink": true}

// sendsDeadLetters is graph.CanSendDeadLetters of a vertex of op.
func sendsDeadLetters(op *pb.Operator) bool {
	if op == nil {
		return false
	}
	fd := op.ProtoReflect().WhichOneof(op.ProtoReflect().Descriptor().Oneofs().ByName("kind"))
	return fd != nil && deadLetterKinds[string(fd.Name())] || op.GetEventTime().GetTimePath() != ""
}

// Descriptor returns the descriptor the JobMaster deploys for subtask 0 of the case's vertex
// in JobGraph() as the JobMaster expands it (graph.ExpandDeadLetters): its operator, the
// job's type and ids, one input gate per edge into the vertex (its one channel not yet told
// its producer) and one produced partition per edge out of it, and a dead_letters partition
// to the vertex "dead-letters" when the job has dead_letters.
func (c Case) Descriptor(attemptID string, slot int32) *pb.TaskDeploymentDescriptor {
	jg := c.JobGraph()
	if jg.DeadLetters != nil {
		jg.Edges = append(jg.Edges, &pb.JobEdge{Source: c.VertexID(), Target: "dead-letters",
			Distribution: pb.Distribution_DISTRIBUTION_ALL_TO_ALL, ResultType: pb.ResultType_RESULT_TYPE_PIPELINED, DeadLetters: true})
	}
	v := c.VertexID()
	d := &pb.TaskDeploymentDescriptor{
		JobId: jg.JobId, VertexId: v, SubtaskIndex: 0, Parallelism: 1, AttemptId: attemptID,
		StartTimestamp: 1, SlotIndex: slot, Operator: c.Op, JobType: jg.Type,
	}
	for _, e := range jg.Edges {
		rid := e.Source + "->" + e.Target
		if e.Target == v {
			d.Inputs = append(d.Inputs, &pb.InputGateDeploymentDescriptor{ResultId: rid, ResultType: e.ResultType,
				Channels: []*pb.InputChannelDescriptor{{ResultId: rid}}})
		}
		if e.Source == v {
			d.Produced = append(d.Produced, &pb.ResultPartitionDeploymentDescriptor{ResultId: rid, NumSubpartitions: 1,
				Distribution: e.Distribution, ResultType: e.ResultType, DeadLetters: e.DeadLetters})
		}
	}
	return d
}

func seq(s *pb.SequenceSource) *pb.Operator {
	return &pb.Operator{Kind: &pb.Operator_SequenceSource{SequenceSource: s}}
}

// withEventTime is op with event_time et.
func withEventTime(op *pb.Operator, et *pb.EventTime) *pb.Operator {
	op.EventTime = et
	return op
}

func gen(g *pb.EventGenerator) *pb.Operator {
	return &pb.Operator{Kind: &pb.Operator_EventGenerator{EventGenerator: g}}
}

func filter(modulus, remainder int64) *pb.Operator {
	return &pb.Operator{Kind: &pb.Operator_Filter{Filter: &pb.FilterOperator{Modulus: modulus, Remainder: remainder}}}
}

func fileSink(p string) *pb.Operator {
	return &pb.Operator{Kind: &pb.Operator_FileSink{FileSink: &pb.FileSink{Path: p}}}
}

func jsonKeyBy(path string) *pb.Operator {
	return &pb.Operator{Kind: &pb.Operator_JsonKeyBy{JsonKeyBy: &pb.JsonKeyBy{Path: path}}}
}

func jsonFilter(path string, op pb.CompareOp, value string) *pb.Operator {
	return &pb.Operator{Kind: &pb.Operator_JsonFilter{JsonFilter: &pb.JsonFilter{Path: path, Op: op, Value: value}}}
}

// jsonProject of path, name pairs.
func jsonProject(pathNames ...string) *pb.Operator {
	p := &pb.JsonProject{}
	for i := 0; i+1 < len(pathNames); i += 2 {
		p.Fields = append(p.Fields, &pb.ProjectField{Path: pathNames[i], Name: pathNames[i+1]})
	}
	return &pb.Operator{Kind: &pb.Operator_JsonProject{JsonProject: p}}
}

func checksumSink(p string, flushMs int64) *pb.Operator {
	return &pb.Operator{Kind: &pb.Operator_ChecksumSink{ChecksumSink: &pb.ChecksumSink{Path: p, FlushIntervalMs: flushMs}}}
}

var (
	mapOp      = &pb.Operator{Kind: &pb.Operator_Map{Map: &pb.MapOperator{Multiply: 2, Add: 1}}}
	keyBySumOp = &pb.Operator{Kind: &pb.Operator_KeyBySum{KeyBySum: &pb.KeyBySumOperator{}}}
	logSinkOp  = &pb.Operator{Kind: &pb.Operator_LogSink{LogSink: &pb.LogSink{}}}
	flatMapOp  = &pb.Operator{Kind: &pb.Operator_FlatMap{FlatMap: &pb.FlatMapOperator{}}}
)

// unknownKind is an Operator whose kind is a field this build does not know (number 99).
func unknownKind() *pb.Operator {
	op := &pb.Operator{}
	op.ProtoReflect().SetUnknown([]byte{0x9a, 0x06, 0x00}) // field 99, length-delimited, empty
	return op
}

// All returns every case, grouped by kind in the catalogue's order; each call builds new
// messages, so a caller may change them.
func All() []Case {
	const (
		batch    = pb.JobType_JOB_TYPE_BATCH
		count    = "operator.sequence_source.count"
		rate     = "operator.sequence_source.rate_per_second"
		fpath    = "operator.file_sink.path"
		cpath    = "operator.checksum_sink.path"
		noInputs = `vertex "v" has no inputs`
		kpath    = "operator.json_key_by.path"
		fop      = "operator.json_filter.op"
		fvalue   = "operator.json_filter.value"
	)
	cases := []Case{
		{Name: "no operator", Op: nil, Wiring: Between, Field: "operator", Msg: "is missing"},
		{Name: "no kind", Op: &pb.Operator{}, Wiring: Between, Field: "operator", Msg: "is missing"},
		{Name: "unknown kind", Op: unknownKind(), Wiring: Between, Field: "operator", Msg: "unknown operator kind"},

		{Name: "bounded paced source", Kind: "sequence_source", Op: seq(&pb.SequenceSource{Start: -5, Count: 10, RatePerSecond: 100, Keys: 4}), Wiring: Feeds},
		{Name: "unbounded source", Kind: "sequence_source", Op: seq(&pb.SequenceSource{}), Wiring: Feeds},
		{Name: "source of nothing", Kind: "sequence_source", Op: seq(&pb.SequenceSource{Count: 3}), Wiring: Alone},
		{Name: "bounded source in a batch job", Kind: "sequence_source", Op: seq(&pb.SequenceSource{Count: 5}), JobType: batch, Wiring: Feeds},
		{Name: "negative count", Kind: "sequence_source", Op: seq(&pb.SequenceSource{Count: -1}), Wiring: Feeds, Field: count, Msg: "-1 is negative"},
		{Name: "negative rate", Kind: "sequence_source", Op: seq(&pb.SequenceSource{RatePerSecond: -1}), Wiring: Feeds, Field: rate, Msg: "-1 must be a finite number >= 0"},
		{Name: "NaN rate", Kind: "sequence_source", Op: seq(&pb.SequenceSource{RatePerSecond: math.NaN()}), Wiring: Feeds, Field: rate, Msg: "NaN must be a finite number >= 0"},
		{Name: "infinite rate", Kind: "sequence_source", Op: seq(&pb.SequenceSource{RatePerSecond: math.Inf(1)}), Wiring: Feeds, Field: rate, Msg: "+Inf must be a finite number >= 0"},
		{Name: "negative keys", Kind: "sequence_source", Op: seq(&pb.SequenceSource{Keys: -2}), Wiring: Feeds, Field: "operator.sequence_source.keys", Msg: "-2 is negative"},
		{Name: "unbounded source in a batch job", Kind: "sequence_source", Op: seq(&pb.SequenceSource{}), JobType: batch, Wiring: Feeds, Field: count, Msg: "a BATCH job needs bounded sources"},
		{Name: "source with an input", Kind: "sequence_source", Op: seq(&pb.SequenceSource{Count: 3}), Wiring: Between, Msg: `source vertex "v" must have no inputs`},

		{Name: "map", Kind: "map", Op: mapOp, Wiring: Between},
		{Name: "map of defaults", Kind: "map", Op: &pb.Operator{Kind: &pb.Operator_Map{Map: &pb.MapOperator{}}}, Wiring: Between},
		{Name: "map without input", Kind: "map", Op: mapOp, Wiring: Feeds, Msg: noInputs},

		{Name: "filter", Kind: "filter", Op: filter(3, 2), Wiring: Between},
		{Name: "filter remainder 0", Kind: "filter", Op: filter(1, 0), Wiring: Between},
		{Name: "filter modulus 0", Kind: "filter", Op: filter(0, 0), Wiring: Between, Field: "operator.filter.modulus", Msg: "0 must be > 0"},
		{Name: "negative filter modulus", Kind: "filter", Op: filter(-3, 1), Wiring: Between, Field: "operator.filter.modulus", Msg: "-3 must be > 0"},
		{Name: "filter remainder = modulus", Kind: "filter", Op: filter(3, 3), Wiring: Between, Field: "operator.filter.remainder", Msg: "3 is out of range [0, 3)"},
		{Name: "negative filter remainder", Kind: "filter", Op: filter(3, -1), Wiring: Between, Field: "operator.filter.remainder", Msg: "-1 is out of range [0, 3)"},
		{Name: "filter without input", Kind: "filter", Op: filter(3, 2), Wiring: Alone, Msg: noInputs},

		{Name: "key_by_sum", Kind: "key_by_sum", Op: keyBySumOp, Wiring: Between},
		{Name: "key_by_sum without input", Kind: "key_by_sum", Op: keyBySumOp, Wiring: Feeds, Msg: noInputs},

		{Name: "file sink", Kind: "file_sink", Op: fileSink("out/{job}-{vertex}-{subtask}-{attempt}.txt"), Wiring: Fed},
		{Name: "file sink named by a dotted vertex", Kind: "file_sink", Op: fileSink("{vertex}/x.txt"), Vertex: "a..b", Wiring: Fed},
		{Name: "empty file sink path", Kind: "file_sink", Op: fileSink(""), Wiring: Fed, Field: fpath, Msg: "is empty"},
		{Name: "absolute file sink path", Kind: "file_sink", Op: fileSink("/some/absolute/path-{subtask}.txt"), Wiring: Fed, Field: fpath, Msg: "is absolute"},
		{Name: "file sink path with ..", Kind: "file_sink", Op: fileSink("../../escaped-{subtask}.txt"), Wiring: Fed, Field: fpath, Msg: `has a ".." element`},
		{Name: "unclean file sink path", Kind: "file_sink", Op: fileSink("out//x.txt"), Wiring: Fed, Field: fpath, Msg: `is not clean (it cleans to "out/x.txt")`},
		{Name: "file sink path of the work dir", Kind: "file_sink", Op: fileSink("."), Wiring: Fed, Field: fpath, Msg: "names the work dir itself"},
		{Name: "file sink path with NUL", Kind: "file_sink", Op: fileSink("a\x00b"), Wiring: Fed, Field: fpath, Msg: "contains a NUL byte"},
		{Name: "file sink escaping through the vertex id", Kind: "file_sink", Op: fileSink("{vertex}/x.txt"), Vertex: "..", Wiring: Fed, Field: fpath, Msg: `"{vertex}/x.txt" expands to "../x.txt"`},
		{Name: "file sink of values", Kind: "file_sink", Op: &pb.Operator{Kind: &pb.Operator_FileSink{FileSink: &pb.FileSink{Path: "v.txt", Format: pb.FileSinkFormat_FILE_SINK_FORMAT_VALUE}}}, Wiring: Fed},
		{Name: "file sink of key-tab-value lines", Kind: "file_sink", Op: &pb.Operator{Kind: &pb.Operator_FileSink{FileSink: &pb.FileSink{Path: "kv.txt", Format: pb.FileSinkFormat_FILE_SINK_FORMAT_KEY_TAB_VALUE}}}, Wiring: Fed},
		{Name: "file sink of an unknown format", Kind: "file_sink", Op: &pb.Operator{Kind: &pb.Operator_FileSink{FileSink: &pb.FileSink{Path: "x.txt", Format: 7}}}, Wiring: Fed, Field: "operator.file_sink.format", Msg: "7 is not a FileSinkFormat"},
		{Name: "file sink with an output", Kind: "file_sink", Op: fileSink("x.txt"), Wiring: Between, Msg: `sink vertex "v" must have no outgoing edges`},

		{Name: "log sink", Kind: "log_sink", Op: logSinkOp, Wiring: Fed},
		{Name: "log sink with an output", Kind: "log_sink", Op: logSinkOp, Wiring: Between, Msg: `sink vertex "v" must have no outgoing edges`},
		{Name: "log sink without input", Kind: "log_sink", Op: logSinkOp, Wiring: Alone, Msg: noInputs},

		{Name: "checksum sink", Kind: "checksum_sink", Op: checksumSink("sum/{job}-{subtask}.json", 50), Wiring: Fed},
		{Name: "checksum sink default flush", Kind: "checksum_sink", Op: checksumSink("sum-{subtask}.json", 0), Wiring: Fed},
		{Name: "empty checksum sink path", Kind: "checksum_sink", Op: checksumSink("", 0), Wiring: Fed, Field: cpath, Msg: "is empty"},
		{Name: "checksum sink path with ..", Kind: "checksum_sink", Op: checksumSink("a/../../b.json", 0), Wiring: Fed, Field: cpath, Msg: `has a ".." element`},
		{Name: "unclean checksum sink path", Kind: "checksum_sink", Op: checksumSink("./b.json", 0), Wiring: Fed, Field: cpath, Msg: "is not clean"},
		{Name: "negative checksum flush", Kind: "checksum_sink", Op: checksumSink("b.json", -1), Wiring: Fed, Field: "operator.checksum_sink.flush_interval_ms", Msg: "-1 is negative"},
		{Name: "checksum sink with an output", Kind: "checksum_sink", Op: checksumSink("b.json", 0), Wiring: Between, Msg: `sink vertex "v" must have no outgoing edges`},
		{Name: "checksum sink without input", Kind: "checksum_sink", Op: checksumSink("b.json", 0), Wiring: Alone, Msg: noInputs},

		{Name: "flat_map", Kind: "flat_map", Op: flatMapOp, Wiring: Between},
		{Name: "flat_map without input", Kind: "flat_map", Op: flatMapOp, Wiring: Feeds, Msg: noInputs},

		{Name: "event generator", Kind: "event_generator", Op: gen(&pb.EventGenerator{Seed: 7, Count: 100, Keys: 50, KeySkew: 1.2, StartMs: 1_700_000_000_000, StepMs: 10, MaxDisorderMs: 500, RatePerSecond: 1000, MaxAmount: 50}), Wiring: Feeds},
		{Name: "event generator of defaults", Kind: "event_generator", Op: gen(&pb.EventGenerator{}), Wiring: Feeds},
		{Name: "bounded event generator in a batch job", Kind: "event_generator", Op: gen(&pb.EventGenerator{Count: 5, Keys: 1 << 20, KeySkew: 10, StartMs: 1 << 48}), JobType: batch, Wiring: Feeds},
		{Name: "negative generator count", Kind: "event_generator", Op: gen(&pb.EventGenerator{Count: -1}), Wiring: Feeds, Field: "operator.event_generator.count", Msg: "-1 is negative"},
		{Name: "unbounded event generator in a batch job", Kind: "event_generator", Op: gen(&pb.EventGenerator{}), JobType: batch, Wiring: Feeds, Field: "operator.event_generator.count", Msg: "a BATCH job needs bounded sources"},
		{Name: "negative generator keys", Kind: "event_generator", Op: gen(&pb.EventGenerator{Keys: -1}), Wiring: Feeds, Field: "operator.event_generator.keys", Msg: "-1 is out of range [0, MaxGeneratorKeys 1048576]"},
		{Name: "too many generator keys", Kind: "event_generator", Op: gen(&pb.EventGenerator{Keys: 1<<20 + 1}), Wiring: Feeds, Field: "operator.event_generator.keys", Msg: "1048577 is out of range [0, MaxGeneratorKeys 1048576]"},
		{Name: "negative key skew", Kind: "event_generator", Op: gen(&pb.EventGenerator{KeySkew: -0.5}), Wiring: Feeds, Field: "operator.event_generator.key_skew", Msg: "-0.5 is out of range [0, MaxGeneratorKeySkew 10]"},
		{Name: "NaN key skew", Kind: "event_generator", Op: gen(&pb.EventGenerator{KeySkew: math.NaN()}), Wiring: Feeds, Field: "operator.event_generator.key_skew", Msg: "NaN is out of range [0, MaxGeneratorKeySkew 10]"},
		{Name: "too large key skew", Kind: "event_generator", Op: gen(&pb.EventGenerator{KeySkew: 11}), Wiring: Feeds, Field: "operator.event_generator.key_skew", Msg: "11 is out of range [0, MaxGeneratorKeySkew 10]"},
		{Name: "negative generator start", Kind: "event_generator", Op: gen(&pb.EventGenerator{StartMs: -1}), Wiring: Feeds, Field: "operator.event_generator.start_ms", Msg: "-1 is out of range [0, MaxGeneratorMs 281474976710656]"},
		{Name: "negative generator step", Kind: "event_generator", Op: gen(&pb.EventGenerator{StepMs: -2}), Wiring: Feeds, Field: "operator.event_generator.step_ms", Msg: "-2 is out of range [0, MaxGeneratorMs"},
		{Name: "too large generator disorder", Kind: "event_generator", Op: gen(&pb.EventGenerator{MaxDisorderMs: 1<<48 + 1}), Wiring: Feeds, Field: "operator.event_generator.max_disorder_ms", Msg: "281474976710657 is out of range [0, MaxGeneratorMs"},
		{Name: "negative generator rate", Kind: "event_generator", Op: gen(&pb.EventGenerator{RatePerSecond: -1}), Wiring: Feeds, Field: "operator.event_generator.rate_per_second", Msg: "-1 must be a finite number >= 0"},
		{Name: "infinite generator rate", Kind: "event_generator", Op: gen(&pb.EventGenerator{RatePerSecond: math.Inf(1)}), Wiring: Feeds, Field: "operator.event_generator.rate_per_second", Msg: "+Inf must be a finite number >= 0"},
		{Name: "negative generator max amount", Kind: "event_generator", Op: gen(&pb.EventGenerator{MaxAmount: -3}), Wiring: Feeds, Field: "operator.event_generator.max_amount", Msg: "-3 is negative"},
		{Name: "event generator with an input", Kind: "event_generator", Op: gen(&pb.EventGenerator{Count: 3}), Wiring: Between, Msg: `source vertex "v" must have no inputs`},
		{Name: "event generator with an idle split", Kind: "event_generator", Op: gen(&pb.EventGenerator{IdleSplits: 1}), Wiring: Feeds},
		{Name: "negative idle splits", Kind: "event_generator", Op: gen(&pb.EventGenerator{IdleSplits: -1}), Wiring: Feeds, Field: "operator.event_generator.idle_splits", Msg: "-1 is out of range [0, MaxGeneratorIdleSplits 65536]"},
		{Name: "idle splits in a batch job", Kind: "event_generator", Op: gen(&pb.EventGenerator{Count: 5, IdleSplits: 1}), JobType: batch, Wiring: Feeds, Field: "operator.event_generator.idle_splits", Msg: "an idle split never ends"},
		{Name: "event generator with event time", Kind: "event_generator", Op: withEventTime(gen(&pb.EventGenerator{}), &pb.EventTime{MaxOutOfOrdernessMs: 500, IdleTimeoutMs: 1000, WatermarkIntervalMs: 50}), Wiring: Feeds},
		{Name: "negative out-of-orderness", Kind: "event_generator", Op: withEventTime(gen(&pb.EventGenerator{}), &pb.EventTime{MaxOutOfOrdernessMs: -1}), Wiring: Feeds, Field: "operator.event_time.max_out_of_orderness_ms", Msg: "-1 is out of range [0, MaxOutOfOrdernessMs 604800000]"},
		{Name: "too long idle timeout", Kind: "event_generator", Op: withEventTime(gen(&pb.EventGenerator{}), &pb.EventTime{IdleTimeoutMs: 86400001}), Wiring: Feeds, Field: "operator.event_time.idle_timeout_ms", Msg: "86400001 is out of range [0, MaxIdleTimeoutMs 86400000]"},
		{Name: "negative watermark interval", Kind: "event_generator", Op: withEventTime(gen(&pb.EventGenerator{}), &pb.EventTime{WatermarkIntervalMs: -5}), Wiring: Feeds, Field: "operator.event_time.watermark_interval_ms", Msg: "-5 is out of range [0, MaxWatermarkIntervalMs 3600000]"},
		{Name: "unknown time format", Kind: "event_generator", Op: withEventTime(gen(&pb.EventGenerator{}), &pb.EventTime{TimeFormat: 9}), Wiring: Feeds, Field: "operator.event_time.time_format", Msg: "9 is not a TimeFormat"},
		{Name: "event time of a sequence source", Kind: "sequence_source", Op: withEventTime(&pb.Operator{Kind: &pb.Operator_SequenceSource{SequenceSource: &pb.SequenceSource{Count: 3}}}, &pb.EventTime{}), Wiring: Feeds, Field: "operator.event_time", Msg: "sequence_source's records are numbers without event time"},
		{Name: "event time of a transform", Kind: "map", Op: withEventTime(&pb.Operator{Kind: &pb.Operator_Map{Map: &pb.MapOperator{}}}, &pb.EventTime{}), Wiring: Between, Field: "operator.event_time", Msg: "is for sources only (map is a transform)"},

		{Name: "json_key_by", Kind: "json_key_by", Op: jsonKeyBy("user.id"), Wiring: Between},
		{Name: "json_key_by of an array element", Kind: "json_key_by", Op: jsonKeyBy("items.0.sku"), Wiring: Between},
		{Name: "json_key_by of gjson's special characters", Kind: "json_key_by", Op: jsonKeyBy(`a*b.c?.#.@this.x|y.\.!z`), Wiring: Between},
		{Name: "json_key_by of the longest path", Kind: "json_key_by", Op: jsonKeyBy(strings.Repeat("a", 256)), Wiring: Between},
		{Name: "json_key_by of no path", Kind: "json_key_by", Op: jsonKeyBy(""), Wiring: Between, Field: kpath, Msg: "is empty"},
		{Name: "json_key_by of an empty field name", Kind: "json_key_by", Op: jsonKeyBy("user..id"), Wiring: Between, Field: kpath, Msg: `"user..id" has an empty field name`},
		{Name: "json_key_by of a leading dot", Kind: "json_key_by", Op: jsonKeyBy(".user"), Wiring: Between, Field: kpath, Msg: `".user" has an empty field name`},
		{Name: "json_key_by of a trailing dot", Kind: "json_key_by", Op: jsonKeyBy("user."), Wiring: Between, Field: kpath, Msg: `"user." has an empty field name`},
		{Name: "json_key_by of a too long path", Kind: "json_key_by", Op: jsonKeyBy(strings.Repeat("a", 257)), Wiring: Between, Field: kpath, Msg: "is 257 bytes long, over MaxJSONPathLen 256"},
		{Name: "json_key_by of a control character", Kind: "json_key_by", Op: jsonKeyBy("us\ter"), Wiring: Between, Field: kpath, Msg: "holds a control character"},
		{Name: "json_key_by without input", Kind: "json_key_by", Op: jsonKeyBy("user"), Wiring: Feeds, Msg: noInputs},
		{Name: "json_filter of a number", Kind: "json_filter", Op: jsonFilter("amount", pb.CompareOp_COMPARE_OP_GREATER_OR_EQUAL, "100.5"), Wiring: Between},
		{Name: "json_filter of a string", Kind: "json_filter", Op: jsonFilter("user.tier", pb.CompareOp_COMPARE_OP_LESS, `"gold"`), Wiring: Between},
		{Name: "json_filter of true", Kind: "json_filter", Op: jsonFilter("vip", pb.CompareOp_COMPARE_OP_EQUAL, "true"), Wiring: Between},
		{Name: "json_filter of null", Kind: "json_filter", Op: jsonFilter("coupon", pb.CompareOp_COMPARE_OP_NOT_EQUAL, "null"), Wiring: Between},
		{Name: "json_filter of no path", Kind: "json_filter", Op: jsonFilter("", pb.CompareOp_COMPARE_OP_EQUAL, "1"), Wiring: Between, Field: "operator.json_filter.path", Msg: "is empty"},
		{Name: "json_filter of no op", Kind: "json_filter", Op: jsonFilter("a", 0, "1"), Wiring: Between, Field: fop, Msg: "is unspecified (COMPARE_OP_EQUAL, COMPARE_OP_NOT_EQUAL, COMPARE_OP_LESS"},
		{Name: "json_filter of an unknown op", Kind: "json_filter", Op: jsonFilter("a", 9, "1"), Wiring: Between, Field: fop, Msg: "9 is not a CompareOp"},
		{Name: "json_filter of no value", Kind: "json_filter", Op: jsonFilter("a", pb.CompareOp_COMPARE_OP_EQUAL, ""), Wiring: Between, Field: fvalue, Msg: "is empty: a JSON number"},
		{Name: "json_filter of a bare word", Kind: "json_filter", Op: jsonFilter("a", pb.CompareOp_COMPARE_OP_EQUAL, "gold"), Wiring: Between, Field: fvalue, Msg: "gold is not a JSON literal"},
		{Name: "json_filter of a padded literal", Kind: "json_filter", Op: jsonFilter("a", pb.CompareOp_COMPARE_OP_EQUAL, " 1"), Wiring: Between, Field: fvalue, Msg: "is not a JSON literal"},
		{Name: "json_filter of an object", Kind: "json_filter", Op: jsonFilter("a", pb.CompareOp_COMPARE_OP_EQUAL, `{"b":1}`), Wiring: Between, Field: fvalue, Msg: "is an object or array"},
		{Name: "json_filter of a too long literal", Kind: "json_filter", Op: jsonFilter("a", pb.CompareOp_COMPARE_OP_EQUAL, `"`+strings.Repeat("x", 1023)+`"`), Wiring: Between, Field: fvalue, Msg: "is 1025 bytes long, over MaxJSONLiteralLen 1024"},
		{Name: "json_filter ordering a boolean", Kind: "json_filter", Op: jsonFilter("a", pb.CompareOp_COMPARE_OP_LESS, "true"), Wiring: Between, Field: fvalue, Msg: "true is not a number or a string: COMPARE_OP_LESS compares numbers or strings only"},
		{Name: "json_filter ordering null", Kind: "json_filter", Op: jsonFilter("a", pb.CompareOp_COMPARE_OP_GREATER_OR_EQUAL, "null"), Wiring: Between, Field: fvalue, Msg: "null is not a number or a string"},
		{Name: "json_filter without input", Kind: "json_filter", Op: jsonFilter("a", pb.CompareOp_COMPARE_OP_EQUAL, "1"), Wiring: Alone, Msg: noInputs},
		{Name: "json_project", Kind: "json_project", Op: jsonProject("user.id", "user", "amount", "", "items.0", "first"), Wiring: Between},
		{Name: "json_project of the most fields", Kind: "json_project", Op: jsonProject(manyFields(64)...), Wiring: Between},
		{Name: "json_project of no fields", Kind: "json_project", Op: jsonProject(), Wiring: Between, Field: "operator.json_project.fields", Msg: "is empty"},
		{Name: "json_project of too many fields", Kind: "json_project", Op: jsonProject(manyFields(65)...), Wiring: Between, Field: "operator.json_project.fields", Msg: "65 fields, over MaxProjectFields 64"},
		{Name: "json_project of a bad path", Kind: "json_project", Op: jsonProject("a", "", "b.", "c"), Wiring: Between, Field: "operator.json_project.fields[1].path", Msg: `"b." has an empty field name`},
		{Name: "json_project of a duplicate name", Kind: "json_project", Op: jsonProject("a", "x", "b", "x"), Wiring: Between, Field: "operator.json_project.fields[1].name", Msg: `the output name "x" is also fields[0]'s`},
		{Name: "json_project of a name that is another's path", Kind: "json_project", Op: jsonProject("a", "", "b", "a"), Wiring: Between, Field: "operator.json_project.fields[1].name", Msg: `the output name "a" is also fields[0]'s`},
		{Name: "json_project of a too long name", Kind: "json_project", Op: jsonProject("a", strings.Repeat("n", 257)), Wiring: Between, Field: "operator.json_project.fields[0].name", Msg: "over MaxJSONPathLen 256"},
		{Name: "json_project without input", Kind: "json_project", Op: jsonProject("a", ""), Wiring: Feeds, Msg: noInputs},
	}
	cases = append(cases, windowCases()...)
	cases = append(cases, wasmCases()...)
	cases = append(cases, fileSourceCases()...)
	cases = append(cases, natsCases()...)
	cases = append(cases, natsSinkCases()...)
	cases = append(cases, postgresCases()...)
	return cases
}

// wasmArtifact is a well-formed artifact hash (no artifact of it need exist: validation
// checks its form; the task fetches it when it opens).
var wasmArtifact = strings.Repeat("0123456789abcdef", 4)

// wasmCases are the cases of the wasm kind: one bad case per rule of graph/wasmop.go.
func wasmCases() []Case {
	op := func(mod func(w *pb.WasmOperator)) *pb.Operator {
		w := &pb.WasmOperator{Artifact: wasmArtifact, Function: "split", Kind: pb.WasmKind_WASM_KIND_FLAT_MAP}
		mod(w)
		return &pb.Operator{Kind: &pb.Operator_Wasm{Wasm: w}}
	}
	bad := func(name string, mod func(w *pb.WasmOperator), field, msg string) Case {
		return Case{Name: name, Kind: "wasm", Op: op(mod), Wiring: Between, Field: "operator.wasm." + field, Msg: msg}
	}
	good := func(name string, mod func(w *pb.WasmOperator)) Case {
		return Case{Name: name, Kind: "wasm", Op: op(mod), Wiring: Between}
	}
	return []Case{
		good("wasm flat-map", func(*pb.WasmOperator) {}),
		good("wasm process with config and limits", func(w *pb.WasmOperator) {
			w.Kind, w.Function, w.Config, w.MemoryLimitMib, w.CallTimeoutMs = pb.WasmKind_WASM_KIND_PROCESS, "detect", `{"threshold": 90}`, 1024, 60_000
		}),
		{Name: "wasm without input", Kind: "wasm", Op: op(func(*pb.WasmOperator) {}), Wiring: Feeds, Msg: `vertex "v" has no inputs`},
		bad("wasm artifact not a hash", func(w *pb.WasmOperator) { w.Artifact = "bin/fraud.wasm" }, "artifact", `"bin/fraud.wasm" is not a sha256: 64 lower-case hex characters (WasmArtifactLen)`),
		bad("wasm artifact in upper case", func(w *pb.WasmOperator) { w.Artifact = strings.ToUpper(wasmArtifact) }, "artifact", "is not a sha256"),
		bad("wasm without function", func(w *pb.WasmOperator) { w.Function = "" }, "function", "is empty: the name of the function the module exports"),
		bad("wasm function not a name", func(w *pb.WasmOperator) { w.Function = "9split" }, "function", `"9split" is not an export name`),
		bad("wasm function too long", func(w *pb.WasmOperator) { w.Function = strings.Repeat("f", 129) }, "function", "is 129 bytes, over MaxWasmFunctionLen 128"),
		bad("wasm function of the ABI", func(w *pb.WasmOperator) { w.Function = "jm_alloc" }, "function", `"jm_alloc" starts with "jm_", which the ABI's own exports use`),
		bad("wasm without kind", func(w *pb.WasmOperator) { w.Kind = 0 }, "kind", "is unset: MAP, FLAT_MAP, FILTER, KEY_BY or PROCESS"),
		bad("wasm of an unknown kind", func(w *pb.WasmOperator) { w.Kind = 9 }, "kind", "9 is not a WasmKind"),
		bad("wasm memory over the bound", func(w *pb.WasmOperator) { w.MemoryLimitMib = 1025 }, "memory_limit_mib", "1025 is out of range [0, MaxWasmMemoryMiB 1024]"),
		bad("wasm negative memory", func(w *pb.WasmOperator) { w.MemoryLimitMib = -1 }, "memory_limit_mib", "-1 is out of range"),
		bad("wasm timeout over the bound", func(w *pb.WasmOperator) { w.CallTimeoutMs = 60_001 }, "call_timeout_ms", "60001 is out of range [0, MaxWasmCallTimeoutMs 60000]"),
		bad("wasm config not JSON", func(w *pb.WasmOperator) { w.Config = "{threshold: 9" }, "config", "is not valid JSON"),
		bad("wasm config too large", func(w *pb.WasmOperator) { w.Config = `"` + strings.Repeat("x", 64<<10) + `"` }, "config", "over MaxWasmConfigBytes 65536"),
	}
}

func window(w *pb.WindowOperator) *pb.Operator {
	return &pb.Operator{Kind: &pb.Operator_Window{Window: w}}
}

// windowCases are the cases of the window kind: one bad case per rule of
// graph/operators_window.go.
func windowCases() []Case {
	const (
		tumbling = pb.WindowKind_WINDOW_KIND_TUMBLING
		sliding  = pb.WindowKind_WINDOW_KIND_SLIDING
		session  = pb.WindowKind_WINDOW_KIND_SESSION
		maxMs    = 366 * 24 * 3600 * 1000 // graph.MaxWindowMs
	)
	bad := func(name string, w *pb.WindowOperator, field, msg string) Case {
		return Case{Name: name, Kind: "window", Op: window(w), Wiring: Between, Field: "operator.window." + field, Msg: msg}
	}
	good := func(name string, w *pb.WindowOperator) Case {
		return Case{Name: name, Kind: "window", Op: window(w), Wiring: Between}
	}
	return []Case{
		good("tumbling window", &pb.WindowOperator{Kind: tumbling, SizeMs: 60_000, Field: "amount"}),
		good("tumbling window of the largest size and lateness", &pb.WindowOperator{Kind: tumbling, SizeMs: maxMs, AllowedLatenessMs: maxMs}),
		good("sliding window", &pb.WindowOperator{Kind: sliding, SizeMs: 60_000, SlideMs: 10_000, Field: "order.total", AllowedLatenessMs: 5000}),
		good("sliding window of 100 windows", &pb.WindowOperator{Kind: sliding, SizeMs: 100, SlideMs: 1}),
		good("session window", &pb.WindowOperator{Kind: session, GapMs: 30_000, Field: "items.0"}),
		good("window on a field of special characters", &pb.WindowOperator{Kind: tumbling, SizeMs: 10, Field: "a*b.#.@this|x"}),
		{Name: "window without input", Kind: "window", Op: window(&pb.WindowOperator{Kind: tumbling, SizeMs: 10}), Wiring: Feeds, Msg: `vertex "v" has no inputs`},
		bad("window of no kind", &pb.WindowOperator{SizeMs: 10}, "kind", "is unset: TUMBLING, SLIDING or SESSION"),
		bad("window of an unknown kind", &pb.WindowOperator{Kind: 9, SizeMs: 10}, "kind", "9 is not a WindowKind"),
		bad("tumbling window of size 0", &pb.WindowOperator{Kind: tumbling}, "size_ms", "0 is out of range [1, MaxWindowMs 31622400000]"),
		bad("tumbling window of a negative size", &pb.WindowOperator{Kind: tumbling, SizeMs: -5}, "size_ms", "-5 is out of range [1, MaxWindowMs 31622400000]"),
		bad("tumbling window too large", &pb.WindowOperator{Kind: tumbling, SizeMs: maxMs + 1}, "size_ms", "31622400001 is out of range [1, MaxWindowMs 31622400000]"),
		bad("sliding window too large", &pb.WindowOperator{Kind: sliding, SizeMs: maxMs + 1, SlideMs: 1000}, "size_ms", "31622400001 is out of range [1, MaxWindowMs"),
		bad("tumbling window with a slide", &pb.WindowOperator{Kind: tumbling, SizeMs: 10, SlideMs: 5}, "slide_ms", "5 must be 0 for a TUMBLING window (slide_ms is for SLIDING)"),
		bad("tumbling window with a gap", &pb.WindowOperator{Kind: tumbling, SizeMs: 10, GapMs: 5}, "gap_ms", "5 must be 0 for a TUMBLING window (gap_ms is for SESSION)"),
		bad("sliding window without a slide", &pb.WindowOperator{Kind: sliding, SizeMs: 10}, "slide_ms", "0 is out of range [1, MaxWindowMs 31622400000]"),
		bad("sliding window of a negative slide", &pb.WindowOperator{Kind: sliding, SizeMs: 10, SlideMs: -1}, "slide_ms", "-1 is out of range [1, MaxWindowMs"),
		bad("slide longer than the size", &pb.WindowOperator{Kind: sliding, SizeMs: 10, SlideMs: 20}, "slide_ms", "20 is more than size_ms 10"),
		bad("slide not dividing the size", &pb.WindowOperator{Kind: sliding, SizeMs: 10, SlideMs: 3}, "slide_ms", "3 does not divide size_ms 10"),
		bad("too many sliding windows", &pb.WindowOperator{Kind: sliding, SizeMs: 101, SlideMs: 1}, "slide_ms", "1 makes size_ms/slide_ms 101 windows per record, more than MaxSlidingWindows 100"),
		bad("sliding window with a gap", &pb.WindowOperator{Kind: sliding, SizeMs: 10, SlideMs: 5, GapMs: 1}, "gap_ms", "1 must be 0 for a SLIDING window"),
		bad("session window without a gap", &pb.WindowOperator{Kind: session}, "gap_ms", "0 is out of range [1, MaxWindowMs 31622400000]"),
		bad("session window gap too large", &pb.WindowOperator{Kind: session, GapMs: maxMs + 1}, "gap_ms", "31622400001 is out of range [1, MaxWindowMs"),
		bad("session window with a size", &pb.WindowOperator{Kind: session, GapMs: 10, SizeMs: 10}, "size_ms", "10 must be 0 for a SESSION window (size_ms is for TUMBLING and SLIDING)"),
		bad("session window with a slide", &pb.WindowOperator{Kind: session, GapMs: 10, SlideMs: 10}, "slide_ms", "10 must be 0 for a SESSION window (slide_ms is for SLIDING)"),
		bad("negative allowed lateness", &pb.WindowOperator{Kind: tumbling, SizeMs: 10, AllowedLatenessMs: -1}, "allowed_lateness_ms", "-1 is out of range [0, MaxWindowMs 31622400000]"),
		bad("allowed lateness too large", &pb.WindowOperator{Kind: session, GapMs: 10, AllowedLatenessMs: maxMs + 1}, "allowed_lateness_ms", "31622400001 is out of range [0, MaxWindowMs"),
		bad("window field with an empty element", &pb.WindowOperator{Kind: tumbling, SizeMs: 10, Field: "a..b"}, "field", `"a..b" has an empty element`),
		bad("window field ending in a dot", &pb.WindowOperator{Kind: tumbling, SizeMs: 10, Field: "amount."}, "field", `"amount." has an empty element`),
		bad("window field with a control character", &pb.WindowOperator{Kind: tumbling, SizeMs: 10, Field: "a\nb"}, "field", `"a\nb" contains a control character`),
		bad("window field too long", &pb.WindowOperator{Kind: tumbling, SizeMs: 10, Field: strings.Repeat("x", 257)}, "field", "is 257 bytes, more than MaxWindowFieldBytes 256"),
	}
}

// manyFields is n json_project fields f0..f(n-1), as path, name pairs.
func manyFields(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("f%d", i), "")
	}
	return out
}

// Want is the problem a bad case must produce, in the "field: message" form of graph.Problem
// with the field relative to the vertex.
func (c Case) Want() string {
	if c.Field == "" {
		return c.Msg
	}
	return fmt.Sprintf("%s: %s", c.Field, c.Msg)
}
