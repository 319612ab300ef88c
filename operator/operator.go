// Package operator is the operator interface a task runs and the built-in operators written
// on it: sources that read splits from a position, transforms that turn one record into any
// number with keyed state and timers kept by the runtime, and sinks that commit their output
// in two phases. Each built-in operator is one file that registers its runtime against its
// catalogue name (graph/operators.go); the TaskManager runs them through SourceOperator and
// Operator, built by NewSource and New.
package operator

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/jmcluster/jmcluster/transport/pb"
)

var (
	// ErrUnknownOperator: the Operator message names no known operator.
	ErrUnknownOperator = errors.New("unknown operator")
	// ErrBadConfig: the operator's configuration is invalid.
	ErrBadConfig = errors.New("bad operator config")
)

// Emit hands a record to the downstream partitions. It blocks under backpressure and returns an
// error when the task is cancelled or its partitions were released.
type Emit func(Record) error

// Info describes the task an operator runs in.
type Info struct {
	Job           string
	Vertex        string
	Subtask       int32
	Parallelism   int32
	AttemptID     string
	AttemptNumber int32
	// JobType is the job's type (a BATCH job needs bounded sources).
	JobType pb.JobType
	// WorkDir is the directory sink paths are relative to ("" is the process's directory);
	// sinks open their files through an os.Root on it, so nothing is written outside.
	WorkDir string
	Logger  hclog.Logger
	// Restored is the state the task starts from (the SnapshotState of the checkpoint it is
	// restored from), or nil for a task that starts afresh; RestoredCheckpoint is that
	// checkpoint's id.
	Restored           []byte
	RestoredCheckpoint uint64
	// RestoredAhead is, for a restored sink, the newest intact state of its subtask in a
	// checkpoint later than RestoredCheckpoint (the region fell back past a damaged
	// checkpoint, or one was pending when the task failed), or nil: the output the sink
	// committed may be ahead of Restored. A sink whose committed output is cumulative (the
	// checksum sink) commits nothing until its document covers it.
	RestoredAhead []byte
	// Checkpointed: the job is checkpointed, so a Committer sink commits its output only with
	// completed checkpoints.
	Checkpointed bool
	// Artifact returns the bytes of the artifact of this sha256 (64 lower-case hex
	// characters): a WebAssembly module the task runs. The TaskManager fetches it from a
	// JobMaster and caches it; nil when the task cannot fetch artifacts.
	Artifact func(ctx context.Context, sha256 string) ([]byte, error)
	// Secret returns the bytes of the credential a connector names (its spec's credential
	// field; docs/connectors.md#credentials), read from the TaskManager's --secrets-dir. An
	// operator keeps them only as long as it needs them and never logs them or puts them in
	// an error or its state. Nil when the task has no way to read credentials.
	Secret func(name string) ([]byte, error)
	// DeadLetters hands a dead letter (DeadLetterRecord) to the task's dead-letter partitions;
	// nil when the job has no dead-letter output (a kind that can send dead letters then
	// fails the task: the JobGraph's validation requires one).
	DeadLetters Emit
}

// The interfaces an operator implements: one of Source, Transform or Sink, as its catalogue
// role says.

// Source produces records by reading splits. The work of a source vertex is its splits (the
// same list on every subtask); each subtask reads the splits AssignSplits gives it, from the
// positions a checkpoint kept, so a source keeps no position of its own: it reports each
// record's position as it emits it (SourceContext.Emit).
type Source interface {
	// Splits returns every split of the vertex at its start, for the vertex's parallelism.
	Splits(parallelism int32) []Split
	// Read emits the records of splits, each from its Next, until they are all read (a
	// bounded source) or ctx's task ends.
	Read(ctx *SourceContext, splits []Split) error
}

// Split is a part of a source's work and how far it was read.
type Split struct {
	// ID names the split among the vertex's; it is the index of the split in Splits.
	ID int32 `json:"id"`
	// Next is the position of the next record to read.
	Next int64 `json:"next"`
	// End is the position after the last record; 0 for a split without end.
	End int64 `json:"-"`
}

// AssignSplits returns the splits subtask reads: split i goes to subtask i % parallelism.
func AssignSplits(splits []Split, subtask, parallelism int32) []Split {
	var out []Split
	for i, s := range splits {
		if parallelism <= 0 || int32(i)%parallelism == subtask {
			out = append(out, s)
		}
	}
	return out
}

// Transform turns one input record into any number of output records (Context.Emit). Its
// per-key values and timers are the runtime's (Context), which snapshots them in the
// checkpoint: a transform keeps no state in its fields, and a transform registered as keyed
// continues a restored one's values and timers without code of its own.
type Transform interface {
	Process(ctx *Context, r Record) error
}

// The optional parts of a Transform.
type (
	// Opener prepares the transform before its first record.
	Opener interface{ Open(ctx *Context) error }
	// TimerHandler is called for each timer the transform registered (Context.RegisterTimer)
	// once the task's watermark reaches it, with the timer's key as ctx.Key(), in order of
	// time then key; every timer still pending fires when the input ends.
	TimerHandler interface {
		OnTimer(ctx *Context, at int64) error
	}
	// Finisher is called once after every input ended and every timer fired.
	Finisher interface{ Finish(ctx *Context) error }
	// Closer releases what the transform holds; it is called once, after Finish or on
	// failure or cancel.
	Closer interface{ Close() error }
)

// Sink consumes records and writes them out.
type Sink interface {
	// Open opens the sink's files (only through an os.Root on Info.WorkDir); ctx lives as
	// long as the task.
	Open(ctx context.Context) error
	// Write consumes one record.
	Write(r Record) error
	// Finish is called once after every input ended.
	Finish() error
	// Close releases what the sink holds; it is called once, after Finish or on failure or
	// cancel.
	Close() error
}

// Stateful is an operator or source whose state a checkpoint keeps. SnapshotState is called
// on the task's goroutine between records, when the task's barrier is aligned: it returns
// the state after every record before the barrier and none after it (nil: no state).
type Stateful interface {
	SnapshotState() ([]byte, error)
}

// Restorer is a sink that starts from the state it snapshotted (Stateful): RestoreState gets
// Info.Restored before Open. A sink that is not a Restorer refuses restored state.
type Restorer interface {
	RestoreState(b []byte) error
}

// Committer is a sink whose output is committed in two phases (Flink's
// TwoPhaseCommitSinkFunction): PrepareCommit stages what it has at checkpoint id's barrier
// (right after SnapshotState, on the task's goroutine); CommitCheckpoint makes the output staged
// up to id the committed output once the checkpoint completed (the leader's announcement, from
// another goroutine). A commit is idempotent: a second commit of the same or an earlier id
// changes nothing, and a sink restored from a completed checkpoint commits it again at Open,
// so an announcement lost with a TaskManager or a JobMaster loses no committed output.
// Committed is the newest checkpoint committed (0: none), never more than the output holds:
// the TM's report carries it, and a new leader skips announcing the latest completed
// checkpoint again to a TM whose sinks all committed it.
type Committer interface {
	PrepareCommit(id uint64) error
	CommitCheckpoint(id uint64) error
	Committed() uint64
}

// What the TaskManager runs: a source vertex's SourceOperator, or another vertex's Operator
// (a transform or a sink with the runtime's part around it). Both are Stateful (a nil state
// when the operator keeps none); the Operator of a two-phase sink is also its Committer.

// SourceOperator runs a source's splits on a task.
type SourceOperator interface {
	Stateful
	// Run reads the task's splits until they are all read or ctx is cancelled; out gets
	// every record (a barrier injected in out goes in front of the record).
	Run(ctx context.Context, out Emit) error
}

// Operator runs a transform or a sink on a task.
type Operator interface {
	Stateful
	// Open prepares the operator; ctx lives as long as the task.
	Open(ctx context.Context) error
	// Process handles one input record.
	Process(r Record, out Emit) error
	// Finish is called once after every input has ended.
	Finish(out Emit) error
	// Close releases resources; it is called once, after Finish or on failure or cancel.
	Close() error
}

// Buffering is an Operator that may hold records between Process calls (a wasm task's batch).
// Before the TaskManager waits for input it asks how long the oldest held record may still
// wait (FlushIn; false: none held), and calls Flush once that time passes with no input, so
// the last records before a stream goes quiet are not held until the next one.
type Buffering interface {
	FlushIn() (time.Duration, bool)
	Flush(out Emit) error
}

// Watermarker is an Operator that keeps event time (a transform: its Context's watermark and
// timers). The TaskManager advances it when the task's watermark (the lowest over its input
// channels) advances, on the task's goroutine between records.
type Watermarker interface {
	// Watermark is the operator's watermark: NoTimestamp before the first, the checkpointed
	// one after a restore.
	Watermark() int64
	// AdvanceWatermark moves the watermark to t (never back) and fires the timers at or
	// before t (their records go to out).
	AdvanceWatermark(t int64, out Emit) error
}
