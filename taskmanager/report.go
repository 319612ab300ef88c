package taskmanager

import (
	"context"
	"math"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/dataplane"
	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// executionReportLocked describes one task for the leader's reconciliation.
func (tm *TaskManager) executionReportLocked(t *task) *pb.ExecutionReport {
	d := t.tdd
	r := &pb.ExecutionReport{
		JobId: d.GetJobId(), VertexId: d.GetVertexId(), SubtaskIndex: d.GetSubtaskIndex(),
		AttemptId: d.GetAttemptId(), AttemptNumber: d.GetAttemptNumber(), StartTimestamp: d.GetStartTimestamp(),
		State: t.state, FailureCause: t.cause, SlotIndex: d.GetSlotIndex(),
		LatestAckedCheckpointId: t.ackedID, LatestCheckpointAck: t.acked,
	}
	if t.committer != nil {
		r.CommitsOutput, r.CommittedCheckpointId = true, t.committer.Committed()
	}
	for i, pd := range d.GetProduced() {
		held := i < len(t.produced) && tm.dp.Holds(t.produced[i])
		var consumable bool
		if dataplane.ResultType(pd.GetResultType()) == pb.ResultType_RESULT_TYPE_BLOCKING {
			consumable = t.state == pb.ExecutionState_EXECUTION_STATE_FINISHED && held
		} else {
			consumable = t.state == pb.ExecutionState_EXECUTION_STATE_RUNNING ||
				(t.state == pb.ExecutionState_EXECUTION_STATE_FINISHED && held)
		}
		r.Produced = append(r.Produced, &pb.ProducedPartitionReport{
			ResultId: pd.GetResultId(), PartitionIndex: pd.GetPartitionIndex(), Consumable: consumable,
		})
	}
	r.Consumed = dataplane.Consumed(r.Consumed, t.gates)
	return r
}

// ChunkReport splits executions into chunks of at most maxExecs executions and at most
// maxBytes encoded bytes each (the whole TaskManagerReport message, exactly as proto sizes it).
// Each chunk is a copy of base with its chunk_index; the last is flagged, and there is always
// at least one chunk. An execution too large for maxBytes on its own travels alone in its
// chunk: its report is smaller than the deployment descriptor that reached this TM under the
// same message limit (one consumed entry per input channel, each smaller than the channel's
// descriptor), so it still fits the limit when the budget leaves the usual margin. Exported
// so that simulated TaskManagers in tests chunk exactly as a TM does.
func ChunkReport(base *pb.TaskManagerReport, execs []*pb.ExecutionReport, maxExecs, maxBytes int) []*pb.TaskManagerReport {
	if maxExecs <= 0 {
		maxExecs = DefaultConfig().ReportChunkSize
	}
	if maxBytes <= 0 {
		maxBytes = transport.ChunkBudget(0)
	}
	// Every chunk carries base's fields, a chunk_index (at most a 5-byte varint and its tag)
	// and the last flag (2 bytes).
	overhead := proto.Size(base) + 1 + protowire.SizeVarint(math.MaxUint32) + 2
	var out []*pb.TaskManagerReport
	emit := func(part []*pb.ExecutionReport) {
		c := proto.CloneOf(base)
		c.Executions = part
		c.ChunkIndex = int32(len(out))
		out = append(out, c)
	}
	start, size := 0, overhead
	for i, e := range execs {
		n := executionFieldSize(e)
		if i > start && (i-start >= maxExecs || size+n > maxBytes) {
			emit(execs[start:i])
			start, size = i, overhead
		}
		size += n
	}
	if start < len(execs) || len(out) == 0 {
		emit(execs[start:])
	}
	out[len(out)-1].Last = true
	return out
}

// executionFieldSize is the encoded size of one element of TaskManagerReport.executions: its
// tag, its length and the message.
func executionFieldSize(e *pb.ExecutionReport) int {
	n := proto.Size(e)
	return protowire.SizeTag(5) + protowire.SizeBytes(n)
}

// reportChunkBytes is the byte bound of one report chunk: the TM's ReportChunkBytes, or what
// the leader asked for when that is smaller.
func reportChunkBytes(cfg Config, asked int64) int {
	if asked > 0 && asked < int64(cfg.ReportChunkBytes) {
		return int(asked)
	}
	return cfg.ReportChunkBytes
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
		var expired []dataplane.PartitionKey
		tm.mu.Lock()
		for id, task := range tm.table.tasks {
			if isTerminal(task.state) && now.Sub(task.endedAt) > tm.cfg.RetainTerminal {
				tm.table.dropLocked(id)
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
			tm.dp.Release(k)
		}
	}
}

// AnswerReport is the report a TM sends for req: one chunk saying as_expected and listing
// nothing when its executions give exactly the digest the leader expects (req.expect,
// transport.ReportDigest), else every execution, chunked (ChunkReport). Exported so that
// simulated TaskManagers in tests answer exactly as a TM does.
func AnswerReport(base *pb.TaskManagerReport, execs []*pb.ExecutionReport, req *pb.RequestReportRequest, maxExecs, maxBytes int) []*pb.TaskManagerReport {
	if e := req.GetExpect(); e != nil && uint64(len(execs)) == e.GetCount() {
		var d transport.ReportDigest
		for _, r := range execs {
			d.AddReport(r)
		}
		if d.Matches(e) {
			c := proto.CloneOf(base)
			c.Last, c.AsExpected = true, true
			return []*pb.TaskManagerReport{c}
		}
	}
	return ChunkReport(base, execs, maxExecs, maxBytes)
}
