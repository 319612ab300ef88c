package graph

import (
	"fmt"
	"math"
	"strings"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// OperatorRole is what an operator kind does in a job: produce, transform or consume records.
type OperatorRole int

const (
	// RoleSource produces records and has no inputs.
	RoleSource OperatorRole = iota + 1
	// RoleTransform has at least one input and may feed other vertices.
	RoleTransform
	// RoleSink has at least one input and feeds nothing.
	RoleSink
)

func (r OperatorRole) String() string {
	switch r {
	case RoleSource:
		return "source"
	case RoleTransform:
		return "transform"
	case RoleSink:
		return "sink"
	}
	return fmt.Sprintf("OperatorRole(%d)", int(r))
}

// OperatorEnv is what an operator's validation depends on besides its own configuration: the
// job's type and the ids a sink path expands. JobGraph validation leaves AttemptID (and JobID
// when the leader assigns it) empty; an empty id stands for the 32 hex characters the
// JobMaster generates. The TaskManager passes its descriptor's ids.
type OperatorEnv struct {
	JobType   pb.JobType
	JobID     string
	VertexID  string
	Subtask   int32
	AttemptID string
}

// OperatorKind is one entry of the operator catalogue: the kind's name (its field name in the
// Operator oneof), its role, the sink path template for kinds that write a file, and the
// validation of its configuration. Each kind's runtime is registered by its own file in
// package operator.
type OperatorKind struct {
	Name string
	Role OperatorRole

	sinkPath func(*pb.Operator) string
	validate func(op *pb.Operator, env OperatorEnv, add addFunc)
	// deadLetters: the kind can send records to the job's dead-letter output (a source can
	// too when its event_time reads a path: OperatorKind.DeadLetters).
	deadLetters bool
}

// DeadLetters reports whether op, of this kind, can send records to the job's dead-letter
// output.
func (k OperatorKind) DeadLetters(op *pb.Operator) bool {
	return k.deadLetters || (k.Role == RoleSource && op.GetEventTime().GetTimePath() != "")
}

type addFunc func(field, format string, args ...any)

// operatorKinds is the catalogue, in the order of the Operator oneof's field numbers. Adding an
// operator: docs/checklists.md.
var operatorKinds = []OperatorKind{
	{Name: "sequence_source", Role: RoleSource, validate: validateSequenceSource},
	{Name: "map", Role: RoleTransform, validate: noConfig},
	{Name: "filter", Role: RoleTransform, validate: validateFilter},
	{Name: "key_by_sum", Role: RoleTransform, validate: noConfig},
	{Name: "file_sink", Role: RoleSink, validate: validateFileSink,
		sinkPath: func(op *pb.Operator) string { return op.GetFileSink().GetPath() }},
	{Name: "log_sink", Role: RoleSink, validate: noConfig},
	{Name: "checksum_sink", Role: RoleSink, validate: validateChecksumSink,
		sinkPath: func(op *pb.Operator) string { return op.GetChecksumSink().GetPath() }},
	{Name: "flat_map", Role: RoleTransform, validate: noConfig},
	{Name: "event_generator", Role: RoleSource, validate: validateEventGenerator},
	{Name: "json_key_by", Role: RoleTransform, validate: validateJSONKeyBy, deadLetters: true},
	{Name: "json_filter", Role: RoleTransform, validate: validateJSONFilter, deadLetters: true},
	{Name: "json_project", Role: RoleTransform, validate: validateJSONProject, deadLetters: true},
	{Name: "window", Role: RoleTransform, validate: validateWindow, deadLetters: true},
	{Name: "wasm", Role: RoleTransform, validate: validateWasm},
	{Name: "file_source", Role: RoleSource, validate: validateFileSource},
	{Name: "nats_source", Role: RoleSource, validate: validateNatsSource},
	{Name: "nats_sink", Role: RoleSink, validate: validateNatsSink},
	{Name: "postgres_sink", Role: RoleSink, validate: validatePostgresSink, deadLetters: true},
}

var (
	operatorOneof = (&pb.Operator{}).ProtoReflect().Descriptor().Oneofs().ByName("kind")
	kindsByName   = func() map[string]int {
		m := make(map[string]int, len(operatorKinds))
		for i, k := range operatorKinds {
			if _, dup := m[k.Name]; dup {
				panic("graph: operator kind " + k.Name + " is in the catalogue twice")
			}
			m[k.Name] = i
		}
		return m
	}()
)

// OperatorKinds returns the catalogue, in the order of the Operator oneof's field numbers.
func OperatorKinds() []OperatorKind {
	return append([]OperatorKind(nil), operatorKinds...)
}

// LookupOperatorKind returns the catalogue entry of the kind with this name.
func LookupOperatorKind(name string) (OperatorKind, bool) {
	i, ok := kindsByName[name]
	if !ok {
		return OperatorKind{}, false
	}
	return operatorKinds[i], true
}

// OperatorKindOf returns the catalogue entry of op's kind; false when op is nil, names no kind,
// or names one the catalogue lacks.
func OperatorKindOf(op *pb.Operator) (OperatorKind, bool) {
	name := oneofName(op)
	if name == "" {
		return OperatorKind{}, false
	}
	return LookupOperatorKind(name)
}

// OperatorRoleOf returns the role of op's kind, or 0 when OperatorKindOf finds none.
func OperatorRoleOf(op *pb.Operator) OperatorRole {
	k, _ := OperatorKindOf(op)
	return k.Role
}

// oneofName is the name of the field set in op's kind oneof, or "".
func oneofName(op *pb.Operator) string {
	if op == nil {
		return ""
	}
	fd := op.ProtoReflect().WhichOneof(operatorOneof)
	if fd == nil {
		return ""
	}
	return string(fd.Name())
}

// SinkTemplate returns the path template of a kind that writes a file, and false for the
// other kinds.
func (k OperatorKind) SinkTemplate(op *pb.Operator) (string, bool) {
	if k.sinkPath == nil {
		return "", false
	}
	return k.sinkPath(op), true
}

// ValidateOperator checks op against the catalogue and returns every problem found, each
// with its field relative to the operator ("" for the operator itself, "filter.remainder"
// for a field of its configuration). It is the one operator check: JobGraph validation and
// the TaskManager's descriptor validation both call it.
func ValidateOperator(op *pb.Operator, env OperatorEnv) []Problem {
	var ps []Problem
	add := func(field, format string, args ...any) {
		ps = append(ps, Problem{Field: field, Message: fmt.Sprintf(format, args...)})
	}
	if op == nil {
		add("", "is missing")
		return ps
	}
	name := oneofName(op)
	k, ok := LookupOperatorKind(name)
	switch {
	case ok:
		k.validate(op, env, add)
		validateEventTime(op, k, add)
	case name != "":
		add("", "operator kind %q has no catalogue entry", name)
	case len(op.ProtoReflect().GetUnknown()) > 0:
		add("", "unknown operator kind")
	default:
		add("", "is missing")
	}
	return ps
}

func noConfig(*pb.Operator, OperatorEnv, addFunc) {}

func validateSequenceSource(op *pb.Operator, env OperatorEnv, add addFunc) {
	s := op.GetSequenceSource()
	if s.GetCount() < 0 {
		add("sequence_source.count", "%d is negative", s.GetCount())
	}
	if r := s.GetRatePerSecond(); r < 0 || math.IsNaN(r) || math.IsInf(r, 0) {
		add("sequence_source.rate_per_second", "%v must be a finite number >= 0", r)
	}
	if s.GetKeys() < 0 {
		add("sequence_source.keys", "%d is negative", s.GetKeys())
	}
	if env.JobType == pb.JobType_JOB_TYPE_BATCH && s.GetCount() <= 0 {
		add("sequence_source.count", "a BATCH job needs bounded sources (count > 0)")
	}
}

// The event generator's bounds.
const (
	// MaxGeneratorKeys bounds event_generator.keys (the skewed distribution keeps a table of
	// this many weights).
	MaxGeneratorKeys = 1 << 20
	// MaxGeneratorKeySkew bounds event_generator.key_skew, the Zipf exponent.
	MaxGeneratorKeySkew = 10.0
	// MaxGeneratorMs bounds event_generator.start_ms (ms since the epoch, year 10000 and more),
	// step_ms and max_disorder_ms.
	MaxGeneratorMs = 1 << 48
	// MaxGeneratorIdleSplits bounds event_generator.idle_splits (the idle splits are the last
	// ones of the vertex's parallelism; as many as the splits leaves none with data).
	MaxGeneratorIdleSplits = 1 << 16
	// MaxGeneratorValueBytes bounds event_generator.value_bytes (the padded size of an event).
	MaxGeneratorValueBytes = 1 << 16
)

func validateEventGenerator(op *pb.Operator, env OperatorEnv, add addFunc) {
	g := op.GetEventGenerator()
	if g.GetCount() < 0 {
		add("event_generator.count", "%d is negative", g.GetCount())
	}
	if k := g.GetKeys(); k < 0 || k > MaxGeneratorKeys {
		add("event_generator.keys", "%d is out of range [0, MaxGeneratorKeys %d]", k, MaxGeneratorKeys)
	}
	if s := g.GetKeySkew(); !(s >= 0 && s <= MaxGeneratorKeySkew) {
		add("event_generator.key_skew", "%v is out of range [0, MaxGeneratorKeySkew %v]", s, MaxGeneratorKeySkew)
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"start_ms", g.GetStartMs()}, {"step_ms", g.GetStepMs()}, {"max_disorder_ms", g.GetMaxDisorderMs()}} {
		if f.v < 0 || f.v > MaxGeneratorMs {
			add("event_generator."+f.name, "%d is out of range [0, MaxGeneratorMs %d]", f.v, int64(MaxGeneratorMs))
		}
	}
	if r := g.GetRatePerSecond(); r < 0 || math.IsNaN(r) || math.IsInf(r, 0) {
		add("event_generator.rate_per_second", "%v must be a finite number >= 0", r)
	}
	if g.GetMaxAmount() < 0 {
		add("event_generator.max_amount", "%d is negative", g.GetMaxAmount())
	}
	if b := g.GetValueBytes(); b < 0 || b > MaxGeneratorValueBytes {
		add("event_generator.value_bytes", "%d is out of range [0, MaxGeneratorValueBytes %d]", b, MaxGeneratorValueBytes)
	}
	if env.JobType == pb.JobType_JOB_TYPE_BATCH && g.GetCount() <= 0 {
		add("event_generator.count", "a BATCH job needs bounded sources (count > 0)")
	}
	switch n := g.GetIdleSplits(); {
	case n < 0 || n > MaxGeneratorIdleSplits:
		add("event_generator.idle_splits", "%d is out of range [0, MaxGeneratorIdleSplits %d]", n, MaxGeneratorIdleSplits)
	case n > 0 && env.JobType == pb.JobType_JOB_TYPE_BATCH:
		add("event_generator.idle_splits", "%d: an idle split never ends, and a BATCH job needs bounded sources (idle_splits 0)", n)
	}
}

func validateFilter(op *pb.Operator, _ OperatorEnv, add addFunc) {
	m := op.GetFilter()
	if m.GetModulus() <= 0 {
		add("filter.modulus", "%d must be > 0", m.GetModulus())
	} else if m.GetRemainder() < 0 || m.GetRemainder() >= m.GetModulus() {
		add("filter.remainder", "%d is out of range [0, %d)", m.GetRemainder(), m.GetModulus())
	}
}

func validateFileSink(op *pb.Operator, env OperatorEnv, add addFunc) {
	checkSinkField(add, "file_sink.path", op.GetFileSink().GetPath(), env)
	if f := op.GetFileSink().GetFormat(); pb.FileSinkFormat_name[int32(f)] == "" {
		add("file_sink.format", "%d is not a FileSinkFormat", int32(f))
	}
}

func validateChecksumSink(op *pb.Operator, env OperatorEnv, add addFunc) {
	s := op.GetChecksumSink()
	checkSinkField(add, "checksum_sink.path", s.GetPath(), env)
	if s.GetFlushIntervalMs() < 0 {
		add("checksum_sink.flush_interval_ms", "%d is negative", s.GetFlushIntervalMs())
	}
}

// checkSinkField refuses a sink path that is empty or could leave the TaskManager's work dir.
func checkSinkField(add addFunc, field, tmpl string, env OperatorEnv) {
	if tmpl == "" {
		add(field, "is empty")
		return
	}
	if err := checkSinkTemplate(tmpl, env); err != nil {
		add(field, "%v", err)
	}
}

// checkSinkTemplate checks a sink path template and its expansion with env's ids (a vertex id
// may be ".."); an empty job or attempt id is expanded as the 32 hex characters the JobMaster
// generates.
func checkSinkTemplate(tmpl string, env OperatorEnv) error {
	if err := CheckSinkPath(tmpl); err != nil {
		return err
	}
	job, attempt := env.JobID, env.AttemptID
	if job == "" {
		job = strings.Repeat("0", 32)
	}
	if attempt == "" {
		attempt = strings.Repeat("0", 32)
	}
	exp := ExpandSinkPath(tmpl, SinkPathVars{Job: job, Vertex: env.VertexID, Subtask: env.Subtask, Attempt: attempt})
	if err := CheckSinkPath(exp); err != nil {
		return fmt.Errorf("%q expands to %q: %w", tmpl, exp, err)
	}
	return nil
}

// WiringProblems returns what is wrong with how a vertex whose operator has role r is
// connected, given its number of inputs and outputs (in a JobGraph its edges; in a task
// descriptor its input gates and produced results; outputs counts those of records, not of
// dead letters): a source has no inputs, every other operator at least one, and a sink feeds
// no records. A role of 0 (no known kind) has no wiring problem: its operator is reported
// instead.
func WiringProblems(vertexID string, r OperatorRole, inputs, outputs int) []string {
	var ps []string
	switch {
	case r == RoleSource && inputs > 0:
		ps = append(ps, fmt.Sprintf("source vertex %q must have no inputs", vertexID))
	case r != 0 && r != RoleSource && inputs == 0:
		ps = append(ps, fmt.Sprintf("vertex %q has no inputs", vertexID))
	}
	if r == RoleSink && outputs > 0 {
		ps = append(ps, fmt.Sprintf("sink vertex %q must have no outgoing edges", vertexID))
	}
	return ps
}
