// Package operator holds the built-in operators a task runs: a sequence source, map, filter,
// key-by with a running sum, and the file, log and checksum sinks.
package operator

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/transport/pb"
)

var (
	// ErrUnknownOperator: the Operator message names no known operator.
	ErrUnknownOperator = errors.New("unknown operator")
	// ErrBadConfig: the operator's configuration is invalid.
	ErrBadConfig = errors.New("bad operator config")
)

// Record is the unit of data flowing between operators.
type Record struct {
	Key    int64
	Value  int64
	Origin int32 // source subtask index
	Seq    int64 // sequence number at the source subtask
	// Barrier, when non-zero, makes the record the barrier of that checkpoint instead of data
	// (docs/checkpoints.md). The TaskManager handles barriers; operators never see one.
	Barrier uint64
}

// Stateful is an operator or source whose state a checkpoint keeps. SnapshotState is called
// on the task's goroutine between records, when the task's barrier is aligned: it returns
// the state after every record before the barrier and none after it. A task restored from a
// checkpoint gets the bytes in Info.Restored before Open (or Run). Operators without state
// (map, filter, the log sink) do not implement it.
type Stateful interface {
	SnapshotState() ([]byte, error)
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
	// Restored is the state the task starts from (Stateful.SnapshotState of the checkpoint it
	// is restored from), or nil for a task that starts afresh; RestoredCheckpoint is that
	// checkpoint's id.
	Restored           []byte
	RestoredCheckpoint uint64
	// Checkpointed: the job is checkpointed, so a Committer sink commits its output only with
	// completed checkpoints.
	Checkpointed bool
}

// Source produces records until it is done (bounded) or ctx is cancelled.
type Source interface {
	Run(ctx context.Context, out Emit) error
}

// Operator transforms or consumes records from the task's inputs.
type Operator interface {
	// Open prepares the operator; ctx lives as long as the task.
	Open(ctx context.Context) error
	// Process handles one input record.
	Process(r Record, out Emit) error
	// Finish is called once after every input has ended.
	Finish(out Emit) error
	// Close releases resources; it is called once, after Finish or on failure or cancel.
	Close() error
}

// runtime is what the TaskManager needs to run one catalogue kind (graph.OperatorKinds): a
// constructor, source for a source kind and operator for the others, both given a
// configuration graph.ValidateOperator has accepted; and, for a kind that writes a file, the
// files it writes for the expanded path p, which the TaskManager checks before it accepts the
// task.
type runtime struct {
	source   func(op *pb.Operator, info Info) Source
	operator func(op *pb.Operator, info Info, path string) Operator
	files    func(p string) []string
}

// runtimes registers a runtime for every kind of the catalogue, by its name
// (TestEveryKindHasARuntime). Adding an operator: docs/checklists.md.
var runtimes = map[string]runtime{
	"sequence_source": {source: func(op *pb.Operator, info Info) Source { return newSequenceSource(op.GetSequenceSource(), info) }},
	"map": {operator: func(op *pb.Operator, _ Info, _ string) Operator {
		m := op.GetMap().GetMultiply()
		if m == 0 {
			m = 1
		}
		return &mapOp{multiply: m, add: op.GetMap().GetAdd()}
	}},
	"filter": {operator: func(op *pb.Operator, _ Info, _ string) Operator {
		return &filterOp{modulus: op.GetFilter().GetModulus(), remainder: op.GetFilter().GetRemainder()}
	}},
	"key_by_sum": {operator: func(*pb.Operator, Info, string) Operator { return &keyBySum{sums: map[int64]int64{}} }},
	"file_sink": {
		operator: func(_ *pb.Operator, info Info, p string) Operator {
			return &fileSink{dir: info.workDir(), path: p, checkpointed: info.Checkpointed, restoredID: info.RestoredCheckpoint}
		},
		files: func(p string) []string { return []string{p} },
	},
	"log_sink": {operator: func(_ *pb.Operator, info Info, _ string) Operator { return &logSink{log: info.Logger} }},
	"checksum_sink": {
		operator: func(op *pb.Operator, info Info, p string) Operator {
			return newChecksumSink(op.GetChecksumSink(), p, info)
		},
		files: func(p string) []string { return []string{p, p + checksumTmpSuffix} },
	},
}

// Env is what graph.ValidateOperator needs to know about the task.
func (i Info) Env() graph.OperatorEnv {
	return graph.OperatorEnv{JobType: i.JobType, JobID: i.Job, VertexID: i.Vertex, Subtask: i.Subtask, AttemptID: i.AttemptID}
}

// Validate checks op with the catalogue (graph.ValidateOperator) for the task info describes.
// The error wraps ErrUnknownOperator when op names no kind this build knows, else
// ErrBadConfig, and lists every problem with its field.
func Validate(op *pb.Operator, info Info) error {
	ps := graph.ValidateOperator(op, info.Env())
	if len(ps) == 0 {
		return nil
	}
	msgs := make([]string, len(ps))
	for i, p := range ps {
		msgs[i] = p.String()
	}
	sentinel := ErrBadConfig
	if _, ok := graph.OperatorKindOf(op); !ok {
		sentinel = ErrUnknownOperator
	}
	return fmt.Errorf("%w: %s", sentinel, strings.Join(msgs, "; "))
}

// lookup validates op and returns its kind and runtime.
func lookup(op *pb.Operator, info Info) (graph.OperatorKind, runtime, error) {
	if err := Validate(op, info); err != nil {
		return graph.OperatorKind{}, runtime{}, err
	}
	k, _ := graph.OperatorKindOf(op)
	rt, ok := runtimes[k.Name]
	if !ok {
		return k, rt, fmt.Errorf("%w: kind %q has no runtime in this TaskManager", ErrUnknownOperator, k.Name)
	}
	return k, rt, nil
}

// NewSource builds the source operator of op.
func NewSource(op *pb.Operator, info Info) (Source, error) {
	k, rt, err := lookup(op, info)
	if err != nil {
		return nil, err
	}
	if k.Role != graph.RoleSource || rt.source == nil {
		return nil, fmt.Errorf("%w: %s is not a source", ErrBadConfig, k.Name)
	}
	src := rt.source(op, info)
	if err := restore(src, k.Name, info); err != nil {
		return nil, err
	}
	return src, nil
}

// New builds a non-source operator of op; a sink's path is expanded and checked first
// (SinkPath).
func New(op *pb.Operator, info Info) (Operator, error) {
	k, rt, err := lookup(op, info)
	if err != nil {
		return nil, err
	}
	if k.Role == graph.RoleSource || rt.operator == nil {
		return nil, fmt.Errorf("%w: %s is a source", ErrBadConfig, k.Name)
	}
	if info.Logger == nil {
		info.Logger = hclog.NewNullLogger()
	}
	var p string
	if tmpl, ok := k.SinkTemplate(op); ok {
		if p, err = SinkPath(tmpl, info); err != nil {
			return nil, err
		}
	}
	o := rt.operator(op, info, p)
	if err := restore(o, k.Name, info); err != nil {
		return nil, err
	}
	return o, nil
}

// SinkFiles returns the files a sink of op writes inside the work dir, its path expanded with
// info's ids (and, for a checksum sink, its temporary file), or nil for an operator that
// writes no file. The error wraps ErrBadConfig.
func SinkFiles(op *pb.Operator, info Info) ([]string, error) {
	k, ok := graph.OperatorKindOf(op)
	if !ok {
		return nil, nil
	}
	tmpl, ok := k.SinkTemplate(op)
	if !ok {
		return nil, nil
	}
	p, err := SinkPath(tmpl, info)
	if err != nil {
		return nil, err
	}
	if rt := runtimes[k.Name]; rt.files != nil {
		return rt.files(p), nil
	}
	return []string{p}, nil
}

// SinkPath expands a sink path template with the task's {job}, {vertex}, {subtask} and
// {attempt} and checks the result: a clean relative path, to be opened inside the work
// directory through an os.Root (which refuses symlinks that lead out). The error wraps
// ErrBadConfig.
func SinkPath(tmpl string, info Info) (string, error) {
	p := graph.ExpandSinkPath(tmpl, graph.SinkPathVars{Job: info.Job, Vertex: info.Vertex, Subtask: info.Subtask, Attempt: info.AttemptID})
	if err := graph.CheckSinkPath(p); err != nil {
		return "", fmt.Errorf("%w: sink path %q expands to %q: %v", ErrBadConfig, tmpl, p, err)
	}
	return p, nil
}

// workDir is the directory sink paths are relative to.
func (i Info) workDir() string {
	if i.WorkDir == "" {
		return "."
	}
	return i.WorkDir
}
