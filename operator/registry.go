package operator

import (
	"fmt"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// runtime is what the TaskManager needs to run one catalogue kind (graph.OperatorKinds):
// the constructor of its role's interface (source, transform or sink), given a configuration
// graph.ValidateOperator has accepted; keyed for a transform whose Context values and timers
// the checkpoint keeps; and, for a kind that writes a file, the files it writes for the
// expanded path p, which the TaskManager checks before it accepts the task.
type runtime struct {
	source    func(op *pb.Operator, info Info) Source
	transform func(op *pb.Operator, info Info) Transform
	sink      func(op *pb.Operator, info Info, path string) Sink
	keyed     bool
	files     func(p string) []string
}

// runtimes holds a runtime for every kind of the catalogue, by its name
// (TestEveryKindHasARuntime); each operator's file registers its own. Adding an operator:
// docs/checklists.md.
var (
	runtimesMu sync.RWMutex // ReplaceTransform's and ReplaceSource's swap against the tasks that look up
	runtimes   = map[string]runtime{}
)

// register adds the runtime of the catalogue kind name; an operator's file calls it from
// init.
func register(name string, rt runtime) {
	if _, dup := runtimes[name]; dup {
		panic("operator: a runtime for " + name + " is registered twice")
	}
	runtimes[name] = rt
}

// runtimeOf returns the runtime registered for kind name.
func runtimeOf(name string) (runtime, bool) {
	runtimesMu.RLock()
	defer runtimesMu.RUnlock()
	rt, ok := runtimes[name]
	return rt, ok
}

// ReplaceTransform makes the transform kind run newT's transforms (keyed: its Context is
// checkpointed) until tb's cleanup: for a test that runs a transform of its own through a
// real task. The catalogue's validation of kind stays; tests that replace a kind must not
// run in parallel with tests that use it.
func ReplaceTransform(tb interface{ Cleanup(func()) }, kind string, keyed bool, newT func(op *pb.Operator, info Info) Transform) {
	runtimesMu.Lock()
	old, ok := runtimes[kind]
	if !ok || old.transform == nil {
		runtimesMu.Unlock()
		panic("operator: ReplaceTransform of " + kind + ", which is not a transform kind")
	}
	runtimes[kind] = runtime{transform: newT, keyed: keyed}
	runtimesMu.Unlock()
	tb.Cleanup(func() {
		runtimesMu.Lock()
		runtimes[kind] = old
		runtimesMu.Unlock()
	})
}

// ReplaceSource makes the source kind run newS's sources until tb's cleanup, as
// ReplaceTransform does for a transform: for a test that emits records of its own (a latency
// test stamps each with the clock at emission) through a real task. The catalogue's
// validation of kind stays; tests that replace a kind must not run in parallel with tests
// that use it.
func ReplaceSource(tb interface{ Cleanup(func()) }, kind string, newS func(op *pb.Operator, info Info) Source) {
	runtimesMu.Lock()
	old, ok := runtimes[kind]
	if !ok || old.source == nil {
		runtimesMu.Unlock()
		panic("operator: ReplaceSource of " + kind + ", which is not a source kind")
	}
	runtimes[kind] = runtime{source: newS}
	runtimesMu.Unlock()
	tb.Cleanup(func() {
		runtimesMu.Lock()
		runtimes[kind] = old
		runtimesMu.Unlock()
	})
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
	rt, ok := runtimeOf(k.Name)
	if !ok {
		return k, rt, fmt.Errorf("%w: kind %q has no runtime in this TaskManager", ErrUnknownOperator, k.Name)
	}
	return k, rt, nil
}

// NewSource builds the source operator of op: the task's splits (AssignSplits), at the
// positions info.Restored kept.
func NewSource(op *pb.Operator, info Info) (SourceOperator, error) {
	k, rt, err := lookup(op, info)
	if err != nil {
		return nil, err
	}
	if k.Role != graph.RoleSource || rt.source == nil {
		return nil, fmt.Errorf("%w: %s is not a source", ErrBadConfig, k.Name)
	}
	o, err := newSourceOperator(k.Name, rt.source(op, info), info, op.GetEventTime())
	if err != nil {
		return nil, err // not a nil *sourceOperator in a non-nil interface
	}
	return o, nil
}

// New builds the operator of a transform or sink op, restored from info.Restored; a sink's
// path is expanded and checked first (SinkPath).
func New(op *pb.Operator, info Info) (Operator, error) {
	k, rt, err := lookup(op, info)
	if err != nil {
		return nil, err
	}
	if info.Logger == nil {
		info.Logger = hclog.NewNullLogger()
	}
	switch {
	case k.Role == graph.RoleTransform && rt.transform != nil:
		o, err := newTransformOperator(k.Name, rt.transform(op, info), rt.keyed, info)
		if err != nil {
			return nil, err
		}
		return o, nil
	case k.Role == graph.RoleSink && rt.sink != nil:
		var p string
		if tmpl, ok := k.SinkTemplate(op); ok {
			if p, err = SinkPath(tmpl, info); err != nil {
				return nil, err
			}
		}
		return newSinkOperator(k.Name, rt.sink(op, info, p), info)
	}
	return nil, fmt.Errorf("%w: %s is a %s without a runtime of its role", ErrBadConfig, k.Name, k.Role)
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
	if rt, _ := runtimeOf(k.Name); rt.files != nil {
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
