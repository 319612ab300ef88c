package fsm

import (
	"sync"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/transport/pb"
)

func TestNoopAndIgnorable(t *testing.T) {
	h := newHarness(t)
	before := h.f.Hash()
	res := h.ok(noopT, &pb.Command{})
	if res.Value != nil || h.f.Hash() != before || h.f.AppliedIndex() != 1 {
		t.Errorf("noop: %v applied %d", res, h.f.AppliedIndex())
	}
	data, _ := proto.Marshal(&pb.Command{Version: 1, Type: pb.CommandType(999), Ignorable: true, Payload: []byte("future")})
	r, _ := h.f.Apply(&raft.Log{Index: 2, Type: raft.LogCommand, Data: data}).(*Result)
	if r == nil || r.Err != nil || r.Index != 2 || h.f.AppliedIndex() != 2 || h.f.Hash() != before {
		t.Errorf("ignorable: %v applied %d", r, h.f.AppliedIndex())
	}
	// Non-command entries are not for the FSM.
	if got := h.f.Apply(&raft.Log{Index: 3, Type: raft.LogConfiguration}); got != nil || h.f.AppliedIndex() != 2 {
		t.Errorf("configuration entry: %v", got)
	}
}

func mustPanic(t *testing.T, name string, fn func()) {
	t.Helper()
	defer func() {
		if r := recover(); r == nil {
			t.Errorf("%s: no panic", name)
		} else {
			t.Logf("%s: panic %v", name, r)
		}
	}()
	fn()
}

func TestApplyPanicsOnGarbage(t *testing.T) {
	f := New(testLogger(t))
	before := f.Hash()
	envelope := func(c *pb.Command) []byte {
		b, err := proto.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cases := map[string][]byte{
		"garbage":             []byte{0xff, 0xff, 0xff, 0xff},
		"empty envelope":      nil,
		"future version":      envelope(&pb.Command{Version: 2, Type: noopT}),
		"unknown type":        envelope(&pb.Command{Version: 1, Type: pb.CommandType(999)}),
		"unspecified type":    envelope(&pb.Command{Version: 1}),
		"undecodable payload": envelope(&pb.Command{Version: 1, Type: submitT, Payload: []byte{0x0a, 0x05, 0x01}}),
		"undecodable updates": envelope(&pb.Command{Version: 1, Type: updateT, Payload: []byte{0xff}}),
	}
	for name, data := range cases {
		mustPanic(t, name, func() { f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: data}) })
	}
	if f.Hash() != before || f.AppliedIndex() != 0 {
		t.Errorf("a panicking entry changed the state")
	}
	// The lock is released after a panic: the FSM keeps working.
	h := &harness{t: t, f: f}
	h.ok(noopT, &pb.Command{})
}

func TestRegisterTwicePanics(t *testing.T) {
	n := len(appliers)
	mustPanic(t, "duplicate register", func() { register(noopT, nil) })
	if len(appliers) != n || appliers[noopT] == nil {
		t.Errorf("the table changed")
	}
	for v := range pb.CommandType_name {
		if v != 0 && appliers[pb.CommandType(v)] == nil {
			t.Errorf("no applier for %s", pb.CommandType(v))
		}
	}
}

// script applies a fixed sequence touching every command type.
func script(h *harness) {
	a, b := jobIDN(10), jobIDN(11)
	h.submit(checkpointed(streamingJob(a, 3, 2), 1, 1))
	h.submit(forwardJob(b, 3, 4))
	h.setStatus(a, pb.JobStatus_JOB_STATUS_RUNNING)
	h.attemptAll(a, 0)
	h.attemptAll(b, 0)
	h.moveAll(a, pb.ExecutionState_EXECUTION_STATE_DEPLOYING)
	h.moveAll(a, pb.ExecutionState_EXECUTION_STATE_RUNNING)
	h.apply(updateT, &pb.UpdateExecutionStatesCommand{Updates: []*pb.ExecutionStateUpdate{
		{JobId: a, AttemptId: attemptID(a, "map", 2, 0), State: pb.ExecutionState_EXECUTION_STATE_FAILED, FailureCause: "x"},
		{JobId: a, AttemptId: "bogus", State: pb.ExecutionState_EXECUTION_STATE_FAILED},
	}})
	h.ok(createT, &pb.CreateAttemptsCommand{JobId: a, Attempts: []*pb.AttemptSpec{spec(a, "map", 2, 1)}, Timestamp: 50})
	h.ok(statusT, &pb.SetJobStatusCommand{JobId: a, Status: pb.JobStatus_JOB_STATUS_RUNNING, AddRestarts: 1})
	establish(h, 1)
	// Checkpoints of a: 1 completed, 2 aborted, 3 pending with one acknowledgement (through
	// the reconciliation below).
	h.ok(triggerT, &pb.TriggerCheckpointCommand{JobId: a, CheckpointId: 1, Epoch: 1, Timestamp: 55})
	h.ok(ackT, &pb.AckCheckpointCommand{JobId: a, CheckpointId: 1, Acks: acksOf(h, a, 1)})
	h.ok(completeT, &pb.CompleteCheckpointCommand{JobId: a, CheckpointId: 1, Timestamp: 56})
	h.ok(triggerT, &pb.TriggerCheckpointCommand{JobId: a, CheckpointId: 2, Epoch: 1, Timestamp: 57})
	h.ok(ackT, &pb.AckCheckpointCommand{JobId: a, CheckpointId: 2, Acks: acksOf(h, a, 2)[:2]})
	h.ok(abortT, &pb.AbortCheckpointCommand{JobId: a, CheckpointId: 2, Timestamp: 58, Reason: "timeout"})
	h.ok(triggerT, &pb.TriggerCheckpointCommand{JobId: a, CheckpointId: 3, Epoch: 1, Timestamp: 59})
	h.ok(ackT, &pb.AckCheckpointCommand{JobId: a, CheckpointId: 3, Acks: acksOf(h, a, 3)[:1]})
	h.ok(beginT, &pb.BeginReconciliationCommand{Epoch: 1, Timestamp: 60})
	h.ok(pb.CommandType_COMMAND_TYPE_RECONCILE_KEPT, &pb.ReconcileKeptCommand{Epoch: 1, JobId: a, Timestamp: 65, Ranges: []*pb.KeptRange{
		{VertexId: "src", FirstSubtask: 0, Count: 3, State: pb.ExecutionState_EXECUTION_STATE_RUNNING},
		{VertexId: "sink", FirstSubtask: 1, Count: 1, State: pb.ExecutionState_EXECUTION_STATE_FINISHED},
	}})
	h.ok(reconT, &pb.ReconcileJobCommand{Epoch: 1, JobId: b, LastChunk: true, Status: pb.JobStatus_JOB_STATUS_FAILING, Cause: "lost"})
	h.ok(endT, &pb.EndReconciliationCommand{Epoch: 1, Timestamp: 70, Counts: &pb.ReconciliationCounts{Missing: 12},
		CollectedAt: 66, MergedAt: 67, JobsCommittedAt: 69,
		Reports: []*pb.ReconciliationReport{{TmId: "tm1", Outcome: "reported", At: 64, Executions: 3}, {TmId: "tm2", Outcome: "missing", At: 66}}})
	h.ok(cancelT, &pb.CancelJobCommand{JobId: b, Timestamp: 80})
	// A third job, cancelled before it ran (CANCELED at once), then removed by the retention.
	c := jobIDN(12)
	h.submit(forwardJob(c, 2, 2))
	h.ok(cancelT, &pb.CancelJobCommand{JobId: c, Timestamp: 85})
	h.ok(removeT, &pb.RemoveJobsCommand{JobIds: []string{c}, Timestamp: 88})
	// Artifacts: one stored (two chunks), one removed, one upload left in progress, one
	// aborted, and refusals.
	artifactScript(h)
	h.ok(noopT, &pb.Command{})
}

func TestDeterministicHash(t *testing.T) {
	h1, h2 := newHarness(t), newHarness(t)
	empty := h1.f.Hash()
	script(h1)
	script(h2)
	if h1.f.Hash() != h2.f.Hash() {
		t.Fatalf("two FSMs applying the same entries differ")
	}
	if h1.f.Hash() == empty || len(h1.f.Hash()) != 64 {
		t.Fatalf("hash %q", h1.f.Hash())
	}
	for i := 0; i < 3; i++ {
		if h1.f.Hash() != h2.f.Hash() {
			t.Fatalf("hash is not stable")
		}
	}
	h2.ok(noopT, &pb.Command{})
	if h1.f.Hash() != h2.f.Hash() {
		t.Errorf("a NOOP changed the hash")
	}
	h2.ok(statusT, &pb.SetJobStatusCommand{JobId: jobIDN(10), Status: pb.JobStatus_JOB_STATUS_RUNNING, AddRestarts: 1})
	if h1.f.Hash() == h2.f.Hash() {
		t.Errorf("a state change did not change the hash")
	}
}

func TestChangedAndClones(t *testing.T) {
	h := newHarness(t)
	ch := h.f.Changed()
	select {
	case <-ch:
		t.Fatal("closed before any apply")
	default:
	}
	id := jobIDN(0)
	h.submit(streamingJob(id, 1, 1))
	select {
	case <-ch:
	default:
		t.Fatal("not closed after an apply")
	}
	if h.f.Changed() == ch {
		t.Fatal("channel not replaced")
	}

	rec := h.job(id)
	rec.Status = pb.JobStatus_JOB_STATUS_FAILED
	rec.ExecutionGraph.Vertices[0].Subtasks[0].Current = &pb.Execution{AttemptId: "evil"}
	if h.job(id).Status != pb.JobStatus_JOB_STATUS_CREATED || graph.FindAttempt(h.job(id).ExecutionGraph, "evil") != nil {
		t.Errorf("Job() returned the live record")
	}
	h.f.Jobs()[0].Status = pb.JobStatus_JOB_STATUS_FAILED
	h.f.Epoch().Epoch = 7
	if h.job(id).Status != pb.JobStatus_JOB_STATUS_CREATED || h.f.LeaderEpoch() != 0 {
		t.Errorf("Jobs()/Epoch() returned live records")
	}
	var seen string
	if !h.f.WithJob(id, func(r *pb.JobRecord) { seen = r.JobGraph.Name }) || seen == "" {
		t.Errorf("WithJob did not run")
	}
	if h.f.WithJob("nope", func(*pb.JobRecord) { t.Error("ran for an unknown job") }) {
		t.Errorf("WithJob found an unknown job")
	}
	if _, ok := h.f.Job("nope"); ok {
		t.Errorf("unknown job found")
	}
}

func TestJobsOrderedByCreateIndex(t *testing.T) {
	h := newHarness(t)
	ids := []string{jobIDN(5), jobIDN(1), jobIDN(3)}
	for _, id := range ids {
		h.submit(streamingJob(id, 1, 1))
	}
	got := h.f.JobIDs()
	for i, j := range h.f.Jobs() {
		if got[i] != ids[i] || j.JobGraph.JobId != ids[i] {
			t.Errorf("order %d: %s / %s, want %s", i, got[i], j.JobGraph.JobId, ids[i])
		}
	}
}

func TestConcurrentReadsDuringApply(t *testing.T) {
	h := newHarness(t)
	id := jobIDN(0)
	h.submit(forwardJob(id, 2, 8))
	h.attemptAll(id, 0)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				h.f.Job(id)
				h.f.Hash()
				h.f.LocateAttempt(attemptID(id, "v0", 0, 0))
				h.f.WithJob(id, func(r *pb.JobRecord) { _ = len(r.History) })
				if s, err := h.f.Snapshot(); err == nil {
					_ = s.Persist(&memSink{})
				}
			}
		}()
	}
	for i := 0; i < 50; i++ {
		st := pb.ExecutionState_EXECUTION_STATE_RECONCILING
		if i == 0 {
			st = pb.ExecutionState_EXECUTION_STATE_DEPLOYING
		} else if i%2 == 0 {
			st = pb.ExecutionState_EXECUTION_STATE_RUNNING
		}
		h.moveAll(id, st)
	}
	close(stop)
	wg.Wait()
	if c := graph.CountByState(h.job(id).ExecutionGraph); c[pb.ExecutionState_EXECUTION_STATE_RECONCILING] != 16 {
		t.Errorf("final states: %v", c)
	}
}
