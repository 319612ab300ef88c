package fsm

import (
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/internal/failpoint"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestNondeterministicApplyStampsTheReplicasClock: with the failpoint nondeterministic-apply,
// Apply replaces a submitted job's proposer timestamp with this replica's wall clock, so two
// replicas of one log hold different states (what the fault suite's state-hash checker must
// catch); without it, the proposer's timestamp stays and the replicas agree.
func TestNondeterministicApplyStampsTheReplicasClock(t *testing.T) {
	id := jobIDN(0)
	a, b := newHarness(t), newHarness(t)
	a.submit(streamingJob(id, 1, 1))
	b.submit(streamingJob(id, 1, 1))
	if got := a.job(id).SubmittedAt; got != 1000 || a.f.Hash() != b.f.Hash() {
		t.Fatalf("intact build: submitted_at %d (want the proposer's 1000), hashes %s and %s", got, a.f.Hash(), b.f.Hash())
	}

	failpoint.Set(t, failpoint.NondeterministicApply.Name())
	before := time.Now().UnixNano()
	id2 := jobIDN(1)
	a.submit(streamingJob(id2, 1, 1))
	after := time.Now().UnixNano()
	if got := a.job(id2).SubmittedAt; got < before || got > after {
		t.Fatalf("submitted_at %d, want this replica's clock in [%d, %d] instead of the proposer's 1000", got, before, after)
	}
	// A rejected submission is not stamped: it changes nothing.
	a.fails(submitT, &pb.SubmitJobCommand{JobGraph: streamingJob(id2, 1, 1), Timestamp: 1000}, ErrJobExists)
}

// TestCompleteTwiceAppliesASecondCompletion: with the failpoint complete-twice, a second
// COMPLETE_CHECKPOINT of a completed checkpoint is applied: the record is listed completed
// twice and counted twice, so completed_count + aborted_count + pending no longer equals the
// triggered ids (what the fault suite's checkpoint-ids checker must catch); the intact build
// refuses it (TestCompleteTwiceIsRefused).
func TestCompleteTwiceAppliesASecondCompletion(t *testing.T) {
	h := newHarness(t)
	job := jobIDN(1)
	runningCheckpointedJob(h, job, 1, 3)
	h.checkpoint(job, 10)
	h.fails(completeT, &pb.CompleteCheckpointCommand{JobId: job, CheckpointId: 1, Timestamp: 16}, ErrCheckpointCompleted)

	failpoint.Set(t, failpoint.CompleteTwice.Name())
	h.ok(completeT, &pb.CompleteCheckpointCommand{JobId: job, CheckpointId: 1, Timestamp: 17})
	cp := h.job(job).Checkpoints
	if got := checkpointIDs(cp.Completed); len(got) != 2 || got[0] != 1 || got[1] != 1 || cp.CompletedCount != 2 || cp.NextCheckpointId != 2 {
		t.Fatalf("completed %v, completed_count %d, next id %d: want checkpoint 1 listed and counted twice", got, cp.CompletedCount, cp.NextCheckpointId)
	}
	// Still refused: a checkpoint never triggered, and one aborted.
	h.fails(completeT, &pb.CompleteCheckpointCommand{JobId: job, CheckpointId: 2}, ErrUnknownCheckpoint)
	id := h.trigger(job, 0, 30).CheckpointId
	h.ok(abortT, &pb.AbortCheckpointCommand{JobId: job, CheckpointId: id, Timestamp: 31, Reason: "timeout"})
	h.fails(completeT, &pb.CompleteCheckpointCommand{JobId: job, CheckpointId: id}, ErrCheckpointNotPending)
}
