package fsm

import (
	"fmt"
	"runtime"
	"testing"
	"unsafe"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// sharing walks a job's live record and reports every value held alike in two copies: a slot,
// an address or a TaskManager id, a (state, time) pair, a partition's producer attempt or
// address that is not its producer's, and a list of state changes with room to spare.
func sharing(f *FSM, id string) (problems []string) {
	f.WithJob(id, func(rec *pb.JobRecord) {
		slots := map[slotKey]*pb.SlotID{}
		strs := map[string]*byte{}
		stamps := map[stampKey]*pb.StateTimestamp{}
		str := func(what, s string) {
			if s == "" {
				return
			}
			if p, ok := strs[s]; ok && p != unsafe.StringData(s) {
				problems = append(problems, fmt.Sprintf("%s %q: two copies", what, s))
			}
			strs[s] = unsafe.StringData(s)
		}
		execution := func(where string, ex *pb.Execution) {
			str(where+" grpc address", ex.TmGrpcAddress)
			str(where+" data address", ex.TmDataAddress)
			if sl := ex.Slot; sl != nil {
				k := slotKey{sl.TmId, sl.Index}
				if kept, ok := slots[k]; ok && kept != sl {
					problems = append(problems, fmt.Sprintf("%s slot %v: two copies", where, k))
				}
				slots[k] = sl
				str(where+" tm id", sl.TmId)
			}
			if len(ex.StateTimestamps) != cap(ex.StateTimestamps) {
				problems = append(problems, fmt.Sprintf("%s: %d state changes, room for %d", where, len(ex.StateTimestamps), cap(ex.StateTimestamps)))
			}
			for _, st := range ex.StateTimestamps {
				k := stampKey{st.State, st.Timestamp}
				if kept, ok := stamps[k]; ok && kept != st {
					problems = append(problems, fmt.Sprintf("%s state change %v: two copies", where, k))
				}
				stamps[k] = st
			}
		}
		for _, ejv := range rec.ExecutionGraph.Vertices {
			for _, ev := range ejv.Subtasks {
				where := fmt.Sprintf("%s[%d]", ev.VertexId, ev.SubtaskIndex)
				if unsafe.StringData(ev.VertexId) != unsafe.StringData(ejv.VertexId) {
					problems = append(problems, where+": vertex id not its job vertex's")
				}
				if ev.Current != nil {
					execution(where, ev.Current)
				}
				for i, h := range ev.History {
					execution(fmt.Sprintf("%s history %d", where, i), h)
				}
			}
		}
		for _, r := range rec.ExecutionGraph.Results {
			producers := graph.FindJobVertex(rec.ExecutionGraph, r.ProducerVertexId).Subtasks
			for _, p := range r.Partitions {
				cur := producers[p.PartitionIndex].Current
				if cur != nil && (unsafe.StringData(p.ProducerAttemptId) != unsafe.StringData(cur.AttemptId) ||
					unsafe.StringData(p.DataAddress) != unsafe.StringData(cur.TmDataAddress)) {
					problems = append(problems, fmt.Sprintf("%s partition %d: a copy of its producer's attempt or address", r.ResultId, p.PartitionIndex))
				}
			}
		}
	})
	return problems
}

// TestExecutionsShareWhatTheyHoldAlike: after attempts, state changes, a failure, a new
// attempt and a reconciliation, and again after a restore, the record holds one copy of each
// slot, address, TaskManager id and (state, time) pair, and every list of state changes is of
// its exact length. Changing one execution changes no other: every other one is as it was.
func TestExecutionsShareWhatTheyHoldAlike(t *testing.T) {
	h := newHarness(t)
	id := jobIDN(0)
	h.submit(forwardJob(id, 4, 30))
	h.setStatus(id, pb.JobStatus_JOB_STATUS_RUNNING)
	h.attemptAll(id, 0)
	h.moveAll(id, pb.ExecutionState_EXECUTION_STATE_DEPLOYING)
	h.moveAll(id, pb.ExecutionState_EXECUTION_STATE_RUNNING)
	if p := sharing(h.f, id); len(p) != 0 {
		t.Fatalf("after the job runs: %d problems, the first %s", len(p), p[0])
	}

	before := h.job(id)
	failed := attemptID(id, "v1", 4, 0)
	h.ok(updateT, &pb.UpdateExecutionStatesCommand{Updates: []*pb.ExecutionStateUpdate{
		{JobId: id, AttemptId: failed, State: pb.ExecutionState_EXECUTION_STATE_FAILED, Timestamp: 1300, FailureCause: "boom"}}})
	h.ok(createT, &pb.CreateAttemptsCommand{JobId: id, Timestamp: 1400, Attempts: []*pb.AttemptSpec{spec(id, "v1", 4, 1)}})
	establish(h, 1)
	h.ok(beginT, &pb.BeginReconciliationCommand{Epoch: 1, Timestamp: 11000})
	keep := proto.Clone(graph.FindVertex(h.job(id).ExecutionGraph, "v2", 7).Current).(*pb.Execution)
	keep.State = pb.ExecutionState_EXECUTION_STATE_RUNNING
	keep.StateTimestamps = append(keep.StateTimestamps, &pb.StateTimestamp{State: keep.State, Timestamp: 12000})
	h.ok(reconT, &pb.ReconcileJobCommand{Epoch: 1, JobId: id, Timestamp: 12000,
		Executions: []*pb.ReconciledExecution{{VertexId: "v2", SubtaskIndex: 7, Execution: keep}}})
	if p := sharing(h.f, id); len(p) != 0 {
		t.Fatalf("after a failure, a new attempt and a reconciliation: %d problems, the first %s", len(p), p[0])
	}
	after := h.job(id)
	for i, ejv := range after.ExecutionGraph.Vertices {
		for j, ev := range ejv.Subtasks {
			was := before.ExecutionGraph.Vertices[i].Subtasks[j]
			if (ev.VertexId == "v1" && ev.SubtaskIndex == 4) || (ev.VertexId == "v2" && ev.SubtaskIndex == 7) {
				continue
			}
			// Every other execution moved to RECONCILING at 11000, and only that.
			want := proto.Clone(was.Current).(*pb.Execution)
			want.State = pb.ExecutionState_EXECUTION_STATE_RECONCILING
			want.StateTimestamps = append(want.StateTimestamps, &pb.StateTimestamp{State: want.State, Timestamp: 11000})
			if !proto.Equal(ev.Current, want) || len(ev.History) != 0 {
				t.Fatalf("%s[%d] = %v, want %v", ev.VertexId, ev.SubtaskIndex, ev.Current, want)
			}
		}
	}

	data := persist(t, h.f)
	g := New(testLogger(t))
	if err := restore(g, data); err != nil {
		t.Fatal(err)
	}
	if g.Hash() != h.f.Hash() {
		t.Fatal("the restored state's hash differs")
	}
	if p := sharing(g, id); len(p) != 0 {
		t.Fatalf("after a restore: %d problems, the first %s", len(p), p[0])
	}
}

// TestSlotsWithUnknownFieldsAreNotShared: a slot that carries a field this build does not know
// (a newer release's) keeps it, and neither gives it to nor takes it from an equal-looking slot
// of another execution; the snapshot keeps it.
func TestSlotsWithUnknownFieldsAreNotShared(t *testing.T) {
	h := newHarness(t)
	id := jobIDN(0)
	h.submit(forwardJob(id, 2, 1))
	h.setStatus(id, pb.JobStatus_JOB_STATUS_RUNNING)
	newer := protowire.AppendVarint(protowire.AppendTag(nil, 15, protowire.VarintType), 7)
	plain, odd := spec(id, "v0", 0, 0), spec(id, "v1", 0, 0)
	odd.Slot.ProtoReflect().SetUnknown(newer)
	h.ok(createT, &pb.CreateAttemptsCommand{JobId: id, Timestamp: 1200, Attempts: []*pb.AttemptSpec{plain, odd}})
	check := func(f *FSM, when string) {
		rec, _ := f.Job(id)
		p := graph.FindVertex(rec.ExecutionGraph, "v0", 0).Current.Slot
		o := graph.FindVertex(rec.ExecutionGraph, "v1", 0).Current.Slot
		if len(p.ProtoReflect().GetUnknown()) != 0 || string(o.ProtoReflect().GetUnknown()) != string(newer) ||
			p.TmId != o.TmId || p.Index != o.Index {
			t.Fatalf("%s: slots %v (unknown %x) and %v (unknown %x)", when, p, p.ProtoReflect().GetUnknown(), o, o.ProtoReflect().GetUnknown())
		}
	}
	check(h.f, "applied")
	g := New(testLogger(t))
	if err := restore(g, persist(t, h.f)); err != nil {
		t.Fatal(err)
	}
	check(g, "restored")
	if g.Hash() != h.f.Hash() {
		t.Fatal("the restored state's hash differs")
	}
}

// TestStateHeapPerExecution: the heap one replica keeps for a running job of 10,000
// executions on ten TaskManagers (every execution CREATED, SCHEDULED, DEPLOYING, INITIALIZING,
// RUNNING; ids of 32 hex characters; eight updates a millisecond as the leader stamps them),
// measured as the live heap after a collection, against a bound in bytes per execution: 1,083 B
// before the record's shared values (canon.go) and exact lists, 669 B after. The goal
// leader-heap-per-execution-100k (docs/benchmarks.md) needs the whole leader under 1,024 B.
func TestStateHeapPerExecution(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes what allocations cost")
	}
	const vertices, p, tms, bound = 10, 1000, 10, 750
	id := fmt.Sprintf("%032x", 77)
	attempt := func(v, s int) string { return fmt.Sprintf("%016x%016x", v+1, s+1) }
	f := New(nil)
	index := uint64(0)
	apply := func(typ pb.CommandType, m proto.Message) {
		data, err := Encode(typ, m)
		if err != nil {
			t.Fatal(err)
		}
		index++
		if res := f.Apply(&raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: data}).(*Result); res.Err != nil {
			t.Fatalf("apply %s: %v", typ, res.Err)
		}
	}
	heap := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	start := heap()
	apply(submitT, &pb.SubmitJobCommand{JobGraph: forwardJob(id, vertices, p), Timestamp: 1000})
	apply(statusT, &pb.SetJobStatusCommand{JobId: id, Status: pb.JobStatus_JOB_STATUS_RUNNING, Timestamp: 1100})
	for v := range vertices {
		c := &pb.CreateAttemptsCommand{JobId: id, Timestamp: int64(1200 + v)}
		for s := range p {
			tm := s % tms
			c.Attempts = append(c.Attempts, &pb.AttemptSpec{VertexId: fmt.Sprintf("v%d", v), SubtaskIndex: int32(s),
				AttemptId: attempt(v, s), Slot: &pb.SlotID{TmId: fmt.Sprintf("tm-%02d-%s", tm, id[:8]), Index: int32(s / tms)},
				TmGrpcAddress: fmt.Sprintf("10.0.0.%d:6123", tm), TmDataAddress: fmt.Sprintf("10.0.0.%d:6124", tm)})
		}
		apply(createT, c)
	}
	ts := int64(2000)
	for _, st := range []pb.ExecutionState{pb.ExecutionState_EXECUTION_STATE_DEPLOYING, pb.ExecutionState_EXECUTION_STATE_INITIALIZING, pb.ExecutionState_EXECUTION_STATE_RUNNING} {
		n := 0
		for v := range vertices {
			c := &pb.UpdateExecutionStatesCommand{}
			for s := range p {
				c.Updates = append(c.Updates, &pb.ExecutionStateUpdate{JobId: id, AttemptId: attempt(v, s), State: st, Timestamp: ts + int64(n/8)})
				n++
			}
			apply(updateT, c)
		}
		ts += int64(n/8) + 1
	}
	perExecution := float64(heap()-start) / (vertices * p)
	runtime.KeepAlive(f)
	t.Logf("%.0f B per execution (bound %d B)", perExecution, bound)
	if perExecution > bound {
		t.Errorf("the state holds %.0f B per execution, over %d B", perExecution, bound)
	}
}
