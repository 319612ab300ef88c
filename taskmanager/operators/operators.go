// Package operators holds the built-in operators a task runs: a sequence source, map, filter,
// key-by with a running sum, and the file, log and checksum sinks.
package operators

import (
	"context"
	"errors"
	"fmt"

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
	// WorkDir is the directory sink paths are relative to ("" is the process's directory);
	// sinks open their files through an os.Root on it, so nothing is written outside.
	WorkDir string
	Logger  hclog.Logger
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

// Kind names the operator of op ("sequence_source", "map", ...), or "" when unset.
func Kind(op *pb.Operator) string {
	switch op.GetKind().(type) {
	case *pb.Operator_SequenceSource:
		return "sequence_source"
	case *pb.Operator_Map:
		return "map"
	case *pb.Operator_Filter:
		return "filter"
	case *pb.Operator_KeyBySum:
		return "key_by_sum"
	case *pb.Operator_FileSink:
		return "file_sink"
	case *pb.Operator_LogSink:
		return "log_sink"
	case *pb.Operator_ChecksumSink:
		return "checksum_sink"
	}
	return ""
}

// IsSource reports whether op produces records without inputs.
func IsSource(op *pb.Operator) bool { return Kind(op) == "sequence_source" }

// IsSink reports whether op consumes records without producing any.
func IsSink(op *pb.Operator) bool {
	switch Kind(op) {
	case "file_sink", "log_sink", "checksum_sink":
		return true
	}
	return false
}

// Validate checks an operator and its configuration.
func Validate(op *pb.Operator) error {
	if op == nil || Kind(op) == "" {
		return ErrUnknownOperator
	}
	switch k := op.GetKind().(type) {
	case *pb.Operator_SequenceSource:
		s := k.SequenceSource
		if s.GetCount() < 0 {
			return fmt.Errorf("%w: sequence_source count %d < 0", ErrBadConfig, s.GetCount())
		}
		if s.GetKeys() < 0 {
			return fmt.Errorf("%w: sequence_source keys %d < 0", ErrBadConfig, s.GetKeys())
		}
		if s.GetRatePerSecond() < 0 {
			return fmt.Errorf("%w: sequence_source rate_per_second %v < 0", ErrBadConfig, s.GetRatePerSecond())
		}
	case *pb.Operator_Filter:
		if k.Filter.GetModulus() <= 0 {
			return fmt.Errorf("%w: filter modulus must be > 0", ErrBadConfig)
		}
	case *pb.Operator_FileSink:
		if err := graph.CheckSinkPath(k.FileSink.GetPath()); err != nil {
			return fmt.Errorf("%w: file_sink path: %v", ErrBadConfig, err)
		}
	case *pb.Operator_ChecksumSink:
		if err := graph.CheckSinkPath(k.ChecksumSink.GetPath()); err != nil {
			return fmt.Errorf("%w: checksum_sink path: %v", ErrBadConfig, err)
		}
		if k.ChecksumSink.GetFlushIntervalMs() < 0 {
			return fmt.Errorf("%w: checksum_sink flush_interval_ms < 0", ErrBadConfig)
		}
	}
	return nil
}

// NewSource builds the source operator of op.
func NewSource(op *pb.Operator, info Info) (Source, error) {
	if err := Validate(op); err != nil {
		return nil, err
	}
	s, ok := op.GetKind().(*pb.Operator_SequenceSource)
	if !ok {
		return nil, fmt.Errorf("%w: %s is not a source", ErrBadConfig, Kind(op))
	}
	return newSequenceSource(s.SequenceSource, info), nil
}

// New builds a non-source operator of op.
func New(op *pb.Operator, info Info) (Operator, error) {
	if err := Validate(op); err != nil {
		return nil, err
	}
	if info.Logger == nil {
		info.Logger = hclog.NewNullLogger()
	}
	switch k := op.GetKind().(type) {
	case *pb.Operator_Map:
		m := k.Map.GetMultiply()
		if m == 0 {
			m = 1
		}
		return &mapOp{multiply: m, add: k.Map.GetAdd()}, nil
	case *pb.Operator_Filter:
		return &filterOp{modulus: k.Filter.GetModulus(), remainder: k.Filter.GetRemainder()}, nil
	case *pb.Operator_KeyBySum:
		return &keyBySum{sums: map[int64]int64{}}, nil
	case *pb.Operator_FileSink:
		p, err := SinkPath(k.FileSink.GetPath(), info)
		if err != nil {
			return nil, err
		}
		return &fileSink{dir: info.workDir(), path: p}, nil
	case *pb.Operator_LogSink:
		return &logSink{log: info.Logger}, nil
	case *pb.Operator_ChecksumSink:
		p, err := SinkPath(k.ChecksumSink.GetPath(), info)
		if err != nil {
			return nil, err
		}
		return newChecksumSink(k.ChecksumSink, p, info), nil
	}
	return nil, fmt.Errorf("%w: %s is a source", ErrBadConfig, Kind(op))
}

// SinkTemplate returns the path template of a file or checksum sink, or "" for any other
// operator.
func SinkTemplate(op *pb.Operator) string {
	switch k := op.GetKind().(type) {
	case *pb.Operator_FileSink:
		return k.FileSink.GetPath()
	case *pb.Operator_ChecksumSink:
		return k.ChecksumSink.GetPath()
	}
	return ""
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
