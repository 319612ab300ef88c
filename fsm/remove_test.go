package fsm

import (
	"testing"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestRemoveJobs: REMOVE_JOBS takes terminal jobs out of the state (and their attempts out of
// the index) and counts them; it refuses an empty list, a repeated id, an unknown job and a job
// that is not terminal, each without a trace.
func TestRemoveJobs(t *testing.T) {
	h := newHarness(t)
	finished, canceled, running := jobIDN(1), jobIDN(2), jobIDN(3)
	for _, id := range []string{finished, canceled, running} {
		h.submit(forwardJob(id, 2, 2))
	}
	h.setStatus(finished, pb.JobStatus_JOB_STATUS_RUNNING)
	h.attemptAll(finished, 0)
	for _, st := range []pb.ExecutionState{pb.ExecutionState_EXECUTION_STATE_DEPLOYING, pb.ExecutionState_EXECUTION_STATE_RUNNING, pb.ExecutionState_EXECUTION_STATE_FINISHED} {
		h.moveAll(finished, st)
	}
	h.setStatus(finished, pb.JobStatus_JOB_STATUS_FINISHED)
	h.ok(cancelT, &pb.CancelJobCommand{JobId: canceled, Timestamp: 1500}) // CREATED: CANCELED at once
	h.setStatus(running, pb.JobStatus_JOB_STATUS_RUNNING)
	h.attemptAll(running, 0)

	h.fails(removeT, &pb.RemoveJobsCommand{}, ErrInvalidCommand)
	h.fails(removeT, &pb.RemoveJobsCommand{JobIds: []string{finished, finished}}, ErrInvalidCommand)
	h.fails(removeT, &pb.RemoveJobsCommand{JobIds: []string{finished, jobIDN(99)}}, ErrUnknownJob)
	h.fails(removeT, &pb.RemoveJobsCommand{JobIds: []string{finished, canceled, running}}, ErrJobNotTerminal)
	if n, _ := h.f.RemovedJobs(); n != 0 || len(h.f.JobIDs()) != 3 {
		t.Fatalf("a refused removal removed something: %d removed, jobs %v", n, h.f.JobIDs())
	}

	h.ok(removeT, &pb.RemoveJobsCommand{JobIds: []string{canceled, finished}, Timestamp: 2000})
	if ids := h.f.JobIDs(); len(ids) != 1 || ids[0] != running {
		t.Fatalf("jobs after removal: %v", ids)
	}
	if n, at := h.f.RemovedJobs(); n != 2 || at != 2000 {
		t.Fatalf("removed %d at %d, want 2 at 2000", n, at)
	}
	if _, _, _, ok := h.f.LocateAttempt(attemptID(finished, "v0", 0, 0)); ok {
		t.Errorf("an attempt of a removed job is still indexed")
	}
	if _, _, _, ok := h.f.LocateAttempt(attemptID(running, "v0", 0, 0)); !ok {
		t.Errorf("an attempt of the remaining job is no longer indexed")
	}
	h.fails(removeT, &pb.RemoveJobsCommand{JobIds: []string{finished}}, ErrUnknownJob) // already gone

	// The count survives a snapshot; the removed jobs do not come back.
	restored := New(testLogger(t))
	if err := restore(restored, persist(t, h.f)); err != nil {
		t.Fatal(err)
	}
	assertSameState(t, h.f, restored)
	// The id of a removed job may be submitted again.
	h.submit(forwardJob(finished, 2, 2))
}
