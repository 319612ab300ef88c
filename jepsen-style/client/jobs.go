package client

import (
	"fmt"
	"math/rand"
	"time"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// SinkPathPattern is where the streaming job's checksum sink writes, relative to the TM's
// work dir (TM processes run with their work dir as working directory).
const SinkPathPattern = "checksum/{job}-{vertex}-{subtask}.json"

// StreamParallelism is the parallelism of every vertex of the streaming job.
const StreamParallelism = 2

// StreamSinkVertex is the streaming job's checksum sink.
const StreamSinkVertex = "sink"

// NewJobID returns 32 lower-case hex characters drawn from rng. Clients choose ids themselves,
// so an indeterminate submission can still be looked up.
func NewJobID(rng *rand.Rand) string {
	return fmt.Sprintf("%016x%016x", rng.Uint64(), rng.Uint64())
}

// The streaming job's checkpointing: a checkpoint every second, aborted when not complete 10 s
// after its trigger (a fault that stops one must not hold back the next for the default 10
// minutes), one pending at a time, the newest three completed kept (their rows stay in the
// checkpoint view for three intervals, which the monitor's polls see).
const (
	StreamCheckpointInterval = time.Second
	StreamCheckpointTimeout  = 10 * time.Second
	StreamCheckpointRetained = 3
)

// StreamingJob is the job that runs throughout a run: an unbounded sequence source, a map and
// a checksum sink joined by FORWARD pipelined edges, so every sink subtask receives exactly one
// origin whose sequence numbers must be contiguous. Each subtask index is its own failover
// region. It is checkpointed: a restarted region restores its latest completed checkpoint,
// and the sink commits its output (writes its file) only when a checkpoint completed.
func StreamingJob(id string) *pb.JobGraph {
	fwd := func(a, b string) *pb.JobEdge {
		return &pb.JobEdge{Source: a, Target: b, Distribution: pb.Distribution_DISTRIBUTION_FORWARD,
			ResultType: pb.ResultType_RESULT_TYPE_PIPELINED}
	}
	return &pb.JobGraph{
		JobId: id,
		Name:  "jepsen-stream",
		Type:  pb.JobType_JOB_TYPE_STREAMING,
		Vertices: []*pb.JobVertex{
			{Id: "source", Name: "source", Parallelism: StreamParallelism, Operator: &pb.Operator{Kind: &pb.Operator_SequenceSource{
				SequenceSource: &pb.SequenceSource{RatePerSecond: 100, Keys: 4}}}},
			{Id: "map", Name: "map", Parallelism: StreamParallelism, Operator: &pb.Operator{Kind: &pb.Operator_Map{
				Map: &pb.MapOperator{Multiply: 1, Add: 1}}}},
			{Id: StreamSinkVertex, Name: "sink", Parallelism: StreamParallelism, Operator: &pb.Operator{Kind: &pb.Operator_ChecksumSink{
				ChecksumSink: &pb.ChecksumSink{Path: SinkPathPattern, FlushIntervalMs: 200}}}},
		},
		Edges:            []*pb.JobEdge{fwd("source", "map"), fwd("map", StreamSinkVertex)},
		RestartStrategy:  &pb.RestartStrategy{Kind: pb.RestartKind_RESTART_KIND_FIXED_DELAY, Attempts: 100, DelayMs: 1000},
		FailoverStrategy: pb.FailoverStrategy_FAILOVER_STRATEGY_REGION,
		CheckpointConfig: &pb.CheckpointConfig{IntervalMs: StreamCheckpointInterval.Milliseconds(), TimeoutMs: StreamCheckpointTimeout.Milliseconds(),
			MaxConcurrent: 1, Retained: StreamCheckpointRetained},
	}
}

// DefaultJobRate is the records per second of a bounded job's source.
const DefaultJobRate = 20

// BoundedJob is a small job the generator submits: a source of 10-49 records at rate records
// per second (0: DefaultJobRate; at 20 a couple of seconds of work, so some are still running
// when cancelled) into a log sink.
func BoundedJob(id string, rng *rand.Rand, rate int64) *pb.JobGraph {
	if rate <= 0 {
		rate = DefaultJobRate
	}
	count := int64(10 + rng.Intn(40))
	return &pb.JobGraph{
		JobId: id,
		Name:  "jepsen-bounded",
		Type:  pb.JobType_JOB_TYPE_BATCH,
		Vertices: []*pb.JobVertex{
			{Id: "source", Name: "source", Parallelism: 1, Operator: &pb.Operator{Kind: &pb.Operator_SequenceSource{
				SequenceSource: &pb.SequenceSource{Count: count, RatePerSecond: float64(rate)}}}},
			{Id: "sink", Name: "sink", Parallelism: 1, Operator: &pb.Operator{Kind: &pb.Operator_LogSink{LogSink: &pb.LogSink{}}}},
		},
		Edges: []*pb.JobEdge{{Source: "source", Target: "sink", Distribution: pb.Distribution_DISTRIBUTION_FORWARD,
			ResultType: pb.ResultType_RESULT_TYPE_PIPELINED}},
		RestartStrategy: &pb.RestartStrategy{Kind: pb.RestartKind_RESTART_KIND_NONE},
	}
}
