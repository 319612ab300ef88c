package fsm

import (
	"testing"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestCheckpointCountsFollowEveryChange: the checkpoint counts the metrics read (pending,
// completed and aborted, and the newest completion with its duration and size) follow every
// trigger, completion, abort and subsumption, a restore, and the removal of the job that held
// the newest completion; each step is checked against a walk of the jobs (checkCounts).
func TestCheckpointCountsFollowEveryChange(t *testing.T) {
	h := newHarness(t)
	a, b := jobIDN(1), jobIDN(2)
	runningCheckpointedJob(h, a, 2, 1)
	runningCheckpointedJob(h, b, 2, 1)
	want := func(what string, pending, completed, aborted int64, newestJob string, newestID uint64) {
		t.Helper()
		checkCounts(t, h.f)
		c := h.f.CheckpointCounts()
		if c.Pending != pending || c.Completed != completed || c.Aborted != aborted {
			t.Fatalf("%s: %+v, want pending %d completed %d aborted %d", what, c, pending, completed, aborted)
		}
		switch {
		case newestJob == "" && c.Newest != nil:
			t.Fatalf("%s: newest %+v, want none", what, c.Newest)
		case newestJob != "" && (c.Newest == nil || c.Newest.JobID != newestJob || c.Newest.ID != newestID):
			t.Fatalf("%s: newest %+v, want %s/%d", what, c.Newest, newestJob, newestID)
		}
	}
	want("no checkpoint yet", 0, 0, 0, "", 0)
	h.trigger(a, 0, 1000)
	want("a trigger", 1, 0, 0, "", 0)
	h.checkpoint(b, 2000) // completes at 2005
	want("b completed 1", 1, 1, 0, b, 1)
	if n := h.f.CheckpointCounts().Newest; n.TriggerUnixMs != 2000 || n.CompleteUnixMs != 2005 || n.SizeBytes != 3*(100+101) {
		t.Fatalf("the newest completion %+v: want trigger 2000, complete 2005, %d bytes (every ack's size)", n, 3*(100+101))
	}
	h.trigger(a, 0, 3000) // a: 1 and 2 pending
	want("a second trigger", 2, 1, 0, b, 1)
	h.ok(ackT, &pb.AckCheckpointCommand{JobId: a, CheckpointId: 2, Acks: acksOf(h, a, 2)})
	h.ok(completeT, &pb.CompleteCheckpointCommand{JobId: a, CheckpointId: 2, Timestamp: 3010}) // subsumes 1
	want("a completed 2, subsuming 1", 0, 2, 1, a, 2)
	h.trigger(b, 0, 4000)
	h.ok(abortT, &pb.AbortCheckpointCommand{JobId: b, CheckpointId: 2, Timestamp: 4100, Reason: "timeout"})
	want("b aborted 2", 0, 2, 2, a, 2)
	h.fails(abortT, &pb.AbortCheckpointCommand{JobId: b, CheckpointId: 2, Reason: "again"}, ErrCheckpointNotPending)
	want("a refused abort", 0, 2, 2, a, 2)

	restored := New(testLogger(t))
	if err := restore(restored, persist(t, h.f)); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, restored)
	if got, kept := restored.CheckpointCounts(), h.f.CheckpointCounts(); got.Pending != kept.Pending || got.Completed != kept.Completed ||
		got.Aborted != kept.Aborted || *got.Newest != *kept.Newest {
		t.Fatalf("restored counts %+v (newest %+v), kept %+v (newest %+v)", got, got.Newest, kept, kept.Newest)
	}

	// The job holding the newest completion ends and is removed: b's is the newest left.
	h.trigger(a, 0, 5000)
	h.setStatus(a, pb.JobStatus_JOB_STATUS_FAILING)
	h.ok(abortT, &pb.AbortCheckpointCommand{JobId: a, CheckpointId: 3, Timestamp: 5100, Reason: "job is FAILING"})
	h.moveAll(a, pb.ExecutionState_EXECUTION_STATE_FAILED)
	h.setStatus(a, pb.JobStatus_JOB_STATUS_FAILED)
	want("a failed", 0, 2, 3, a, 2)
	h.ok(removeT, &pb.RemoveJobsCommand{JobIds: []string{a}, Timestamp: 6000})
	want("a removed", 0, 1, 1, b, 1)
}
