package taskmanager_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// fileSinkJob is source -> map -> file sink (vertices[2]) writing to path.
func fileSinkJob(name, path string) *pb.JobGraph {
	jg := testcluster.StreamingChain(name, 2, 100, 0)
	jg.Vertices[2].Operator = &pb.Operator{Kind: &pb.Operator_FileSink{FileSink: &pb.FileSink{Path: path}}}
	return jg
}

// quiet waits until every replica has applied the same index and returns it per replica.
func quiet(t *testing.T, c *testcluster.Cluster) map[string]uint64 {
	t.Helper()
	// The cluster's own commits first: every TM in the pool and every member's confirmation of
	// the pool version (each a commit, made as heartbeats come: on a loaded machine one came in
	// the middle of the test and moved the applied index).
	testcluster.WaitFor(t, 20*time.Second, "every TM in the pool, every member confirming its version", func() (bool, string) {
		l := c.Leader()
		if l == nil {
			return false, "no leader"
		}
		pool := l.A.State.Pool()
		version, _ := l.A.State.PoolVersion()
		var seen []string
		for _, m := range pool.GetMembers() {
			seen = append(seen, fmt.Sprintf("%s acked %d", m.TmId, m.AckedVersion))
			if m.AckedVersion != version {
				return false, fmt.Sprintf("version %d: %s", version, strings.Join(seen, ", "))
			}
		}
		return len(pool.GetMembers()) == len(c.TMs), fmt.Sprintf("%d of %d TMs in the pool: %s", len(pool.GetMembers()), len(c.TMs), strings.Join(seen, ", "))
	})
	out := map[string]uint64{}
	testcluster.WaitFor(t, 20*time.Second, "every replica applied the same index", func() (bool, string) {
		var seen []string
		var first uint64
		same := true
		for i, j := range c.Live() {
			idx := j.A.State.AppliedIndex()
			out[j.ID] = idx
			seen = append(seen, fmt.Sprintf("%s:%d", j.ID, idx))
			if i == 0 {
				first = idx
			}
			same = same && idx == first
		}
		return same, strings.Join(seen, " ")
	})
	return out
}

// TestHostileSinkPathsRefusedByTheCluster: jobs whose file sink path is absolute (anywhere, or
// into the cluster's own directory) or climbs out with "..", submitted through a real
// cluster (to a follower, which forwards, and to the leader), are refused with INVALID_ARGUMENT
// naming vertices[2].operator.file_sink.path; nothing is committed on any replica and no file
// appears anywhere.
func TestHostileSinkPathsRefusedByTheCluster(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{JMs: 3, TMs: 2})
	abs := filepath.Join(c.Dir, "some", "absolute", "path-{subtask}.txt")
	jobs := map[string]string{
		"/some/absolute/path-{subtask}.txt": "is absolute",
		abs:                                 "is absolute",
		"../../escaped-{subtask}.txt":       `has a ".." element`,
	}
	before := quiet(t, c)
	for path, want := range jobs {
		for _, j := range []*testcluster.JM{c.Follower(), c.Leader()} {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := c.Client(j).SubmitJob(ctx, &pb.SubmitJobRequest{JobGraph: fileSinkJob("hostile", path)})
			cancel()
			msg := status.Convert(err).Message()
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(msg, "vertices[2].operator.file_sink.path") || !strings.Contains(msg, want) {
				t.Fatalf("submit with sink path %q to %s: got %v, want INVALID_ARGUMENT naming vertices[2].operator.file_sink.path (%s)", path, j.ID, err, want)
			}
			t.Logf("sink path %q via %s: %s", path, j.ID, msg)
		}
	}
	after := quiet(t, c)
	for id, idx := range before {
		if after[id] != idx {
			t.Fatalf("%s applied index %d -> %d: a refused job was committed", id, idx, after[id])
		}
	}
	for _, j := range c.Live() {
		if n := len(j.A.State.Jobs()); n != 0 {
			t.Fatalf("%s holds %d jobs", j.ID, n)
		}
	}
	for _, p := range []string{"/some/absolute/path-0.txt", filepath.Join(c.Dir, "some"), filepath.Join(c.Dir, "escaped-0.txt"), filepath.Join(filepath.Dir(c.Dir), "escaped-0.txt")} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Fatalf("%s exists (%v)", p, err)
		}
	}
}

// TestHugeEpochOnAMalformedCallIsNotAdopted: malformed TaskManagerService calls carrying epoch
// 1<<62 reach a TM of a running cluster and are refused with INVALID_ARGUMENT; a well-formed
// cancel with that epoch is refused as unannounced. The TM's epoch stays the leader's, its tasks
// keep running, and after the leader is killed the next leader reconciles with that TM: it
// reports, adopts the new epoch, and its tasks keep running with the same attempts.
func TestHugeEpochOnAMalformedCallIsNotAdopted(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{JMs: 3, TMs: 2})
	id := c.Submit(testcluster.StreamingChain("epoch", 2, 100, 0))
	rec := c.WaitJob(id, "every task RUNNING", 30*time.Second, testcluster.AllRunning)
	before := testcluster.Attempts(rec)
	old := c.Leader()
	oldEpoch := old.A.JM.Epoch()
	tm := c.TMs[0]
	var mine string
	for _, a := range before {
		if a.TM == tm.ID {
			mine = a.ID
		}
	}
	if mine == "" {
		t.Fatalf("no attempt on %s: %v", tm.ID, before)
	}
	testcluster.WaitFor(t, 10*time.Second, tm.ID+" at the leader's epoch", func() (bool, string) {
		return tm.A.TM.Epoch() == oldEpoch, fmt.Sprint(tm.A.TM.Epoch())
	})

	const huge = uint64(1) << 62
	cl := pb.NewTaskManagerServiceClient(c.Conn(tm.A.TM.GRPCAddr()))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := cl.CancelTask(ctx, &pb.CancelTaskRequest{Epoch: huge, JobId: id})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("CancelTask without an attempt, epoch 1<<62: %v", err)
	}
	_, err = cl.SubmitTask(ctx, &pb.SubmitTaskRequest{Epoch: huge, Task: &pb.TaskDeploymentDescriptor{JobId: id, SlotIndex: -1}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("SubmitTask with an invalid descriptor, epoch 1<<62: %v", err)
	}
	_, err = cl.CancelTask(ctx, &pb.CancelTaskRequest{Epoch: huge, JobId: id, AttemptId: mine})
	if transport.Reason(err) != transport.ReasonUnannouncedEpoch {
		t.Fatalf("CancelTask with an unannounced epoch 1<<62: %v", err)
	}
	if e := tm.A.TM.Epoch(); e != oldEpoch {
		t.Fatalf("%s epoch %d after refused calls, want %d", tm.ID, e, oldEpoch)
	}

	c.KillJM(old)
	l := c.Leader()
	newEpoch := l.A.JM.Epoch()
	if newEpoch <= oldEpoch {
		t.Fatalf("new epoch %d is not above %d", newEpoch, oldEpoch)
	}
	r := c.Reconciliation(l, newEpoch, "completed", 30*time.Second)
	if r.GetCounts().GetReports() < int64(len(c.TMs)) || r.GetCounts().GetTmsMissing() != 0 {
		t.Fatalf("reconciliation of epoch %d did not hear from every TM: %v", newEpoch, r.GetCounts())
	}
	after := testcluster.Attempts(c.WaitJob(id, "every task RUNNING under the new leader", 30*time.Second, testcluster.AllRunning))
	if ch := testcluster.Changed(before, after); len(ch) != 0 {
		t.Fatalf("executions restarted across the leader change: %v", ch)
	}
	testcluster.WaitFor(t, 10*time.Second, tm.ID+" at the new leader's epoch", func() (bool, string) {
		return tm.A.TM.Epoch() == newEpoch, fmt.Sprint(tm.A.TM.Epoch())
	})
	for _, ti := range tm.A.TM.Tasks() {
		if ti.AttemptID == mine && ti.State != pb.ExecutionState_EXECUTION_STATE_RUNNING {
			t.Fatalf("%s: attempt %s is %v", tm.ID, mine, ti.State)
		}
	}
}
