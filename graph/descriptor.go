package graph

import (
	"fmt"
	"sort"

	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// TaskDeploymentDescriptor builds the descriptor of one ExecutionVertex's current attempt from
// a committed job record: the operator and parallelism of its JobVertex, the partitions it
// produces (one per result it is the producer of, with the result's subpartition count) and
// its input gates (one per consumed result, in result-id order, holding its channels in
// graph order). Everything it returns is copied, so it may be called on the FSM's live
// record under its read lock. It is a pure function of the record.
func TaskDeploymentDescriptor(rec *pb.JobRecord, vertexID string, subtask int32) (*pb.TaskDeploymentDescriptor, error) {
	jg := rec.JobGraph
	eg := rec.ExecutionGraph
	ev := FindVertex(eg, vertexID, subtask)
	if ev == nil || ev.Current == nil {
		return nil, fmt.Errorf("no current attempt for %s[%d]", vertexID, subtask)
	}
	var jv *pb.JobVertex
	for _, v := range jg.Vertices {
		if v.Id == vertexID {
			jv = v
		}
	}
	if jv == nil {
		return nil, fmt.Errorf("unknown vertex %s", vertexID)
	}
	e := ev.Current
	tdd := &pb.TaskDeploymentDescriptor{
		JobId: jg.JobId, VertexId: vertexID, SubtaskIndex: subtask, Parallelism: jv.Parallelism,
		AttemptId: e.AttemptId, AttemptNumber: e.AttemptNumber, StartTimestamp: e.StartTimestamp,
		SlotIndex: e.GetSlot().GetIndex(), Operator: proto.CloneOf(jv.Operator), JobType: jg.Type,
	}
	for _, res := range eg.Results {
		if res.ProducerVertexId == vertexID {
			p := res.Partitions[subtask]
			tdd.Produced = append(tdd.Produced, &pb.ResultPartitionDeploymentDescriptor{
				ResultId: res.ResultId, PartitionIndex: subtask, NumSubpartitions: p.NumSubpartitions,
				Distribution: res.Distribution, ResultType: res.ResultType,
			})
		}
	}
	gates := map[string]*pb.InputGateDeploymentDescriptor{}
	var order []string
	for _, in := range ev.Inputs {
		g := gates[in.ResultId]
		if g == nil {
			g = &pb.InputGateDeploymentDescriptor{ResultId: in.ResultId}
			for _, res := range eg.Results {
				if res.ResultId == in.ResultId {
					g.Distribution, g.ResultType = res.Distribution, res.ResultType
				}
			}
			gates[in.ResultId] = g
			order = append(order, in.ResultId)
		}
		g.Channels = append(g.Channels, proto.CloneOf(in))
	}
	sort.Strings(order)
	for _, id := range order {
		tdd.Inputs = append(tdd.Inputs, gates[id])
	}
	return tdd, nil
}
