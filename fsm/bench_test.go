package fsm

import (
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// BenchmarkApplyUpdateExecutionStates applies batches of 100 state updates, alternating the
// executions between RECONCILING and RUNNING so that every update is a real transition.
func BenchmarkApplyUpdateExecutionStates(b *testing.B) {
	h := newHarness(b)
	id := jobIDN(0)
	h.submit(forwardJob(id, 4, 25))
	h.attemptAll(id, 0)
	h.moveAll(id, pb.ExecutionState_EXECUTION_STATE_DEPLOYING)
	h.moveAll(id, pb.ExecutionState_EXECUTION_STATE_RUNNING)
	var batches [2][]byte
	for i, st := range []pb.ExecutionState{pb.ExecutionState_EXECUTION_STATE_RECONCILING, pb.ExecutionState_EXECUTION_STATE_RUNNING} {
		cmd := &pb.UpdateExecutionStatesCommand{}
		for v := 0; v < 4; v++ {
			for s := int32(0); s < 25; s++ {
				cmd.Updates = append(cmd.Updates, &pb.ExecutionStateUpdate{
					JobId: id, AttemptId: attemptID(id, "v"+string(rune('0'+v)), s, 0), State: st, Timestamp: int64(i),
				})
			}
		}
		data, err := Encode(updateT, cmd)
		if err != nil {
			b.Fatal(err)
		}
		batches[i] = data
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		h.index++
		res := h.f.Apply(&raft.Log{Index: h.index, Type: raft.LogCommand, Data: batches[i%2]}).(*Result)
		if e := res.Value.(*pb.UpdateExecutionStatesResult).Errors; e[0] != "" || e[99] != "" {
			b.Fatalf("update failed: %q", e[0]+e[99])
		}
	}
}

// BenchmarkSnapshotPersist10k takes and persists a snapshot of 10,000 executions.
func BenchmarkSnapshotPersist10k(b *testing.B) {
	h := bigState(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		snap, err := h.f.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		sink := &memSink{}
		if err := snap.Persist(sink); err != nil {
			b.Fatal(err)
		}
		snap.Release()
		b.SetBytes(int64(sink.Len()))
	}
}

// BenchmarkMarshalJobs10k marshals the job records of the same 10,000-execution state: the
// baseline of BenchmarkSnapshotPersist10k (what persisting must at least do).
func BenchmarkMarshalJobs10k(b *testing.B) {
	h := bigState(b)
	jobs := h.f.Jobs()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		n := 0
		for _, j := range jobs {
			out, err := proto.Marshal(j)
			if err != nil {
				b.Fatal(err)
			}
			n += len(out)
		}
		b.SetBytes(int64(n))
	}
}

// BenchmarkFailoverApply100k applies what a failover that keeps every task commits for a chain
// of 100 x 1000 executions: ESTABLISH_LEADERSHIP, BEGIN_RECONCILIATION (every execution to
// RECONCILING), RECONCILE_KEPT (a range per vertex back to RUNNING) and the last RECONCILE_JOB chunk
// (the job RUNNING): each replica's apply work per failover.
func BenchmarkFailoverApply100k(b *testing.B) {
	h := newHarness(b)
	id := jobIDN(0)
	h.submit(forwardJob(id, 100, 1000))
	h.setStatus(id, pb.JobStatus_JOB_STATUS_RUNNING)
	h.attemptAll(id, 0)
	h.moveAll(id, pb.ExecutionState_EXECUTION_STATE_DEPLOYING)
	h.moveAll(id, pb.ExecutionState_EXECUTION_STATE_RUNNING)
	var ranges []*pb.KeptRange
	for v := 0; v < 100; v++ {
		ranges = append(ranges, &pb.KeptRange{VertexId: fmt.Sprintf("v%d", v), Count: 1000, State: pb.ExecutionState_EXECUTION_STATE_RUNNING})
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		e := uint64(i + 1)
		ts := int64(10000 * (i + 2))
		h.ok(leaderT, &pb.EstablishLeadershipCommand{Epoch: e, LeaderId: "jm1", LeaderGrpcAddress: "127.0.0.1:9000", Timestamp: ts})
		h.ok(beginT, &pb.BeginReconciliationCommand{Epoch: e, Timestamp: ts + 1})
		h.ok(pb.CommandType_COMMAND_TYPE_RECONCILE_KEPT, &pb.ReconcileKeptCommand{Epoch: e, JobId: id, Ranges: ranges, Timestamp: ts + 2})
		h.ok(reconT, &pb.ReconcileJobCommand{Epoch: e, JobId: id, LastChunk: true, Status: pb.JobStatus_JOB_STATUS_RUNNING, Timestamp: ts + 2})
	}
}
