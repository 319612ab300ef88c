package graph

import "github.com/jmcluster/jmcluster/transport/pb"

// FindJobVertex returns the ExecutionJobVertex with the given id, or nil.
func FindJobVertex(eg *pb.ExecutionGraph, vertexID string) *pb.ExecutionJobVertex {
	for _, ejv := range eg.GetVertices() {
		if ejv.VertexId == vertexID {
			return ejv
		}
	}
	return nil
}

// FindVertex returns the ExecutionVertex of a subtask, or nil.
func FindVertex(eg *pb.ExecutionGraph, vertexID string, subtask int32) *pb.ExecutionVertex {
	ejv := FindJobVertex(eg, vertexID)
	if ejv == nil || subtask < 0 || int(subtask) >= len(ejv.Subtasks) {
		return nil
	}
	if ev := ejv.Subtasks[subtask]; ev.GetSubtaskIndex() == subtask {
		return ev
	}
	for _, ev := range ejv.Subtasks {
		if ev.SubtaskIndex == subtask {
			return ev
		}
	}
	return nil
}

// FindAttempt returns the ExecutionVertex whose current execution has the attempt id, or nil.
// Earlier attempts (history) are not considered. It scans the graph; callers with many lookups
// keep their own index.
func FindAttempt(eg *pb.ExecutionGraph, attemptID string) *pb.ExecutionVertex {
	if attemptID == "" {
		return nil
	}
	for _, ejv := range eg.GetVertices() {
		for _, ev := range ejv.Subtasks {
			if ev.Current.GetAttemptId() == attemptID {
				return ev
			}
		}
	}
	return nil
}

// AllExecutions returns every ExecutionVertex in graph order (topological vertex order, then
// subtask). The pointers refer into eg.
func AllExecutions(eg *pb.ExecutionGraph) []*pb.ExecutionVertex {
	n := 0
	for _, ejv := range eg.GetVertices() {
		n += len(ejv.Subtasks)
	}
	out := make([]*pb.ExecutionVertex, 0, n)
	for _, ejv := range eg.GetVertices() {
		out = append(out, ejv.Subtasks...)
	}
	return out
}

// CountByState counts current executions per state. ExecutionVertices without an attempt are
// not counted.
func CountByState(eg *pb.ExecutionGraph) map[pb.ExecutionState]int {
	counts := map[pb.ExecutionState]int{}
	for _, ejv := range eg.GetVertices() {
		for _, ev := range ejv.Subtasks {
			if ev.Current != nil {
				counts[ev.Current.State]++
			}
		}
	}
	return counts
}

// RefreshProducers copies every producer's current attempt id and data address into its
// result partitions. Producers without an attempt leave both empty. It is idempotent and does
// not touch the consumable flags. The input channels of the consumers are not kept in the
// graph (Inputs): they read their producers from these partitions.
func RefreshProducers(eg *pb.ExecutionGraph) {
	if eg == nil {
		return
	}
	byVertex := make(map[string]*pb.ExecutionJobVertex, len(eg.Vertices))
	for _, ejv := range eg.Vertices {
		byVertex[ejv.VertexId] = ejv
	}
	for _, r := range eg.Results {
		prod := byVertex[r.ProducerVertexId]
		for _, p := range r.Partitions {
			cur := currentOf(prod, p.PartitionIndex)
			p.ProducerAttemptId = cur.GetAttemptId()
			p.DataAddress = cur.GetTmDataAddress()
		}
	}
}

// The input channels of a consumer subtask follow from the results its vertex consumes: a
// FORWARD result gives subtask c one channel, partition c; any other gives it one channel per
// partition p of the result, at subpartition c; each reads the producer attempt and data
// address its partition holds (RefreshProducers). They are listed in the order of the results
// (edge order), then partition. The graph does not keep them: a 512 x 512 ALL_TO_ALL edge has
// 262,144, which every JobMaster would build and keep for each submission. Inputs makes them
// on demand; MaterializeInputs writes them into a graph (the snapshot and view encoding, which
// a JobMaster of an earlier release reads its channels from) and StripInputs takes them out
// again (a restored snapshot).

// consumes reports whether result r feeds the vertex.
func consumes(r *pb.IntermediateResult, vertexID string) bool {
	return r.GetConsumerVertexId() == vertexID
}

// channelsOf is the number of input channels result r gives each of its consumer subtasks.
func channelsOf(r *pb.IntermediateResult) int {
	if r.GetDistribution() == pb.Distribution_DISTRIBUTION_FORWARD {
		return 1
	}
	return len(r.GetPartitions())
}

// InputCount is the number of input channels of ev (len(Inputs(eg, ev))) without making them.
func InputCount(eg *pb.ExecutionGraph, ev *pb.ExecutionVertex) int {
	n := 0
	for _, r := range eg.GetResults() {
		if consumes(r, ev.GetVertexId()) {
			n += channelsOf(r)
		}
	}
	return n
}

// InputCounts maps each consuming vertex to the number of input channels each of its subtasks
// has (InputCount, which depends on the vertex only).
func InputCounts(eg *pb.ExecutionGraph) map[string]int {
	m := map[string]int{}
	for _, r := range eg.GetResults() {
		m[r.GetConsumerVertexId()] += channelsOf(r)
	}
	return m
}

// Inputs makes the input channels of ev, a subtask of eg, in graph order; the descriptors are
// fresh (the caller may keep or change them).
func Inputs(eg *pb.ExecutionGraph, ev *pb.ExecutionVertex) []*pb.InputChannelDescriptor {
	n := InputCount(eg, ev)
	if n == 0 {
		return nil
	}
	chs := make([]pb.InputChannelDescriptor, n) // one allocation for all of them
	out := make([]*pb.InputChannelDescriptor, 0, n)
	for _, r := range eg.GetResults() {
		if !consumes(r, ev.GetVertexId()) {
			continue
		}
		for k := range channelsOf(r) {
			in := &chs[len(out)]
			fillChannel(in, r, ev.GetSubtaskIndex(), k)
			out = append(out, in)
		}
	}
	return out
}

// fillChannel sets in to the k-th channel result r gives consumer subtask c.
func fillChannel(in *pb.InputChannelDescriptor, r *pb.IntermediateResult, c int32, k int) {
	part, sub := int32(k), c
	if r.GetDistribution() == pb.Distribution_DISTRIBUTION_FORWARD {
		part, sub = c, 0
	}
	in.ResultId, in.PartitionIndex, in.SubpartitionIndex = r.ResultId, part, sub
	if int(part) < len(r.Partitions) {
		p := r.Partitions[part]
		in.ProducerAttemptId, in.ProducerDataAddress = p.GetProducerAttemptId(), p.GetDataAddress()
	}
}

// MaterializeInputs sets every subtask's Inputs (Inputs(eg, ev)) in place.
func MaterializeInputs(eg *pb.ExecutionGraph) {
	for _, ejv := range eg.GetVertices() {
		for _, ev := range ejv.Subtasks {
			ev.Inputs = Inputs(eg, ev)
		}
	}
}

// StripInputs clears every subtask's Inputs in place.
func StripInputs(eg *pb.ExecutionGraph) {
	for _, ejv := range eg.GetVertices() {
		for _, ev := range ejv.Subtasks {
			ev.Inputs = nil
		}
	}
}

func currentOf(ejv *pb.ExecutionJobVertex, subtask int32) *pb.Execution {
	if ejv == nil || subtask < 0 || int(subtask) >= len(ejv.Subtasks) {
		return nil
	}
	return ejv.Subtasks[subtask].GetCurrent()
}
