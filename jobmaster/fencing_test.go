package jobmaster_test

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

func wantStaleEpoch(t *testing.T, what string, err error) {
	t.Helper()
	if status.Code(err) != codes.FailedPrecondition || !transport.IsStaleEpoch(err) {
		t.Fatalf("%s with the old epoch: want FAILED_PRECONDITION reason %s, got %v", what, transport.ReasonStaleEpoch, err)
	}
}

// TestTaskManagerRefusesOlderEpoch: after a leader change, every TM has adopted the new epoch;
// SubmitTask, CancelTask, UpdatePartitionInfo, AcknowledgeTerminal and RequestReport carrying
// the deposed leader's epoch are refused with FAILED_PRECONDITION / STALE_EPOCH, and nothing
// changes: no task is started or cancelled, the TM keeps the new epoch.
func TestTaskManagerRefusesOlderEpoch(t *testing.T) {
	c := newCluster(t)
	id := c.Submit(testcluster.StreamingChain("epoch", 3, 100, 0)) // one region per TM
	waitAllRunning(t, c, id)
	old := c.Leader()
	oldEpoch := old.A.JM.Epoch()

	c.KillJM(old)
	l := c.Leader()
	newEpoch := l.A.JM.Epoch()
	if newEpoch <= oldEpoch {
		t.Fatalf("new epoch %d is not above %d", newEpoch, oldEpoch)
	}
	rec := waitAllRunning(t, c, id)
	testcluster.WaitFor(t, 10*time.Second, "every TM to adopt the new epoch", func() (bool, string) {
		var seen []string
		ok := true
		for _, tm := range c.TMs {
			e := tm.A.TM.Epoch()
			ok = ok && e == newEpoch
			seen = append(seen, fmt.Sprintf("%s:%d", tm.ID, e))
		}
		return ok, strings.Join(seen, " ")
	})

	ctx := ctxT(t)
	for _, tm := range c.TMs {
		// A fully valid deployment of a fresh attempt into a free slot, refused for its epoch
		// alone.
		var mine *pb.ExecutionVertex
		for _, ev := range testcluster.Executions(rec) {
			if ev.Current.Slot.TmId == tm.ID {
				mine = ev
			}
		}
		if mine == nil {
			t.Fatalf("no execution on %s", tm.ID)
		}
		tdd, err := graph.TaskDeploymentDescriptor(rec, mine.VertexId, mine.SubtaskIndex)
		if err != nil {
			t.Fatal(err)
		}
		tdd.AttemptId, tdd.AttemptNumber, tdd.SlotIndex = "rogue-"+tm.ID, mine.Current.AttemptNumber+1, int32(c.Opts.Slots-1)
		busy := map[int32]bool{}
		for _, ti := range tm.A.TM.Tasks() {
			busy[ti.Slot] = busy[ti.Slot] || ti.State == stRunning
		}
		for busy[tdd.SlotIndex] {
			tdd.SlotIndex--
		}
		tasksBefore, freeBefore := tmTasks(tm), tm.A.TM.FreeSlots()
		cl := tmClient(c, tm)

		_, err = cl.SubmitTask(ctx, &pb.SubmitTaskRequest{Epoch: oldEpoch, Task: tdd})
		wantStaleEpoch(t, "SubmitTask to "+tm.ID, err)
		_, err = cl.CancelTask(ctx, &pb.CancelTaskRequest{Epoch: oldEpoch, JobId: id, AttemptId: mine.Current.AttemptId})
		wantStaleEpoch(t, "CancelTask on "+tm.ID, err)
		_, err = cl.UpdatePartitionInfo(ctx, &pb.UpdatePartitionInfoRequest{Epoch: oldEpoch, JobId: id, ConsumerAttemptId: mine.Current.AttemptId})
		wantStaleEpoch(t, "UpdatePartitionInfo on "+tm.ID, err)
		_, err = cl.AcknowledgeTerminal(ctx, &pb.AcknowledgeTerminalRequest{Epoch: oldEpoch, AttemptIds: []string{mine.Current.AttemptId}})
		wantStaleEpoch(t, "AcknowledgeTerminal on "+tm.ID, err)
		stream, err := cl.RequestReport(ctx, &pb.RequestReportRequest{Epoch: oldEpoch, LeaderId: old.ID, LeaderGrpcAddress: old.GRPCAddr})
		if err == nil {
			_, err = stream.Recv()
		}
		if err == io.EOF {
			err = nil
		}
		wantStaleEpoch(t, "RequestReport on "+tm.ID, err)

		if got := tmTasks(tm); got != tasksBefore {
			t.Fatalf("%s tasks changed:\nbefore %s\nafter  %s", tm.ID, tasksBefore, got)
		}
		if free := tm.A.TM.FreeSlots(); free != freeBefore {
			t.Fatalf("%s free slots %d, was %d", tm.ID, free, freeBefore)
		}
		if e := tm.A.TM.Epoch(); e != newEpoch {
			t.Fatalf("%s epoch %d after stale calls, want %d", tm.ID, e, newEpoch)
		}
		if la := tm.A.TM.Leader(); la != l.GRPCAddr {
			t.Fatalf("%s follows %s after a stale RequestReport, want the leader %s", tm.ID, la, l.GRPCAddr)
		}
	}
	if after := c.Job(id); len(testcluster.Changed(testcluster.Attempts(rec), testcluster.Attempts(after))) != 0 || !testcluster.AllRunning(after) {
		t.Fatalf("the job changed: %s", testcluster.Describe(after))
	}
}

// TestAttemptNeverSubmittedBeforeCommit: the write-ahead rule. A job waits for slots on a
// leader whose followers are then killed; a TM appears. The leader (which keeps its lease for
// a second, see testcluster.SlowLease) places the tasks and tries to commit the attempts, but
// cannot reach a quorum: the commit fails (DeployFailures grows) and the TM receives nothing.
// A run in which the leader stepped down before trying would not grow DeployFailures and fail
// the test, so it cannot pass vacuously. Once the followers return, the job runs, with only
// committed attempts on the TM.
func TestAttemptNeverSubmittedBeforeCommit(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{JMs: 3, Raft: testcluster.SlowLease})
	id := c.Submit(testcluster.StreamingChain("write-ahead", 1, 10, 0))
	l := c.Leader()
	c.WaitJob(id, "job RUNNING, waiting for slots", 10*time.Second, func(r *pb.JobRecord) bool {
		return r.Status == jobRunning && l.A.JM.DeployWaits() > 0
	})
	var followers []*testcluster.JM
	for _, j := range c.Live() {
		if j != l {
			followers = append(followers, j)
		}
	}
	for _, j := range followers {
		c.KillJM(j)
	}
	failures := l.A.JM.DeployFailures()
	tm := c.AddTM("tm1")
	// What the TM's registration does, without waiting for its leader lookup.
	l.A.JM.Registry().Upsert(tm.ID, tm.A.TM.GRPCAddr(), tm.A.TM.DataAddr(), int32(c.Opts.Slots), true)
	l.A.JM.Kick("")

	testcluster.WaitFor(t, 10*time.Second, "the leader's deployment commit to fail", func() (bool, string) {
		n := l.A.JM.DeployFailures()
		return n > failures, fmt.Sprintf("deploy failures %d (was %d), active %v, TM tasks [%s]", n, failures, l.A.JM.Active(), tmTasks(tm))
	})
	if got := tm.A.TM.Tasks(); len(got) != 0 {
		t.Fatalf("the TM received tasks whose attempts were never committed: %+v", got)
	}
	for _, ev := range testcluster.Executions(mustJob(t, l, id)) {
		if ev.Current != nil {
			t.Fatalf("%s[%d] has an attempt in the leader's applied state: %v", ev.VertexId, ev.SubtaskIndex, ev.Current)
		}
	}
	testcluster.WaitFor(t, 10*time.Second, "the leader without a quorum to step down", func() (bool, string) {
		return !l.A.JM.Active(), fmt.Sprintf("active %v", l.A.JM.Active())
	})
	if got := tm.A.TM.Tasks(); len(got) != 0 {
		t.Fatalf("the TM received tasks from a leader that lost its quorum: %+v", got)
	}

	// Quorum returns: the job runs, and every attempt on the TM is committed.
	for _, j := range followers {
		c.StartJM(j)
	}
	rec := waitAllRunning(t, c, id)
	for _, ti := range tm.A.TM.Tasks() {
		if ti.State != stRunning {
			continue
		}
		ev := execution(t, rec, ti.VertexID, ti.Subtask)
		if ev.Current.AttemptId != ti.AttemptID {
			t.Fatalf("TM runs %s[%d] attempt %s, the committed attempt is %s", ti.VertexID, ti.Subtask, ti.AttemptID, ev.Current.AttemptId)
		}
	}
}

func mustJob(t *testing.T, j *testcluster.JM, id string) *pb.JobRecord {
	t.Helper()
	rec, ok := j.A.State.Job(id)
	if !ok {
		t.Fatalf("job %s unknown to %s", id, j.ID)
	}
	return rec
}
