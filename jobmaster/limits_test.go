package jobmaster_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/jobmaster"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// sizedJob is source(p) -> ... -> sink(q): n vertices with ids of idLen characters (0: short
// ids), joined by edges of distribution d; the inner vertices have parallelism q too.
func sizedJob(name string, n int, p, q int32, d pb.Distribution, idLen int) *pb.JobGraph {
	jg := &pb.JobGraph{Name: name, Type: pb.JobType_JOB_TYPE_STREAMING}
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("v%d", i)
		if idLen > 0 {
			id = fmt.Sprintf("v%0*d", idLen-1, i)
		}
		v := &pb.JobVertex{Id: id, Parallelism: q, Operator: &pb.Operator{Kind: &pb.Operator_Map{Map: &pb.MapOperator{}}}}
		switch i {
		case 0:
			v.Parallelism = p
			v.Operator = &pb.Operator{Kind: &pb.Operator_SequenceSource{SequenceSource: &pb.SequenceSource{}}}
		case n - 1:
			v.Operator = &pb.Operator{Kind: &pb.Operator_LogSink{LogSink: &pb.LogSink{}}}
		}
		jg.Vertices = append(jg.Vertices, v)
		if i > 0 {
			jg.Edges = append(jg.Edges, &pb.JobEdge{Source: jg.Vertices[i-1].Id, Target: id, Distribution: d, ResultType: pb.ResultType_RESULT_TYPE_PIPELINED})
		}
	}
	return jg
}

const (
	forward  = pb.Distribution_DISTRIBUTION_FORWARD
	allToAll = pb.Distribution_DISTRIBUTION_ALL_TO_ALL
)

// indexes returns each live replica's commit index, once every replica has applied all of it.
func settledIndexes(t *testing.T, c *testcluster.Cluster) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	testcluster.WaitFor(t, 10*time.Second, "every replica to apply its commit index", func() (bool, string) {
		var seen []string
		ok := true
		var first uint64
		for i, j := range c.Live() {
			ci, ai := j.A.Node.CommitIndex(), j.A.Node.AppliedIndex()
			out[j.ID] = ci
			seen = append(seen, fmt.Sprintf("%s commit %d applied %d", j.ID, ci, ai))
			if i == 0 {
				first = ci
			}
			ok = ok && ci == ai && ci == first
		}
		return ok, strings.Join(seen, ", ")
	})
	return out
}

// retryUnavailable runs call until it returns anything but Unavailable (no leader, the call
// reached a deposed leader, leadership moved during the commit), for up to 20 seconds.
func retryUnavailable(t *testing.T, what string, call func() error) error {
	t.Helper()
	var err error
	testcluster.WaitFor(t, 20*time.Second, what, func() (bool, string) {
		err = call()
		return status.Code(err) != codes.Unavailable, fmt.Sprint(err)
	})
	return err
}

// submitRetry submits a job with an id of its own, so that a retry after a leadership change is
// recognised (AlreadyExists), and returns the id and the commit index.
func submitRetry(t *testing.T, c *testcluster.Cluster, jg *pb.JobGraph) (string, uint64) {
	t.Helper()
	jg.JobId = jobmaster.NewJobID()
	var index uint64
	err := retryUnavailable(t, "submit "+jg.Name, func() error {
		resp, err := c.Client(c.Follower()).SubmitJob(ctxT(t), &pb.SubmitJobRequest{JobGraph: jg})
		index = resp.GetIndex()
		return err
	})
	if err != nil && status.Code(err) != codes.AlreadyExists {
		t.Fatalf("submit %s: %v", jg.Name, err)
	}
	return jg.JobId, index
}

// TestOversizedJobRefusedBeforeCommit: the 141-byte job spec that used to exhaust every
// JobMaster (a 4-vertex ALL_TO_ALL chain at parallelism 1024, 3,145,728 input channels) is
// refused with InvalidArgument naming the limit, its value and the job's, through a follower
// as well as on the leader, and no replica's commit index moves: nothing was proposed. (A
// leadership change in between commits entries of its own; the check is then repeated.)
func TestOversizedJobRefusedBeforeCommit(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{JMs: 3})
	hostile := sizedJob("hostile", 4, 1024, 1024, allToAll, 0)
	for attempt := 1; ; attempt++ {
		epoch := c.Leader().A.JM.Epoch()
		before := settledIndexes(t, c)
		for _, j := range []*testcluster.JM{c.Follower(), c.Leader()} {
			err := retryUnavailable(t, "the hostile submission to be answered", func() error {
				_, err := c.Client(j).SubmitJob(ctxT(t), &pb.SubmitJobRequest{JobGraph: hostile})
				return err
			})
			st := status.Convert(err)
			if st.Code() != codes.InvalidArgument {
				t.Fatalf("submit through %s: %v, want InvalidArgument", j.ID, err)
			}
			for _, want := range []string{"max-job-input-channels = 524288", "3145728 input channels", "max-job-graph-bytes"} {
				if !strings.Contains(st.Message(), want) {
					t.Errorf("message %q lacks %q", st.Message(), want)
				}
			}
			t.Logf("through %s: %s", j.ID, st.Message())
		}
		after := settledIndexes(t, c)
		if c.Leader().A.JM.Epoch() != epoch && attempt < 3 {
			t.Logf("the leadership changed during attempt %d; again", attempt)
			continue
		}
		for id, idx := range before {
			if after[id] != idx {
				t.Errorf("%s: commit index %d -> %d after the refused submissions", id, idx, after[id])
			}
		}
		break
	}
	// A 512 -> 512 ALL_TO_ALL job is what the defaults must admit.
	if _, index := submitRetry(t, c, sizedJob("wide", 2, 512, 512, allToAll, 0)); index == 0 {
		t.Errorf("the 512 -> 512 job was not committed")
	}
}

// TestConfiguredSizeLimitsEnforced: limits configured below the defaults are what the leader
// enforces: for each one a job at the limit is committed and one just over it is refused with
// InvalidArgument naming exactly that limit and its configured value.
func TestConfiguredSizeLimitsEnforced(t *testing.T) {
	// The byte limit is the deployed estimate of a 1 -> 30 job with long ids; the other jobs
	// (short ids) stay under it, so each job exceeds one limit only.
	bytesUnder := sizedJob("bytes-under", 2, 1, 30, allToAll, 64)
	bytesOver := sizedJob("bytes-over", 2, 1, 31, allToAll, 64)
	lim := graph.SizeLimits{MaxExecutions: 40, MaxInputChannels: 100, MaxGraphBytes: graph.Size(bytesUnder).DeployedBytes}
	cases := []struct {
		limit       string
		value       int64
		under, over *pb.JobGraph
	}{
		{graph.LimitExecutions, lim.MaxExecutions, sizedJob("exec-under", 2, 20, 20, forward, 0), sizedJob("exec-over", 2, 21, 21, forward, 0)},
		{graph.LimitInputChannels, lim.MaxInputChannels, sizedJob("chan-under", 2, 10, 10, allToAll, 0), sizedJob("chan-over", 2, 10, 11, allToAll, 0)},
		{graph.LimitGraphBytes, lim.MaxGraphBytes, bytesUnder, bytesOver},
	}
	for _, tc := range cases {
		if s := graph.Size(tc.over); s.Executions > lim.MaxExecutions && tc.limit != graph.LimitExecutions ||
			s.InputChannels > lim.MaxInputChannels && tc.limit != graph.LimitInputChannels ||
			s.DeployedBytes > lim.MaxGraphBytes && tc.limit != graph.LimitGraphBytes {
			t.Fatalf("%s: the job over the limit exceeds another one too: %+v, limits %+v", tc.limit, s, lim)
		}
	}
	c := testcluster.New(t, testcluster.Options{JMs: 3, JobMaster: func(cfg *jobmaster.Config) { cfg.SizeLimits = lim }})
	for _, tc := range cases {
		submitRetry(t, c, tc.under) // fails the test unless committed
		err := retryUnavailable(t, "the submission over the limit to be answered", func() error {
			_, err := c.Client(c.Follower()).SubmitJob(ctxT(t), &pb.SubmitJobRequest{JobGraph: tc.over})
			return err
		})
		st := status.Convert(err)
		want := fmt.Sprintf("over the limit %s = %d", tc.limit, tc.value)
		if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), want) || strings.Count(st.Message(), "over the limit") != 1 {
			t.Errorf("%s: the job over the limit: %v, want InvalidArgument with %q", tc.limit, err, want)
		}
	}
}

// TestCheckpointConfigOutOfRangeRefusedBeforeCommit: a job whose checkpoint config is out of
// range is refused with InvalidArgument naming each field, before anything is proposed; a job
// with a valid one is committed with it, Flink's defaults filling what it leaves at 0.
func TestCheckpointConfigOutOfRangeRefusedBeforeCommit(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{JMs: 3, Checkpoints: true})
	bad := sizedJob("bad-checkpoints", 2, 2, 2, forward, 0)
	bad.CheckpointConfig = &pb.CheckpointConfig{IntervalMs: 5, MaxConcurrent: 17}
	before := settledIndexes(t, c)
	err := retryUnavailable(t, "the submission to be answered", func() error {
		_, err := c.Client(c.Leader()).SubmitJob(ctxT(t), &pb.SubmitJobRequest{JobGraph: bad})
		return err
	})
	st := status.Convert(err)
	if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "checkpoint_config.interval_ms") || !strings.Contains(st.Message(), "checkpoint_config.max_concurrent") {
		t.Fatalf("submit: %v, want InvalidArgument naming interval_ms and max_concurrent", err)
	}
	if after := settledIndexes(t, c); after[c.Leader().ID] != before[c.Leader().ID] && c.Leader().A.JM.Epoch() == 1 {
		t.Errorf("commit index %d -> %d after the refused submission", before[c.Leader().ID], after[c.Leader().ID])
	}
	good := sizedJob("checkpoints", 2, 2, 2, forward, 0)
	good.CheckpointConfig = &pb.CheckpointConfig{IntervalMs: 1000}
	id, _ := submitRetry(t, c, good)
	s, ok := c.Leader().A.State.CheckpointSettings(id)
	if want := (graph.CheckpointSettings{IntervalMs: 1000, TimeoutMs: 600_000, MaxConcurrent: 1, Retained: 1}); !ok || s != want {
		t.Errorf("committed settings %+v %v, want %+v", s, ok, want)
	}
}
