package taskmanager

import (
	"context"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// executionReportLocked describes one task for the leader's reconciliation.
func (tm *TaskManager) executionReportLocked(t *task) *pb.ExecutionReport {
	d := t.tdd
	r := &pb.ExecutionReport{
		JobId: d.GetJobId(), VertexId: d.GetVertexId(), SubtaskIndex: d.GetSubtaskIndex(),
		AttemptId: d.GetAttemptId(), AttemptNumber: d.GetAttemptNumber(), StartTimestamp: d.GetStartTimestamp(),
		State: t.state, FailureCause: t.cause, SlotIndex: d.GetSlotIndex(),
	}
	for i, pd := range d.GetProduced() {
		held := i < len(t.produced) && tm.parts.has(t.produced[i])
		var consumable bool
		if resultType(pd.GetResultType()) == pb.ResultType_RESULT_TYPE_BLOCKING {
			consumable = t.state == pb.ExecutionState_EXECUTION_STATE_FINISHED && held
		} else {
			consumable = t.state == pb.ExecutionState_EXECUTION_STATE_RUNNING ||
				(t.state == pb.ExecutionState_EXECUTION_STATE_FINISHED && held)
		}
		r.Produced = append(r.Produced, &pb.ProducedPartitionReport{
			ResultId: pd.GetResultId(), PartitionIndex: pd.GetPartitionIndex(), Consumable: consumable,
		})
	}
	for _, g := range t.gates {
		for _, c := range g.channels {
			cd := c.current()
			r.Consumed = append(r.Consumed, &pb.ConsumedPartitionReport{
				ResultId: cd.GetResultId(), PartitionIndex: cd.GetPartitionIndex(), ProducerAttemptId: cd.GetProducerAttemptId(),
			})
		}
	}
	return r
}

// chunkReport splits executions into chunks of at most size, each a copy of base with its
// chunk_index; the last is flagged, and there is always at least one chunk.
func chunkReport(base *pb.TaskManagerReport, execs []*pb.ExecutionReport, size int) []*pb.TaskManagerReport {
	if size <= 0 {
		size = 1000
	}
	var out []*pb.TaskManagerReport
	for i := 0; i == 0 || i < len(execs); i += size {
		c := proto.Clone(base).(*pb.TaskManagerReport)
		c.Executions = execs[i:min(i+size, len(execs))]
		c.ChunkIndex = int32(len(out))
		out = append(out, c)
	}
	out[len(out)-1].Last = true
	return out
}

// reapLoop drops terminal tasks and finished BLOCKING partitions older than RetainTerminal.
func (tm *TaskManager) reapLoop(ctx context.Context) {
	tick := min(max(tm.cfg.RetainTerminal/4, 5*time.Millisecond), 5*time.Second)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		var expired []partitionKey
		tm.mu.Lock()
		for id, task := range tm.tasks {
			if isTerminal(task.state) && now.Sub(task.endedAt) > tm.cfg.RetainTerminal {
				delete(tm.tasks, id)
			}
		}
		for k, until := range tm.partitionExpiry {
			if now.After(until) {
				expired = append(expired, k)
				delete(tm.partitionExpiry, k)
			}
		}
		tm.mu.Unlock()
		for _, k := range expired {
			tm.parts.remove(k)
		}
	}
}
