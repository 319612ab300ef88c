package jobmaster

import (
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// schedulingView copies what the scheduler reads of a job: the job graph, status, restarts,
// the results with their partitions and every ExecutionVertex's current execution. It leaves
// out the input channel descriptors and the attempt histories, which are most of a wide job's
// bytes (an ALL_TO_ALL consumer subtask has a descriptor per producer subtask: 262,144 of them
// in a 512 x 512 job), so a pass of the scheduler costs O(executions), not O(channels).
// Descriptors for SubmitTask are built from the committed record itself (submitCommitted).
func (jm *JobMaster) schedulingView(id string) (*pb.JobRecord, bool) {
	var out *pb.JobRecord
	ok := jm.state.WithJob(id, func(rec *pb.JobRecord) {
		out = &pb.JobRecord{
			JobGraph: proto.CloneOf(rec.GetJobGraph()), Status: rec.GetStatus(), SubmittedAt: rec.GetSubmittedAt(),
			Restarts: rec.GetRestarts(), FailureCause: rec.GetFailureCause(), CreateIndex: rec.GetCreateIndex(), ModifyIndex: rec.GetModifyIndex(),
		}
		eg := rec.GetExecutionGraph()
		if eg == nil {
			return
		}
		view := &pb.ExecutionGraph{JobId: eg.GetJobId(), Results: make([]*pb.IntermediateResult, len(eg.GetResults()))}
		for i, r := range eg.GetResults() {
			view.Results[i] = proto.CloneOf(r)
		}
		for _, ejv := range eg.GetVertices() {
			v := &pb.ExecutionJobVertex{VertexId: ejv.GetVertexId(), Parallelism: ejv.GetParallelism(), Subtasks: make([]*pb.ExecutionVertex, len(ejv.GetSubtasks()))}
			for i, ev := range ejv.GetSubtasks() {
				v.Subtasks[i] = &pb.ExecutionVertex{VertexId: ev.GetVertexId(), SubtaskIndex: ev.GetSubtaskIndex(), Current: proto.CloneOf(ev.GetCurrent())}
			}
			view.Vertices = append(view.Vertices, v)
		}
		out.ExecutionGraph = view
	})
	return out, ok
}
