package fsm

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// The checkpoint record across a failover, in snapshots and under the job's budget.

// TestPendingCheckpointThroughAFailover: a checkpoint triggered by one leader and acknowledged
// by every task is completed by the next one while the job reconciles (the missing acks taken
// from the reports), and keeps the epoch that triggered it; no new trigger while reconciling.
func TestPendingCheckpointThroughAFailover(t *testing.T) {
	h := newHarness(t)
	job := jobIDN(1)
	runningCheckpointedJob(h, job, 1, 1)
	establish(h, 1)
	id := h.trigger(job, 1, 10).CheckpointId
	acks := acksOf(h, job, id)
	h.ok(ackT, &pb.AckCheckpointCommand{JobId: job, CheckpointId: id, Acks: acks[:4]})
	establish(h, 2)
	h.ok(beginT, &pb.BeginReconciliationCommand{Epoch: 2, Timestamp: 100})
	if st := h.job(job).Status; st != pb.JobStatus_JOB_STATUS_RECONCILING {
		t.Fatalf("job is %s", statusName(st))
	}
	h.fails(triggerT, &pb.TriggerCheckpointCommand{JobId: job, Epoch: 2}, ErrJobNotRunning)
	pending := h.f.PendingCheckpoints(job)
	if len(pending) != 1 || pending[0].Epoch != 1 {
		t.Fatalf("pending %v", pending)
	}
	h.ok(ackT, &pb.AckCheckpointCommand{JobId: job, CheckpointId: id, Acks: acks}) // the FSM's four again, and the reports' two
	h.ok(completeT, &pb.CompleteCheckpointCommand{JobId: job, CheckpointId: id, Timestamp: 110})
	if next, _ := h.f.NextCheckpointID(job); next != 2 {
		t.Fatalf("the new leader resumes with %d, want 2", next)
	}
}

// TestCheckpointLogIsDeterministic: the same log applied to two FSMs gives byte-identical
// snapshots, and a restored snapshot the same hash.
func TestCheckpointLogIsDeterministic(t *testing.T) {
	run := func(h *harness) {
		a, b := jobIDN(1), jobIDN(2)
		runningCheckpointedJob(h, a, 3, 2)
		runningCheckpointedJob(h, b, 1, 1)
		establish(h, 1)
		for i := 0; i < 4; i++ {
			h.checkpoint(a, int64(100*i))
			id := h.trigger(b, 0, int64(100*i+1)).CheckpointId
			h.ok(ackT, &pb.AckCheckpointCommand{JobId: b, CheckpointId: id, Acks: acksOf(h, b, id)[i:]})
			h.ok(abortT, &pb.AbortCheckpointCommand{JobId: b, CheckpointId: id, Timestamp: int64(100*i + 50), Reason: "timeout"})
		}
		h.trigger(a, 0, 900)
		h.trigger(a, 0, 901)
		// Acks in an order unlike the record's.
		acks := acksOf(h, a, 6)
		slices.Reverse(acks)
		h.ok(ackT, &pb.AckCheckpointCommand{JobId: a, CheckpointId: 6, Acks: acks[:3]})
		h.ok(ackT, &pb.AckCheckpointCommand{JobId: a, CheckpointId: 6, Acks: acks[3:]})
		h.ok(completeT, &pb.CompleteCheckpointCommand{JobId: a, CheckpointId: 6, Timestamp: 950}) // subsumes 5
	}
	h1, h2 := newHarness(t), newHarness(t)
	run(h1)
	run(h2)
	s1, s2 := persist(t, h1.f), persist(t, h2.f)
	if !bytes.Equal(s1, s2) {
		t.Fatal("two FSMs applying the same checkpoint log persist different snapshots")
	}
	r := New(testLogger(t))
	if err := restore(r, s1); err != nil {
		t.Fatal(err)
	}
	assertSameState(t, h1.f, r)
	if !bytes.Equal(persist(t, r), s1) {
		t.Fatal("a restored snapshot persists differently")
	}
}

// TestJobWithoutCheckpointsEncodesAsBefore: a job that never checkpointed has no checkpoint
// record, refused triggers included, so its snapshot record is the one of a release before
// checkpoints (TestUpgradeFixtureReplays checks the recorded bytes).
func TestJobWithoutCheckpointsEncodesAsBefore(t *testing.T) {
	h := newHarness(t)
	job := jobIDN(1)
	h.submit(streamingJob(job, 2, 2))
	h.setStatus(job, pb.JobStatus_JOB_STATUS_RUNNING)
	h.apply(triggerT, &pb.TriggerCheckpointCommand{JobId: job})
	rec := h.job(job)
	if rec.Checkpoints != nil || rec.ProtoReflect().Has(rec.ProtoReflect().Descriptor().Fields().ByName("checkpoints")) {
		t.Fatalf("a job without checkpoints has a checkpoint record %v", rec.Checkpoints)
	}
}

// TestRestoreRefusesInconsistentCheckpoints: a snapshot whose checkpoint record contradicts
// itself is refused as corrupt.
func TestRestoreRefusesInconsistentCheckpoints(t *testing.T) {
	h := newHarness(t)
	job := jobIDN(1)
	runningCheckpointedJob(h, job, 2, 1)
	h.checkpoint(job, 10)
	h.trigger(job, 2, 20)
	good := h.job(job)
	for name, mod := range map[string]func(cp *pb.JobCheckpoints){
		"pending id not below the next": func(cp *pb.JobCheckpoints) { cp.Pending[0].Id = 3 },
		"next id zero":                  func(cp *pb.JobCheckpoints) { cp.NextCheckpointId = 0 },
		"completed listed as pending":   func(cp *pb.JobCheckpoints) { cp.Pending[0].Id = 1 },
		"pending with another status":   func(cp *pb.JobCheckpoints) { cp.Pending[0].Status = pb.CheckpointStatus_CHECKPOINT_STATUS_ABORTED },
		"acks out of order":             func(cp *pb.JobCheckpoints) { slices.Reverse(cp.Completed[0].Acks) },
	} {
		rec := proto.CloneOf(good)
		mod(rec.Checkpoints)
		var buf bytes.Buffer
		for _, r := range []*pb.SnapshotRecord{
			{Record: &pb.SnapshotRecord_Header{Header: &pb.SnapshotHeader{Version: SnapshotVersion, Jobs: 1}}},
			{Record: &pb.SnapshotRecord_Job{Job: rec}},
			{Record: &pb.SnapshotRecord_Epoch{Epoch: &pb.LeaderEpoch{}}},
		} {
			if _, err := marshalDelim.MarshalTo(&buf, r); err != nil {
				t.Fatal(err)
			}
		}
		if err := restore(New(nil), buf.Bytes()); !errors.Is(err, ErrSnapshotCorrupt) {
			t.Errorf("%s: restore %v, want ErrSnapshotCorrupt", name, err)
		}
	}
}

// TestCheckpointBudgetShrinksWithTheJob: a job holds at most maxJobCheckpointAcks
// acknowledgements in its pending and completed checkpoints: a large job keeps fewer than it
// asks for, at least one of each.
func TestCheckpointBudgetShrinksWithTheJob(t *testing.T) {
	ask := graph.CheckpointSettings{MaxConcurrent: graph.MaxConcurrentCheckpoints, Retained: graph.MaxRetainedCheckpoints}
	for _, c := range []struct{ n, mc, retained int }{
		{6, 16, 100}, {1000, 16, 100}, {2000, 16, 49}, {10_000, 6, 7}, {100_000, 1, 1}, {131_072, 1, 1},
	} {
		mc, retained := checkpointBudget(ask, c.n)
		if mc != c.mc || retained != c.retained {
			t.Errorf("%d executions: %d pending and %d retained, want %d and %d", c.n, mc, retained, c.mc, c.retained)
		}
		if c.n*(mc+retained) > max(maxJobCheckpointAcks, 2*c.n) {
			t.Errorf("%d executions hold %d acknowledgements, over %d", c.n, c.n*(mc+retained), maxJobCheckpointAcks)
		}
	}
	if mc, retained := checkpointBudget(graph.CheckpointSettings{MaxConcurrent: 1, Retained: 1}, 6); mc != 1 || retained != 1 {
		t.Errorf("the defaults are cut to %d and %d", mc, retained)
	}
}

// TestCommandLevelsGateTheirAppliers: a build knows a command exactly when its CommandLevel is
// at the command's level; the jmprev build (level 0: go test -tags jmprev -run
// TestCommandLevelsGateTheirAppliers ./fsm/) has neither RECONCILE_KEPT nor the checkpoint
// commands, and an entry of one stops it, as it would stop that release.
func TestCommandLevelsGateTheirAppliers(t *testing.T) {
	levels := map[pb.CommandType]int{
		pb.CommandType_COMMAND_TYPE_RECONCILE_KEPT: LevelReconcileKept,
		triggerT: LevelCheckpoints, ackT: LevelCheckpoints, completeT: LevelCheckpoints, abortT: LevelCheckpoints,
		artBeginT: LevelArtifacts, artChunkT: LevelArtifacts, artCommitT: LevelArtifacts, artAbortT: LevelArtifacts, artRemoveT: LevelArtifacts,
	}
	if LevelCheckpoints != 2 || LevelReconcileKept != 1 || LevelArtifacts != 3 {
		t.Fatalf("levels renumbered: %d %d", LevelReconcileKept, LevelCheckpoints)
	}
	for typ, level := range levels {
		_, known := appliers[typ]
		if want := CommandLevel >= level; known != want {
			t.Errorf("level %d build: %s known %v, want %v", CommandLevel, typ, known, want)
		}
		data, err := Encode(typ, payloadMessage(typ))
		if err != nil {
			t.Fatal(err)
		}
		f := New(testLogger(t))
		_, panicked := applyEntry(f, 1, data)
		if (panicked != nil) != (CommandLevel < level) {
			t.Errorf("level %d build: %s panicked %v", CommandLevel, typ, panicked)
		}
	}
	t.Logf("CommandLevel %d", CommandLevel)
}
