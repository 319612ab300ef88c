package agent_test

import (
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/internal/failpoint"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestAckBeforeCommitAcknowledgesUncommittedWrites: with the failpoint ack-before-commit, the
// leader answers SubmitJob before the job is committed (no commit index in the answer, where an
// intact build always names one) and commits it later; CancelJob is answered CANCELLING at
// once and committed later too. The fault suite's linearizability and lost-submission
// checkers must catch this build.
func TestAckBeforeCommitAcknowledgesUncommittedWrites(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{JMs: 3})
	ctx := t.Context()
	l := c.Leader()
	intact, err := c.Client(l).SubmitJob(ctx, &pb.SubmitJobRequest{JobGraph: testcluster.StreamingChain("intact", 1, 10, 0)})
	if err != nil || intact.Index == 0 {
		t.Fatalf("intact SubmitJob: %v, %v: want a commit index", intact, err)
	}

	failpoint.Set(t, failpoint.AckBeforeCommit.Name())
	resp, err := c.Client(l).SubmitJob(ctx, &pb.SubmitJobRequest{JobGraph: testcluster.StreamingChain("early-ack", 1, 10, 0)})
	if err != nil || resp.JobId == "" || resp.Index != 0 {
		t.Fatalf("SubmitJob with ack-before-commit: %v, %v: want a job id and no commit index", resp, err)
	}
	c.WaitJob(resp.JobId, "the acknowledged job committed later", 10*time.Second, func(*pb.JobRecord) bool { return true })

	cresp, err := c.Client(l).CancelJob(ctx, &pb.CancelJobRequest{JobId: resp.JobId})
	if err != nil || cresp.Status != pb.JobStatus_JOB_STATUS_CANCELLING {
		t.Fatalf("CancelJob with ack-before-commit: %v, %v", cresp, err)
	}
	c.WaitJob(resp.JobId, "the acknowledged cancel committed later", 10*time.Second, func(rec *pb.JobRecord) bool {
		return rec.Status == pb.JobStatus_JOB_STATUS_CANCELLING || rec.Status == pb.JobStatus_JOB_STATUS_CANCELED
	})
}
