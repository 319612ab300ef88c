// Package operatorcases is the table of operator configurations, good and bad, that both the
// operator catalogue's test (graph) and the TaskManager's agreement test run: each case is
// tried as a vertex of a JobGraph (graph.Validate) and as the task descriptor the JobMaster
// deploys for it (the TaskManager's descriptor validation and a real SubmitTask).
package operatorcases

import (
	"fmt"
	"math"

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

// JobGraph returns the job the case's vertex is tried in, wired as c.Wiring says. Everything
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
	return &pb.JobGraph{
		JobId: JobID, Name: c.Name, Type: jt,
		Vertices: []*pb.JobVertex{
			{Id: "src", Parallelism: 1, Operator: &pb.Operator{Kind: &pb.Operator_SequenceSource{SequenceSource: &pb.SequenceSource{Count: 10}}}},
			{Id: v, Parallelism: 1, Operator: c.Op},
			{Id: "out", Parallelism: 1, Operator: &pb.Operator{Kind: &pb.Operator_LogSink{LogSink: &pb.LogSink{}}}},
		},
		Edges: edges,
	}
}

// Descriptor returns the descriptor the JobMaster deploys for subtask 0 of the case's vertex
// in JobGraph(): its operator, the job's type and ids, one input gate per edge into the vertex
// (its one channel not yet told its producer) and one produced partition per edge out of it.
func (c Case) Descriptor(attemptID string, slot int32) *pb.TaskDeploymentDescriptor {
	jg := c.JobGraph()
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
				Distribution: e.Distribution, ResultType: e.ResultType})
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
	)
	return []Case{
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
	}
}

// Want is the problem a bad case must produce, in the "field: message" form of graph.Problem
// with the field relative to the vertex.
func (c Case) Want() string {
	if c.Field == "" {
		return c.Msg
	}
	return fmt.Sprintf("%s: %s", c.Field, c.Msg)
}
