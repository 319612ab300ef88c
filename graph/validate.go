package graph

import (
	"fmt"
	"strings"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// Limits bounds what a submitted JobGraph may ask for. A zero field means its default.
type Limits struct {
	MaxParallelism int32
	MaxVertices    int
	MaxEdges       int
	MaxNameLen     int
	MaxVertexIDLen int
}

// DefaultLimits returns the limits the cluster applies to submitted jobs.
func DefaultLimits() Limits {
	return Limits{
		MaxParallelism: 1024,
		MaxVertices:    256,
		MaxEdges:       1024,
		MaxNameLen:     256,
		MaxVertexIDLen: 64,
	}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxParallelism <= 0 {
		l.MaxParallelism = d.MaxParallelism
	}
	if l.MaxVertices <= 0 {
		l.MaxVertices = d.MaxVertices
	}
	if l.MaxEdges <= 0 {
		l.MaxEdges = d.MaxEdges
	}
	if l.MaxNameLen <= 0 {
		l.MaxNameLen = d.MaxNameLen
	}
	if l.MaxVertexIDLen <= 0 {
		l.MaxVertexIDLen = d.MaxVertexIDLen
	}
	return l
}

// Problem is one thing wrong with a JobGraph: the field path and what is wrong with it.
type Problem struct {
	Field   string
	Message string
}

func (p Problem) String() string {
	if p.Field == "" {
		return p.Message
	}
	return p.Field + ": " + p.Message
}

// ValidationError lists every problem found in a JobGraph. It wraps ErrInvalidJobGraph.
type ValidationError struct {
	Problems []Problem
}

// Error lists every problem, one per line.
func (e *ValidationError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d problem(s)", ErrInvalidJobGraph, len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}

// Unwrap makes errors.Is(err, ErrInvalidJobGraph) true.
func (e *ValidationError) Unwrap() error { return ErrInvalidJobGraph }

type validator struct {
	lim      Limits
	problems []Problem
}

func (v *validator) add(field, format string, args ...any) {
	v.problems = append(v.problems, Problem{Field: field, Message: fmt.Sprintf(format, args...)})
}

// Validate checks a JobGraph and returns nil or a *ValidationError holding every problem found,
// in a deterministic order. It checks the graph as ExpandDeadLetters makes it (the JobMaster
// commits that one), so a job with dead_letters gets the same answer before and after the
// expansion; the added vertex and edges come last, so the fields of the others keep their
// indexes, and dead_letters' problems are reported at dead_letters.
func Validate(jg *pb.JobGraph, lim Limits) error {
	v := &validator{lim: lim.withDefaults()}
	if jg == nil {
		v.add("", "job graph is missing")
		return &ValidationError{Problems: v.problems}
	}
	jg = ExpandDeadLetters(jg)
	v.header(jg)
	ids := v.vertices(jg)
	v.edges(jg, ids)
	v.deadLetters(jg, ids)
	v.restart(jg)
	if len(v.problems) == 0 {
		return nil
	}
	return &ValidationError{Problems: v.problems}
}

func (v *validator) header(jg *pb.JobGraph) {
	if jg.JobId != "" && !isJobID(jg.JobId) {
		v.add("job_id", "must be 32 lower-case hex characters, got %q", jg.JobId)
	}
	switch {
	case jg.Name == "":
		v.add("name", "is empty")
	case len(jg.Name) > v.lim.MaxNameLen:
		v.add("name", "is %d characters long, the limit is %d", len(jg.Name), v.lim.MaxNameLen)
	}
	switch jg.Type {
	case pb.JobType_JOB_TYPE_STREAMING, pb.JobType_JOB_TYPE_BATCH:
	case pb.JobType_JOB_TYPE_UNSPECIFIED:
		v.add("type", "is unspecified (STREAMING or BATCH)")
	default:
		v.add("type", "unknown job type %d", int32(jg.Type))
	}
	if _, ok := pb.FailoverStrategy_name[int32(jg.FailoverStrategy)]; !ok {
		v.add("failover_strategy", "unknown failover strategy %d", int32(jg.FailoverStrategy))
	}
}

// vertices checks every vertex and returns the index of each distinct valid id.
func (v *validator) vertices(jg *pb.JobGraph) map[string]int {
	ids := make(map[string]int, len(jg.Vertices))
	if len(jg.Vertices) == 0 {
		v.add("vertices", "the job has no vertices")
	}
	if len(jg.Vertices) > v.lim.MaxVertices {
		v.add("vertices", "%d vertices, the limit is %d", len(jg.Vertices), v.lim.MaxVertices)
	}
	for i, jv := range jg.Vertices {
		f := fmt.Sprintf("vertices[%d]", i)
		if jv == nil {
			v.add(f, "vertex is missing")
			continue
		}
		switch {
		case jv.Id == "":
			v.add(f+".id", "is empty")
		case len(jv.Id) > v.lim.MaxVertexIDLen:
			v.add(f+".id", "%q is %d characters long, the limit is %d", jv.Id, len(jv.Id), v.lim.MaxVertexIDLen)
		case !isVertexID(jv.Id):
			v.add(f+".id", "%q may only contain A-Z a-z 0-9 _ . -", jv.Id)
		default:
			if j, dup := ids[jv.Id]; dup {
				v.add(f+".id", "duplicate vertex id %q (also vertices[%d])", jv.Id, j)
			} else {
				ids[jv.Id] = i
			}
		}
		if len(jv.Name) > v.lim.MaxNameLen {
			v.add(f+".name", "is %d characters long, the limit is %d", len(jv.Name), v.lim.MaxNameLen)
		}
		if isDeadLetterVertex(jv, jg.DeadLetters) {
			continue // its operator and parallelism are dead_letters' (deadLetterOutput)
		}
		if jv.Parallelism < 1 || jv.Parallelism > v.lim.MaxParallelism {
			v.add(f+".parallelism", "%d is out of range [1, %d]", jv.Parallelism, v.lim.MaxParallelism)
		}
		v.operator(f+".operator", jv.Operator, jg.Type, jg.JobId, jv.Id)
	}
	return ids
}

// operator checks a vertex's operator against the catalogue (ValidateOperator).
func (v *validator) operator(f string, op *pb.Operator, jt pb.JobType, jobID, vertexID string) {
	for _, p := range ValidateOperator(op, OperatorEnv{JobType: jt, JobID: jobID, VertexID: vertexID}) {
		field := f
		if p.Field != "" {
			field += "." + p.Field
		}
		v.add(field, "%s", p.Message)
	}
}

func (v *validator) edges(jg *pb.JobGraph, ids map[string]int) {
	if len(jg.Edges) > v.lim.MaxEdges {
		v.add("edges", "%d edges, the limit is %d", len(jg.Edges), v.lim.MaxEdges)
	}
	seen := make(map[[2]string]int, len(jg.Edges))
	inputs := make([]int, len(jg.Vertices))
	outputs := make([]int, len(jg.Vertices))
	var valid []*pb.JobEdge
	for i, e := range jg.Edges {
		f := fmt.Sprintf("edges[%d]", i)
		if e == nil {
			v.add(f, "edge is missing")
			continue
		}
		si, sok := ids[e.Source]
		ti, tok := ids[e.Target]
		if !sok {
			v.add(f+".source", "unknown vertex %q", e.Source)
		}
		if !tok {
			v.add(f+".target", "unknown vertex %q", e.Target)
		}
		switch e.Distribution {
		case pb.Distribution_DISTRIBUTION_FORWARD, pb.Distribution_DISTRIBUTION_ALL_TO_ALL:
		case pb.Distribution_DISTRIBUTION_UNSPECIFIED:
			v.add(f+".distribution", "is unspecified (FORWARD or ALL_TO_ALL)")
		default:
			v.add(f+".distribution", "unknown distribution %d", int32(e.Distribution))
		}
		switch e.ResultType {
		case pb.ResultType_RESULT_TYPE_PIPELINED, pb.ResultType_RESULT_TYPE_BLOCKING:
		case pb.ResultType_RESULT_TYPE_UNSPECIFIED:
			v.add(f+".result_type", "is unspecified (PIPELINED or BLOCKING)")
		default:
			v.add(f+".result_type", "unknown result type %d", int32(e.ResultType))
		}
		if !sok || !tok {
			continue
		}
		if e.Source == e.Target {
			v.add(f, "self edge on vertex %q", e.Source)
			continue
		}
		key := [2]string{e.Source, e.Target}
		if j, dup := seen[key]; dup {
			v.add(f, "duplicate edge %s (also edges[%d])", ResultID(e.Source, e.Target), j)
			continue
		}
		seen[key] = i
		src, dst := jg.Vertices[si], jg.Vertices[ti]
		if e.Distribution == pb.Distribution_DISTRIBUTION_FORWARD && src.Parallelism != dst.Parallelism {
			v.add(f+".distribution", "FORWARD edge %s needs equal parallelism, got %d and %d",
				ResultID(e.Source, e.Target), src.Parallelism, dst.Parallelism)
		}
		inputs[ti]++
		if !e.DeadLetters {
			outputs[si]++ // a sink may send dead letters, never records
		}
		valid = append(valid, e)
	}
	for i, jv := range jg.Vertices {
		if jv == nil {
			continue
		}
		if _, ok := ids[jv.Id]; !ok || ids[jv.Id] != i {
			continue
		}
		f := fmt.Sprintf("vertices[%d]", i)
		role := OperatorRoleOf(jv.Operator)
		if role != RoleSink && isDeadLetterVertex(jv, jg.DeadLetters) {
			continue // dead_letters.operator is refused for not being a sink
		}
		for _, p := range WiringProblems(jv.Id, role, inputs[i], outputs[i]) {
			v.add(f, "%s", p)
		}
	}
	for _, c := range findCycles(jg, ids, valid) {
		v.add("edges", "cycle %s", strings.Join(c, " -> "))
	}
}

func (v *validator) restart(jg *pb.JobGraph) {
	rs := jg.RestartStrategy
	if rs == nil {
		return
	}
	if _, ok := pb.RestartKind_name[int32(rs.Kind)]; !ok {
		v.add("restart_strategy.kind", "unknown restart kind %d", int32(rs.Kind))
	}
	if rs.Attempts < 0 {
		v.add("restart_strategy.attempts", "%d is negative", rs.Attempts)
	}
	if rs.DelayMs < 0 {
		v.add("restart_strategy.delay_ms", "%d is negative", rs.DelayMs)
	}
}

func isJobID(s string) bool {
	if len(s) != 32 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func isVertexID(s string) bool {
	for _, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '.', c == '-':
		default:
			return false
		}
	}
	return true
}

// findCycles returns one cycle (as a closed path of vertex ids) per strongly connected
// component of more than one vertex, in the order of the components' first vertex.
func findCycles(jg *pb.JobGraph, ids map[string]int, edges []*pb.JobEdge) [][]string {
	n := len(jg.Vertices)
	adj := make([][]int, n)
	for _, e := range edges {
		adj[ids[e.Source]] = append(adj[ids[e.Source]], ids[e.Target])
	}
	comp := tarjan(adj)
	members := map[int][]int{}
	var order []int
	for i := 0; i < n; i++ {
		c := comp[i]
		if _, ok := members[c]; !ok {
			order = append(order, c)
		}
		members[c] = append(members[c], i)
	}
	var cycles [][]string
	for _, c := range order {
		m := members[c]
		if len(m) < 2 {
			continue
		}
		path := cyclePath(adj, comp, m[0])
		names := make([]string, len(path))
		for i, p := range path {
			names[i] = jg.Vertices[p].Id
		}
		cycles = append(cycles, names)
	}
	return cycles
}

// cyclePath finds the shortest path from start back to start inside start's component.
func cyclePath(adj [][]int, comp []int, start int) []int {
	prev := make([]int, len(adj))
	for i := range prev {
		prev[i] = -1
	}
	queue := []int{start}
	for len(queue) > 0 {
		u := queue[0]
		queue = queue[1:]
		for _, w := range adj[u] {
			if comp[w] != comp[start] {
				continue
			}
			if w == start {
				path := []int{start}
				for x := u; x != start; x = prev[x] {
					path = append(path, x)
				}
				// path is start, u, ..., reversed; put it in edge order and close it.
				for i, j := 1, len(path)-1; i < j; i, j = i+1, j-1 {
					path[i], path[j] = path[j], path[i]
				}
				return append(path, start)
			}
			if prev[w] == -1 {
				prev[w] = u
				queue = append(queue, w)
			}
		}
	}
	return []int{start, start}
}

// tarjan labels each node with its strongly connected component.
func tarjan(adj [][]int) []int {
	n := len(adj)
	index := make([]int, n)
	low := make([]int, n)
	onStack := make([]bool, n)
	comp := make([]int, n)
	for i := range index {
		index[i] = -1
	}
	var stack []int
	next, ncomp := 0, 0
	var visit func(u int)
	visit = func(u int) {
		index[u], low[u] = next, next
		next++
		stack = append(stack, u)
		onStack[u] = true
		for _, w := range adj[u] {
			if index[w] == -1 {
				visit(w)
				low[u] = min(low[u], low[w])
			} else if onStack[w] {
				low[u] = min(low[u], index[w])
			}
		}
		if low[u] == index[u] {
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[w] = false
				comp[w] = ncomp
				if w == u {
					break
				}
			}
			ncomp++
		}
	}
	for i := 0; i < n; i++ {
		if index[i] == -1 {
			visit(i)
		}
	}
	return comp
}
