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
// result partitions and into the input channels of its consumers. Producers without an attempt
// leave both empty. It is idempotent and does not touch the consumable flags.
func RefreshProducers(eg *pb.ExecutionGraph) {
	if eg == nil {
		return
	}
	byVertex := make(map[string]*pb.ExecutionJobVertex, len(eg.Vertices))
	for _, ejv := range eg.Vertices {
		byVertex[ejv.VertexId] = ejv
	}
	producerOf := make(map[string]*pb.ExecutionJobVertex, len(eg.Results))
	for _, r := range eg.Results {
		prod := byVertex[r.ProducerVertexId]
		producerOf[r.ResultId] = prod
		for _, p := range r.Partitions {
			cur := currentOf(prod, p.PartitionIndex)
			p.ProducerAttemptId = cur.GetAttemptId()
			p.DataAddress = cur.GetTmDataAddress()
		}
	}
	for _, ejv := range eg.Vertices {
		for _, ev := range ejv.Subtasks {
			// A consumer's channels come in runs of one result: look its producer up per run.
			var (
				last string
				prod *pb.ExecutionJobVertex
			)
			for k, in := range ev.Inputs {
				if k == 0 || in.ResultId != last {
					last, prod = in.ResultId, producerOf[in.ResultId]
				}
				cur := currentOf(prod, in.PartitionIndex)
				in.ProducerAttemptId = cur.GetAttemptId()
				in.ProducerDataAddress = cur.GetTmDataAddress()
			}
		}
	}
}

func currentOf(ejv *pb.ExecutionJobVertex, subtask int32) *pb.Execution {
	if ejv == nil || subtask < 0 || int(subtask) >= len(ejv.Subtasks) {
		return nil
	}
	return ejv.Subtasks[subtask].GetCurrent()
}
