package jobmaster_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/jobmaster"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestSlotTimeoutFailsAJobThatCannotGetSlots: a streaming job of three regions on one
// TaskManager of two slots cannot deploy. While it waits, its view says so (the slots needed
// and free) and when it started waiting; once it has waited the slot timeout it goes FAILED,
// not restarted, with a cause that names the timeout and the slots. The FAILED timestamp is at
// least the slot timeout after the wait began (committed timestamps and the leader's clock).
func TestSlotTimeoutFailsAJobThatCannotGetSlots(t *testing.T) {
	const timeout = 2 * time.Second
	c := testcluster.New(t, testcluster.Options{JMs: 3, TMs: 1, Slots: 2, JobMaster: func(jc *jobmaster.Config) { jc.SlotTimeout = timeout }})
	id := c.Submit(testcluster.StreamingChain("no-slots", 3, 10, 0))
	l := c.Leader()
	var view *pb.GetJobResponse
	testcluster.WaitFor(t, 20*time.Second, "the job's view saying it waits for slots", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		r, err := c.Client(l).GetJob(ctx, &pb.GetJobRequest{JobId: id})
		if err != nil {
			return false, err.Error()
		}
		view = r
		return strings.Contains(r.Waiting, "3 slots needed") && strings.Contains(r.Waiting, "2 free"), r.Waiting
	})
	if view.WaitingSince == 0 || view.SlotTimeoutMs != timeout.Milliseconds() || view.Summary.GetStatus() != pb.JobStatus_JOB_STATUS_RUNNING {
		t.Fatalf("waiting view: since %d, slot timeout %d ms, status %s", view.WaitingSince, view.SlotTimeoutMs, view.Summary.GetStatus())
	}
	t.Logf("waiting: %s", view.Waiting)
	rec := c.WaitJob(id, "FAILED after the slot timeout", 30*time.Second, func(r *pb.JobRecord) bool {
		return r.Status == pb.JobStatus_JOB_STATUS_FAILED
	})
	if !strings.HasPrefix(rec.FailureCause, jobmaster.SlotTimeoutCause) || !strings.Contains(rec.FailureCause, "3 slots needed") || !strings.Contains(rec.FailureCause, timeout.String()) {
		t.Fatalf("failure cause %q", rec.FailureCause)
	}
	if rec.Restarts != 0 {
		t.Fatalf("restarted %d times after the slot timeout", rec.Restarts)
	}
	var failedAt int64
	for _, h := range rec.History {
		if h.Status == pb.JobStatus_JOB_STATUS_FAILING && failedAt == 0 {
			failedAt = h.Timestamp
		}
	}
	if waited := time.Duration(failedAt-view.WaitingSince) * time.Millisecond; waited < timeout {
		t.Fatalf("FAILING %s after the wait began, before the slot timeout %s", waited, timeout)
	}
	t.Logf("FAILED: %s", rec.FailureCause)
}
