package graph

import (
	"fmt"
	"math"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// The names of the expanded-size limits. Each is also the flag of `jmnode jobmaster` that sets
// it, so a refusal names the knob an operator turns.
const (
	LimitExecutions    = "max-job-executions"
	LimitInputChannels = "max-job-input-channels"
	LimitGraphBytes    = "max-job-graph-bytes"
)

// SizeLimits bounds what a JobGraph may expand to. A zero field means its default.
type SizeLimits struct {
	// MaxExecutions bounds the ExecutionVertices: the sum of the parallelisms.
	MaxExecutions int64
	// MaxInputChannels bounds the input channels of all consumer subtasks together.
	MaxInputChannels int64
	// MaxGraphBytes bounds ExpandedSize.DeployedBytes, the estimated encoded ExecutionGraph of
	// the job while it runs: what every replica holds and every snapshot carries.
	MaxGraphBytes int64
}

// DefaultSizeLimits are the limits a JobMaster applies unless configured otherwise. They admit
// a 512 -> 512 ALL_TO_ALL job (1,024 executions, 262,144 input channels, about 20 MB deployed)
// with room to spare and a job of 100,000 executions (a 100 x 1,000 FORWARD chain is about
// 31 MB deployed), and refuse a 4-vertex ALL_TO_ALL chain at parallelism 1,024 (3,145,728
// input channels).
func DefaultSizeLimits() SizeLimits {
	return SizeLimits{MaxExecutions: 100_000, MaxInputChannels: 512 << 10, MaxGraphBytes: 64 << 20}
}

// CeilingSizeLimits are the replicated hard ceiling: the FSM refuses a SUBMIT_JOB above them
// whatever the JobMasters are configured with, and no configured limit may exceed them. They
// are constants of the code, not of a replica, so every replica decides alike. At the ceiling
// a deployed record stays far enough below the snapshot's record limit (256 MiB) to leave
// room for 10 earlier attempts per subtask, longer addresses and the status history (see
// docs/fsm.md).
func CeilingSizeLimits() SizeLimits {
	return SizeLimits{MaxExecutions: 128 << 10, MaxInputChannels: 1 << 20, MaxGraphBytes: 96 << 20}
}

func (l SizeLimits) withDefaults() SizeLimits {
	d := DefaultSizeLimits()
	if l.MaxExecutions <= 0 {
		l.MaxExecutions = d.MaxExecutions
	}
	if l.MaxInputChannels <= 0 {
		l.MaxInputChannels = d.MaxInputChannels
	}
	if l.MaxGraphBytes <= 0 {
		l.MaxGraphBytes = d.MaxGraphBytes
	}
	return l
}

// Validate reports a limit above the ceiling, naming it. Zero fields (defaults) are valid.
func (l SizeLimits) Validate() error {
	l, c := l.withDefaults(), CeilingSizeLimits()
	for _, x := range []struct {
		name     string
		set, max int64
	}{
		{LimitExecutions, l.MaxExecutions, c.MaxExecutions},
		{LimitInputChannels, l.MaxInputChannels, c.MaxInputChannels},
		{LimitGraphBytes, l.MaxGraphBytes, c.MaxGraphBytes},
	} {
		if x.set > x.max {
			return fmt.Errorf("%s %d is above the replicated ceiling %d", x.name, x.set, x.max)
		}
	}
	return nil
}

// Clamp lowers every limit above the ceiling to the ceiling and fills in the defaults.
func (l SizeLimits) Clamp() SizeLimits {
	l, c := l.withDefaults(), CeilingSizeLimits()
	l.MaxExecutions = min(l.MaxExecutions, c.MaxExecutions)
	l.MaxInputChannels = min(l.MaxInputChannels, c.MaxInputChannels)
	l.MaxGraphBytes = min(l.MaxGraphBytes, c.MaxGraphBytes)
	return l
}

// ExpandedSize is what a JobGraph expands to, computed from the JobGraph alone without
// building anything.
type ExpandedSize struct {
	// Executions is the number of ExecutionVertices (the sum of the parallelisms).
	Executions int64
	// InputChannels: a FORWARD edge gives each consumer subtask one channel, an ALL_TO_ALL
	// edge one per producer subtask (producer x consumer parallelism).
	InputChannels int64
	// Partitions: one per producer subtask and edge.
	Partitions int64
	// GraphBytes is the encoded size of the ExecutionGraph BuildExecutionGraph returns (exact
	// for a valid graph).
	GraphBytes int64
	// DeployedBytes estimates the encoded ExecutionGraph once every subtask has a current
	// attempt and the producers are refreshed into partitions and channels: attempt ids of 32
	// characters, TaskManager addresses of EstimatedAddressLen, five state changes per attempt.
	DeployedBytes int64
}

// Assumptions of ExpandedSize.DeployedBytes about what deployment adds.
const (
	// EstimatedAddressLen is the assumed length of a TaskManager's gRPC and data addresses
	// ("10.100.200.123:7501" has 19 characters).
	EstimatedAddressLen = 20
	// EstimatedTMIDLen is the assumed length of a TaskManager id.
	EstimatedTMIDLen = 8
	estAttemptIDLen  = 32
	estStateChanges  = 5
	estTimestamp     = 1 << 41 // unix milliseconds until 2039 encode in 6 bytes
	estSlotIndex     = 100
)

// SizeError is a JobGraph refused for its expanded size. It wraps ErrInvalidJobGraph: the
// request itself is too large, and sending it again cannot succeed.
type SizeError struct {
	Size     ExpandedSize
	Problems []SizeProblem
	// Ceiling: the refusal comes from the replicated hard ceiling, not a configured limit.
	Ceiling bool
}

// SizeProblem is one exceeded limit.
type SizeProblem struct {
	Limit string // LimitExecutions, LimitInputChannels or LimitGraphBytes
	Max   int64
	Value int64
}

func (e *SizeError) Error() string {
	var b strings.Builder
	b.WriteString(ErrInvalidJobGraph.Error())
	b.WriteString(": the job is too large when expanded")
	for _, p := range e.Problems {
		b.WriteString("; ")
		switch p.Limit {
		case LimitExecutions:
			fmt.Fprintf(&b, "%d executions (sum of the parallelisms)", p.Value)
		case LimitInputChannels:
			fmt.Fprintf(&b, "%d input channels", p.Value)
		default:
			fmt.Fprintf(&b, "an estimated %d bytes (%s) of execution graph", p.Value, mib(p.Value))
		}
		if e.Ceiling {
			fmt.Fprintf(&b, " is over the replicated ceiling of %s = %d", p.Limit, p.Max)
		} else {
			fmt.Fprintf(&b, " is over the limit %s = %d", p.Limit, p.Max)
		}
	}
	return b.String()
}

// Unwrap makes errors.Is(err, ErrInvalidJobGraph) true.
func (e *SizeError) Unwrap() error { return ErrInvalidJobGraph }

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// Check returns a *SizeError naming every limit the size exceeds, or nil.
func (s ExpandedSize) Check(lim SizeLimits) error {
	return s.check(lim.withDefaults(), false)
}

func (s ExpandedSize) check(lim SizeLimits, ceiling bool) error {
	var ps []SizeProblem
	if s.Executions > lim.MaxExecutions {
		ps = append(ps, SizeProblem{LimitExecutions, lim.MaxExecutions, s.Executions})
	}
	if s.InputChannels > lim.MaxInputChannels {
		ps = append(ps, SizeProblem{LimitInputChannels, lim.MaxInputChannels, s.InputChannels})
	}
	if s.DeployedBytes > lim.MaxGraphBytes {
		ps = append(ps, SizeProblem{LimitGraphBytes, lim.MaxGraphBytes, s.DeployedBytes})
	}
	if len(ps) == 0 {
		return nil
	}
	return &SizeError{Size: s, Problems: ps, Ceiling: ceiling}
}

// CheckSize checks a JobGraph's expanded size against configured limits.
func CheckSize(jg *pb.JobGraph, lim SizeLimits) error { return Size(jg).Check(lim) }

// CheckCeiling checks a JobGraph's expanded size against the replicated hard ceiling.
func CheckCeiling(jg *pb.JobGraph) error { return Size(jg).check(CeilingSizeLimits(), true) }

// Size computes what a JobGraph expands to from the JobGraph alone, in time linear in its
// vertices and edges (never in the parallelisms). It accepts any graph: vertices without an id
// or with a parallelism below 1 expand to nothing, edges to unknown vertices are skipped, and
// the sums saturate instead of overflowing.
func Size(jg *pb.JobGraph) ExpandedSize {
	var s ExpandedSize
	if jg == nil {
		return s
	}
	type vinfo struct {
		id string
		p  int64
		in []*pb.JobEdge
	}
	byID := make(map[string]*vinfo, len(jg.Vertices))
	var order []*vinfo
	for _, v := range jg.Vertices {
		if v.GetId() == "" || byID[v.Id] != nil {
			continue
		}
		vi := &vinfo{id: v.Id, p: max(int64(v.Parallelism), 0)}
		byID[v.Id] = vi
		order = append(order, vi)
	}
	var edges []*pb.JobEdge
	for _, e := range jg.Edges {
		if e == nil || byID[e.Source] == nil || byID[e.Target] == nil {
			continue
		}
		byID[e.Target].in = append(byID[e.Target].in, e)
		edges = append(edges, e)
	}
	jobIDLen := len(jg.JobId)
	if jobIDLen == 0 {
		jobIDLen = 32 // the leader assigns one
	}
	built := &sizer{}
	deployed := &sizer{deployed: true}
	for _, z := range []*sizer{built, deployed} {
		z.total = strField(jobIDLen)
	}
	for _, v := range order {
		s.Executions = satAdd(s.Executions, v.p)
		for _, z := range []*sizer{built, deployed} {
			z.total = satAdd(z.total, z.vertex(v.id, v.p, v.in, func(id string) int64 { return byID[id].p }))
		}
	}
	for _, e := range edges {
		prod, cons := byID[e.Source].p, byID[e.Target].p
		if e.Distribution == pb.Distribution_DISTRIBUTION_FORWARD {
			s.InputChannels = satAdd(s.InputChannels, cons)
		} else {
			s.InputChannels = satAdd(s.InputChannels, satMul(prod, cons))
		}
		s.Partitions = satAdd(s.Partitions, prod)
		for _, z := range []*sizer{built, deployed} {
			z.total = satAdd(z.total, z.result(e, prod, cons))
		}
	}
	s.GraphBytes, s.DeployedBytes = built.total, deployed.total
	return s
}

// sizer adds up the protobuf encoding of an ExecutionGraph, as built or as deployed. Every
// message of the ExecutionGraph has field numbers below 16 (one-byte tags). Subtask and
// partition indexes enter the encoding only through their varint length, so each sum over
// 0..n-1 is taken per class of equal varint length (at most six classes for an int32).
type sizer struct {
	deployed bool
	total    int64
}

// execution is the encoded current Execution of a deployed subtask.
func (z *sizer) execution() int64 {
	stamp := fieldBytes(intField(int64(pb.ExecutionState_EXECUTION_STATE_RUNNING)) + intField(estTimestamp))
	slot := fieldBytes(strField(EstimatedTMIDLen) + intField(estSlotIndex))
	return strField(estAttemptIDLen) + intField(estTimestamp) + intField(int64(pb.ExecutionState_EXECUTION_STATE_RUNNING)) +
		estStateChanges*stamp + slot + 2*strField(EstimatedAddressLen)
}

// producerRef is what refreshing a producer adds to a partition or an input channel: its
// attempt id and data address.
func (z *sizer) producerRef() int64 {
	if !z.deployed {
		return 0
	}
	return strField(estAttemptIDLen) + strField(EstimatedAddressLen)
}

// vertex is the encoded ExecutionJobVertex (with its field tag) of a vertex with parallelism
// p and the given input edges.
func (z *sizer) vertex(id string, p int64, in []*pb.JobEdge, parallelism func(string) int64) int64 {
	body := strField(len(id)) + intField(p)
	for _, sc := range indexClasses(p) {
		ev := strField(len(id)) + sc.field
		if z.deployed {
			ev += fieldBytes(z.execution())
		}
		for _, e := range in {
			rid := strField(len(e.Source) + 2 + len(e.Target))
			if e.Distribution == pb.Distribution_DISTRIBUTION_FORWARD {
				ev = satAdd(ev, fieldBytes(rid+sc.field+z.producerRef()))
				continue
			}
			for _, pc := range indexClasses(parallelism(e.Source)) {
				ev = satAdd(ev, satMul(pc.count, fieldBytes(rid+pc.field+sc.field+z.producerRef())))
			}
		}
		body = satAdd(body, satMul(sc.count, fieldBytes(ev)))
	}
	return fieldBytes(body)
}

// result is the encoded IntermediateResult (with its field tag) of an edge.
func (z *sizer) result(e *pb.JobEdge, prod, cons int64) int64 {
	subs := cons
	if e.Distribution == pb.Distribution_DISTRIBUTION_FORWARD {
		subs = 1
	}
	body := strField(len(e.Source)+2+len(e.Target)) + strField(len(e.Source)) + strField(len(e.Target)) +
		intField(int64(e.ResultType)) + intField(int64(e.Distribution))
	for _, pc := range indexClasses(prod) {
		part := pc.field + intField(subs)
		if z.deployed {
			part += z.producerRef() + 2 // and the consumable flag
		}
		body = satAdd(body, satMul(pc.count, fieldBytes(part)))
	}
	return fieldBytes(body)
}

// indexClass is a run of indexes whose int32 field encodes in the same number of bytes.
type indexClass struct {
	count int64 // how many indexes
	field int64 // encoded size of the field holding one of them (0 for index 0: not written)
}

// indexClasses splits the indexes 0..n-1 into classes of equal encoded size.
func indexClasses(n int64) []indexClass {
	if n <= 0 {
		return nil
	}
	out := []indexClass{{count: 1, field: 0}}
	for lo, width := int64(1), int64(1); lo < n; lo, width = lo<<7, width+1 {
		hi := min(n, lo<<7) // indexes [lo, hi) take width varint bytes
		out = append(out, indexClass{count: hi - lo, field: 1 + width})
	}
	return out
}

// intField is the encoded size of a non-negative int field (0 is not written).
func intField(v int64) int64 {
	if v == 0 {
		return 0
	}
	return 1 + int64(protowire.SizeVarint(uint64(v)))
}

// strField is the encoded size of a string field of n bytes (empty is not written).
func strField(n int) int64 {
	if n == 0 {
		return 0
	}
	return fieldBytes(int64(n))
}

// fieldBytes is the encoded size of a length-delimited field whose body has n bytes.
func fieldBytes(n int64) int64 {
	return satAdd(1+int64(protowire.SizeVarint(uint64(n))), n)
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func satMul(a, b int64) int64 {
	if a != 0 && b > math.MaxInt64/a {
		return math.MaxInt64
	}
	return a * b
}
