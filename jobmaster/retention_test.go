package jobmaster_test

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/jobmaster"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// bufSink is an in-memory raft.SnapshotSink.
type bufSink struct{ bytes.Buffer }

func (s *bufSink) ID() string    { return "mem" }
func (s *bufSink) Close() error  { return nil }
func (s *bufSink) Cancel() error { return nil }

// snapshotBytes is the size of a replica's persisted snapshot.
func snapshotBytes(t *testing.T, f *fsm.FSM) int {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	var sink bufSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	return sink.Len()
}

// submitAndCancel submits n jobs of parallelism p and cancels them. Without TaskManagers nothing
// is deployed, so each cancelled job is CANCELED at once.
func submitAndCancel(t *testing.T, c *testcluster.Cluster, prefix string, n int, p int32) []string {
	t.Helper()
	var ids []string
	for i := 0; i < n; i++ {
		id, _ := submitRetry(t, c, sizedJob(fmt.Sprintf("%s-%d", prefix, i), 3, p, p, forward, 0))
		c.WaitJob(id, "job running", 10*time.Second, func(r *pb.JobRecord) bool { return r.Status == jobRunning })
		err := retryUnavailable(t, "cancel "+id, func() error {
			_, err := c.Client(c.Follower()).CancelJob(ctxT(t), &pb.CancelJobRequest{JobId: id})
			return err
		})
		if err != nil && status.Code(err) != codes.FailedPrecondition { // FailedPrecondition: a retry found it CANCELED
			t.Fatal(err)
		}
		c.WaitJob(id, "job cancelled", 10*time.Second, func(r *pb.JobRecord) bool { return r.Status == pb.JobStatus_JOB_STATUS_CANCELED })
		ids = append(ids, id)
	}
	return ids
}

// jobsEverywhere waits until every live replica holds exactly the jobs want and has counted
// removed removals.
func jobsEverywhere(t *testing.T, c *testcluster.Cluster, what string, want []string, removed uint64) {
	t.Helper()
	wantSet := strings.Join(sortedCopy(want), ",")
	testcluster.WaitFor(t, 20*time.Second, what, func() (bool, string) {
		var seen []string
		ok := true
		for _, j := range c.Live() {
			got := strings.Join(sortedCopy(j.A.State.JobIDs()), ",")
			n, _ := j.A.State.RemovedJobs()
			ok = ok && got == wantSet && n == removed
			seen = append(seen, fmt.Sprintf("%s: %d jobs, %d removed", j.ID, len(j.A.State.JobIDs()), n))
		}
		return ok, strings.Join(seen, "; ")
	})
}

func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// TestTerminalJobsRemovedAfterRetentionCount: with --retain-jobs 3 the leader removes the
// oldest terminal jobs beyond the newest three, on every replica; a running job, older than all
// of them, is never removed; ListJobs says how many were removed; and the persisted snapshot
// shrinks with them.
func TestTerminalJobsRemovedAfterRetentionCount(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{JMs: 3, JobMaster: func(cfg *jobmaster.Config) {
		cfg.RetainJobs, cfg.RetainJobAge, cfg.RetentionInterval = 3, time.Hour, 50*time.Millisecond
	}})
	running, _ := submitRetry(t, c, sizedJob("running", 3, 20, 20, forward, 0))
	c.WaitJob(running, "job running", 10*time.Second, func(r *pb.JobRecord) bool { return r.Status == jobRunning })
	first := submitAndCancel(t, c, "first", 3, 100)
	jobsEverywhere(t, c, "three terminal jobs kept", append([]string{running}, first...), 0)
	l := c.Leader()
	full := snapshotBytes(t, l.A.State)

	second := submitAndCancel(t, c, "second", 3, 1)
	jobsEverywhere(t, c, "the three older terminal jobs removed", append([]string{running}, second...), 3)
	after := snapshotBytes(t, c.Leader().A.State)
	t.Logf("persisted snapshot: %d bytes with the p=100 jobs, %d bytes after their removal", full, after)
	if after >= full/2 {
		t.Errorf("the snapshot did not shrink with the removed jobs: %d -> %d bytes", full, after)
	}
	for _, j := range c.Live() {
		rec, ok := j.A.State.Job(running)
		if !ok || graph.IsGloballyTerminal(rec.Status) {
			t.Errorf("%s: the running job is gone or ended: %v", j.ID, ok)
		}
	}
	var resp *pb.ListJobsResponse
	err := retryUnavailable(t, "ListJobs", func() error {
		var err error
		resp, err = c.Client(c.Follower()).ListJobs(ctxT(t), &pb.ListJobsRequest{Consistent: true})
		return err
	})
	if err != nil || resp.RemovedJobs != 3 || len(resp.Jobs) != 4 {
		t.Fatalf("ListJobs: %d jobs, %d removed, %v", len(resp.GetJobs()), resp.GetRemovedJobs(), err)
	}
}

// TestTerminalJobsRemovedAfterRetentionAge: with a short --retain-job-age every terminal job is
// removed once it has been terminal that long (the removal's timestamp says when), while a
// running job stays.
func TestTerminalJobsRemovedAfterRetentionAge(t *testing.T) {
	const age = 700 * time.Millisecond
	c := testcluster.New(t, testcluster.Options{JMs: 3, JobMaster: func(cfg *jobmaster.Config) {
		cfg.RetainJobs, cfg.RetainJobAge, cfg.RetentionInterval = 100, age, 50*time.Millisecond
	}})
	running, _ := submitRetry(t, c, sizedJob("running", 2, 2, 2, forward, 0))
	c.WaitJob(running, "job running", 10*time.Second, func(r *pb.JobRecord) bool { return r.Status == jobRunning })
	ended := submitAndCancel(t, c, "ended", 2, 2)
	var lastEnd int64
	for _, id := range ended {
		if rec, ok := c.Leader().A.State.Job(id); ok {
			lastEnd = max(lastEnd, rec.History[len(rec.History)-1].Timestamp)
		}
	}
	jobsEverywhere(t, c, "the terminal jobs removed after their age", []string{running}, 2)
	_, at := c.Leader().A.State.RemovedJobs()
	if at-lastEnd < age.Milliseconds() {
		t.Errorf("a job ended at %d was removed at %d, before its %s retention", lastEnd, at, age)
	}
}
