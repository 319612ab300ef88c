package graph

import (
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// The job's dead-letter output (JobGraph.dead_letters) is an ordinary vertex once the
// JobMaster expanded it (ExpandDeadLetters, before the job is validated and committed): the
// stored JobGraph, the ExecutionGraph, its regions, the descriptors and every view see a
// sink vertex of this id fed by an edge from each vertex that can send dead letters.
const (
	// DeadLetterVertexID is the id of the dead-letter vertex; a job with dead_letters may not
	// have a vertex of its own by that id.
	DeadLetterVertexID = "dead-letters"
	// DeadLetterVertexName is the dead-letter vertex's name.
	DeadLetterVertexName = "dead letters"
)

// CanSendDeadLetters reports whether the vertex's operator can send records to the job's
// dead-letter output (its catalogue kind's DeadLetters); false for an operator of no known
// kind.
func CanSendDeadLetters(jv *pb.JobVertex) bool {
	k, ok := OperatorKindOf(jv.GetOperator())
	return ok && k.DeadLetters(jv.GetOperator())
}

// ExpandDeadLetters returns jg with its dead-letter output as a vertex: for a job with
// dead_letters and at least one vertex that can send dead letters (CanSendDeadLetters), a
// vertex of id DeadLetterVertexID (name DeadLetterVertexName, dead_letters' operator and
// parallelism, 0 meaning 1) at the end of the vertices, and at the end of the edges one edge
// {source: v, target: DeadLetterVertexID, ALL_TO_ALL, PIPELINED, dead_letters: true} for every
// such vertex v, in vertex order. It is idempotent: the vertex is not added when one of that
// id exists (Validate refuses it unless it is the expansion's), nor an edge from a vertex that
// already has one to it. jg is returned itself when nothing is to be added, otherwise a copy
// that shares jg's vertices and edges: jg is never changed. A pure function of jg; it
// tolerates a malformed graph (Validate says what is wrong).
func ExpandDeadLetters(jg *pb.JobGraph) *pb.JobGraph {
	dl := jg.GetDeadLetters()
	if dl == nil {
		return jg
	}
	var senders []string
	hasVertex := false
	for _, jv := range jg.GetVertices() {
		switch {
		case jv.GetId() == DeadLetterVertexID:
			hasVertex = true
		case jv.GetId() != "" && CanSendDeadLetters(jv):
			senders = append(senders, jv.GetId())
		}
	}
	if len(senders) == 0 {
		return jg // nothing sends dead letters: Validate refuses the unused dead_letters
	}
	linked := map[string]bool{}
	for _, e := range jg.GetEdges() {
		if e.GetTarget() == DeadLetterVertexID {
			linked[e.GetSource()] = true
		}
	}
	missing := senders[:0:0]
	for _, s := range senders {
		if !linked[s] {
			missing = append(missing, s)
		}
	}
	if hasVertex && len(missing) == 0 {
		return jg
	}
	out := proto.CloneOf(jg)
	// jg's own vertices and edges, not copies: a missing (nil) one stays missing for Validate.
	out.Vertices, out.Edges = slices.Clone(jg.Vertices), slices.Clone(jg.Edges)
	if !hasVertex {
		out.Vertices = append(out.Vertices, deadLetterVertex(dl))
	}
	for _, s := range missing {
		out.Edges = append(out.Edges, &pb.JobEdge{Source: s, Target: DeadLetterVertexID,
			Distribution: pb.Distribution_DISTRIBUTION_ALL_TO_ALL, ResultType: pb.ResultType_RESULT_TYPE_PIPELINED, DeadLetters: true})
	}
	return out
}

// deadLetterVertex is the vertex ExpandDeadLetters adds for dl.
func deadLetterVertex(dl *pb.DeadLetters) *pb.JobVertex {
	return &pb.JobVertex{Id: DeadLetterVertexID, Name: DeadLetterVertexName, Operator: proto.CloneOf(dl.GetOperator()),
		Parallelism: deadLetterParallelism(dl)}
}

func deadLetterParallelism(dl *pb.DeadLetters) int32 {
	if p := dl.GetParallelism(); p != 0 {
		return p
	}
	return 1
}

// isDeadLetterVertex reports whether jv is the vertex ExpandDeadLetters adds for dl.
func isDeadLetterVertex(jv *pb.JobVertex, dl *pb.DeadLetters) bool {
	return dl != nil && proto.Equal(jv, deadLetterVertex(dl))
}

// deadLetters checks the job's dead-letter output, in the graph ExpandDeadLetters returned:
// dead_letters' operator (a sink, its configuration) and parallelism, that something sends
// dead letters when it is set and that it is set when something does, the reserved vertex id,
// and that exactly the edges into the dead-letter vertex carry dead letters.
func (v *validator) deadLetters(jg *pb.JobGraph, ids map[string]int) {
	dl := jg.GetDeadLetters()
	var senders []int
	taken := false // a vertex of the job's own has the reserved id (deadLetterOutput refuses it)
	for i, jv := range jg.Vertices {
		switch {
		case jv == nil:
		case jv.Id == DeadLetterVertexID:
			taken = taken || !isDeadLetterVertex(jv, dl)
		case CanSendDeadLetters(jv):
			senders = append(senders, i)
		}
	}
	if dl == nil {
		for _, i := range senders {
			k, _ := OperatorKindOf(jg.Vertices[i].Operator)
			v.add(fmt.Sprintf("vertices[%d]", i), "vertex %q (%s) can send dead letters, but the job has no dead-letter output: add "+
				`"dead_letters": {"operator": {"file_sink": {"path": "dead-letters-{subtask}.jsonl", "format": "FILE_SINK_FORMAT_VALUE"}}} (a sink) to the job`,
				jg.Vertices[i].Id, k.Name)
		}
	} else {
		v.deadLetterOutput(jg, dl, len(senders) > 0)
	}
	for i, e := range jg.Edges {
		if e == nil {
			continue
		}
		f := fmt.Sprintf("edges[%d].dead_letters", i)
		si, known := ids[e.Source]
		switch {
		case e.DeadLetters && dl == nil:
			v.add(f, "the job has no dead_letters: only the edges the JobMaster adds to the dead-letter vertex %q carry dead letters", DeadLetterVertexID)
		case e.DeadLetters && e.Target != DeadLetterVertexID:
			v.add(f, "edge %s carries dead letters, but only edges to the dead-letter vertex %q do", ResultID(e.Source, e.Target), DeadLetterVertexID)
		case e.DeadLetters && known && !CanSendDeadLetters(jg.Vertices[si]):
			v.add(f, "vertex %q sends no dead letters", e.Source)
		case !e.DeadLetters && dl != nil && e.Target == DeadLetterVertexID && !taken:
			v.add(f, "edge %s to the dead-letter vertex must carry dead letters (dead_letters: true): the dead-letter vertex takes no records", ResultID(e.Source, e.Target))
		}
	}
}

// deadLetterOutput checks dead_letters itself, and the vertex of its id.
func (v *validator) deadLetterOutput(jg *pb.JobGraph, dl *pb.DeadLetters, sent bool) {
	if !sent {
		v.add("dead_letters", "no vertex of the job can send dead letters (%s): remove dead_letters", strings.Join(deadLetterKinds(), ", "))
	}
	k, known := OperatorKindOf(dl.GetOperator())
	switch {
	case known && k.Role != RoleSink:
		v.add("dead_letters.operator", "%s is a %s: the dead-letter output is a sink (%s)", k.Name, k.Role, strings.Join(sinkKinds(), ", "))
	case known && k.DeadLetters(dl.GetOperator()):
		v.add("dead_letters.operator", "%s sends dead letters itself: the dead-letter output is a sink that sends none (%s)", k.Name, strings.Join(sinkKinds(), ", "))
	default:
		v.operator("dead_letters.operator", dl.GetOperator(), jg.Type, jg.JobId, DeadLetterVertexID)
	}
	if p := dl.GetParallelism(); p < 0 || p > v.lim.MaxParallelism {
		v.add("dead_letters.parallelism", "%d is out of range [0, %d] (0 means 1)", p, v.lim.MaxParallelism)
	}
	for i, jv := range jg.Vertices {
		if jv != nil && jv.Id == DeadLetterVertexID && !isDeadLetterVertex(jv, dl) {
			v.add(fmt.Sprintf("vertices[%d].id", i), "%q is reserved for the job's dead-letter output (dead_letters): give the vertex another id", DeadLetterVertexID)
		}
	}
}

// deadLetterKinds names what can send dead letters, for messages.
func deadLetterKinds() []string {
	var out []string
	for _, k := range operatorKinds {
		if k.deadLetters {
			out = append(out, k.Name)
		}
	}
	return append(out, "a source with event_time.time_path")
}

// sinkKinds names the sink kinds that send no dead letters (what a dead-letter output may be),
// for messages.
func sinkKinds() []string {
	var out []string
	for _, k := range operatorKinds {
		if k.Role == RoleSink && !k.deadLetters {
			out = append(out, k.Name)
		}
	}
	return out
}
