package jobmaster_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/internal/failpoint"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

const (
	stDeploying = pb.ExecutionState_EXECUTION_STATE_DEPLOYING
	stCanceling = pb.ExecutionState_EXECUTION_STATE_CANCELING
)

// jobTasks is a one-line view of every TM's tasks of one job: "tm:attempt:STATE".
func jobTasks(c *testcluster.Cluster, jobID string) []string {
	var out []string
	for _, tm := range c.TMs {
		if tm.A == nil {
			continue
		}
		for _, ti := range tm.A.TM.Tasks() {
			if ti.JobID == jobID {
				out = append(out, tm.ID+":"+ti.AttemptID+":"+graph.ExecutionStateName(ti.State))
			}
		}
	}
	return out
}

// waitPaused waits until n passes are blocked in the hook.
func waitPaused(t *testing.T, h *failpoint.Hook, n int64) {
	t.Helper()
	testcluster.WaitFor(t, 20*time.Second, fmt.Sprintf("%d passes (or more) paused in %s", n, h.Name()), func() (bool, string) {
		return failpoint.Waiting(h) >= n, fmt.Sprintf("%d paused", failpoint.Waiting(h))
	})
}

// TestEarlyGateOpensBeforeReconciliationCommits: with the failpoint early-gate, a new leader
// opens its RPC gate and starts its scheduler before the reconciled graph is committed. With
// stuck-reconciling also set, the window stays open: the leader serves with its gate open
// while its reconciliation is in progress and the job RECONCILING (TestStuckReconcilingNever-
// Commits shows the gate closed in that state without early-gate). The scheduler leaves the
// RECONCILING job alone, which is why the fault suite's checkers cannot catch this build.
func TestEarlyGateOpensBeforeReconciliationCommits(t *testing.T) {
	c := newCluster(t)
	id := c.Submit(sourceSink("early", 2, 100))
	before := testcluster.Attempts(waitAllRunning(t, c, id))
	failpoint.Set(t, "early-gate,stuck-reconciling")

	l1 := c.Leader()
	e1 := l1.A.JM.Epoch()
	c.KillJM(l1)
	var l2 *testcluster.JM
	testcluster.WaitFor(t, 20*time.Second, "a new leader with its gate open", func() (bool, string) {
		var seen []string
		for _, j := range c.Live() {
			seen = append(seen, fmt.Sprintf("%s: epoch %d reconciling %v", j.ID, j.A.JM.Epoch(), j.A.JM.Reconciling()))
			if j.A.JM.Epoch() > e1 && !j.A.JM.Reconciling() {
				l2 = j
				return true, ""
			}
		}
		return false, strings.Join(seen, ", ")
	})
	c.Reconciliation(l2, l2.A.JM.Epoch(), "in_progress", 5*time.Second)
	rec, _ := l2.A.State.Job(id)
	if rec.GetStatus() != pb.JobStatus_JOB_STATUS_RECONCILING || !l2.A.JM.Active() || l2.A.JM.Reconciling() {
		t.Fatalf("%s: active %v reconciling %v, job %s", l2.ID, l2.A.JM.Active(), l2.A.JM.Reconciling(), testcluster.Describe(rec))
	}
	if changed := testcluster.Changed(before, testcluster.Attempts(rec)); len(changed) != 0 {
		t.Fatalf("the scheduler touched the RECONCILING job: %v", changed)
	}
}

// TestPauseBeforeSubmitTaskHoldsACommittedAttempt: a pause at before-submit-task holds every
// deployment between its write-ahead commit and its SubmitTask: the attempts are committed
// DEPLOYING while no TaskManager has a task of the job. Released, the committed attempts are
// the ones that run.
func TestPauseBeforeSubmitTaskHoldsACommittedAttempt(t *testing.T) {
	c := newCluster(t)
	c.WaitTMs(3)
	failpoint.Set(t, "pause(before-submit-task)")
	id := c.Submit(sourceSink("paused-submit", 2, 100))
	waitPaused(t, failpoint.BeforeSubmitTask, 1)
	paused := c.WaitJob(id, "every execution committed DEPLOYING", 10*time.Second, allInState(jobRunning, stDeploying))
	waitPaused(t, failpoint.BeforeSubmitTask, batchesOf(paused)) // one SubmitTasks batch per TM
	if tasks := jobTasks(c, id); len(tasks) != 0 {
		t.Fatalf("tasks on the TMs before any SubmitTask was sent: %v", tasks)
	}
	failpoint.Release(failpoint.BeforeSubmitTask)
	after := waitAllRunning(t, c, id)
	if changed := testcluster.Changed(testcluster.Attempts(paused), testcluster.Attempts(after)); len(changed) != 0 {
		t.Fatalf("attempts changed after the release: %v", changed)
	}
}

// TestPauseBeforeCancelTaskHoldsACommittedCancel: a pause at before-cancel-task holds every
// cancellation between its CANCELING commit and its CancelTask: the executions are committed
// CANCELING while the tasks still run. Released, the job ends CANCELED.
func TestPauseBeforeCancelTaskHoldsACommittedCancel(t *testing.T) {
	c := newCluster(t)
	id := c.Submit(sourceSink("paused-cancel", 2, 100))
	waitAllRunning(t, c, id)
	failpoint.Set(t, "pause(before-cancel-task)")
	if _, err := c.Client(c.Follower()).CancelJob(ctxT(t), &pb.CancelJobRequest{JobId: id}); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	waitPaused(t, failpoint.BeforeCancelTask, 4)
	c.WaitJob(id, "every execution committed CANCELING", 10*time.Second, allInState(pb.JobStatus_JOB_STATUS_CANCELLING, stCanceling))
	tasks := jobTasks(c, id)
	if len(tasks) != 4 || strings.Count(strings.Join(tasks, " "), ":RUNNING") != 4 {
		t.Fatalf("tasks while every CancelTask is paused: %v, want 4 RUNNING", tasks)
	}
	failpoint.Release(failpoint.BeforeCancelTask)
	c.WaitJob(id, "job CANCELED with every task CANCELED", 20*time.Second, allInState(jobCanceled, stCanceled))
}

// TestLeaderKilledBetweenDeployingCommitAndSubmitTask: the leader dies while its SubmitTasks
// are paused after their DEPLOYING commit. No TaskManager ever starts one of those attempts:
// the new leader's reconciliation finds them in no report, fails them, and the job runs on new
// attempts. This is the window the fault suite reaches with pause(before-submit-task)=DUR.
func TestLeaderKilledBetweenDeployingCommitAndSubmitTask(t *testing.T) {
	c := newCluster(t)
	c.WaitTMs(3)
	failpoint.Set(t, "pause(before-submit-task)")
	id := c.Submit(sourceSink("killed-submit", 2, 100))
	waitPaused(t, failpoint.BeforeSubmitTask, 1)
	committed := c.WaitJob(id, "every execution committed DEPLOYING", 10*time.Second, allInState(jobRunning, stDeploying))
	waitPaused(t, failpoint.BeforeSubmitTask, batchesOf(committed))
	paused := testcluster.Attempts(committed)

	l1 := c.Leader()
	c.KillJM(l1) // its paused passes end with its term's context
	failpoint.Reset()
	after := c.WaitJob(id, "the job RUNNING on new attempts", 30*time.Second, func(rec *pb.JobRecord) bool {
		return testcluster.AllRunning(rec) && len(testcluster.Changed(paused, testcluster.Attempts(rec))) == len(paused)
	})
	never := map[string]bool{}
	for _, a := range paused {
		never[a.ID] = true
	}
	for _, ev := range c.Events(id) {
		if never[ev.AttemptID] {
			t.Fatalf("%s started attempt %s, whose SubmitTask the killed leader never sent: %+v", ev.TM, ev.AttemptID, ev)
		}
	}
	t.Logf("after the kill: %s", testcluster.Describe(after))
}

// batchesOf is the number of SubmitTasks batches a small job's deployment makes: one per TM
// that gets a task.
func batchesOf(rec *pb.JobRecord) int64 {
	tms := map[string]bool{}
	for _, a := range testcluster.Attempts(rec) {
		tms[a.TM] = true
	}
	return int64(len(tms))
}

// TestLeaderKilledBeforeDeployingCommit: the leader dies between a deployment's two
// write-ahead commits, its attempts committed SCHEDULED and nothing submitted. The new leader
// deploys those very attempts: the job runs with zero restarts, although its restart strategy
// is NONE. Before, reconciliation turned them RECONCILING, failed them as missing, and the
// job FAILED on a JobMaster failover alone.
func TestLeaderKilledBeforeDeployingCommit(t *testing.T) {
	c := newCluster(t)
	c.WaitTMs(3)
	failpoint.Set(t, "pause(before-deploying-commit)")
	jg := sourceSink("killed-before-deploying", 2, 100)
	jg.RestartStrategy = &pb.RestartStrategy{Kind: pb.RestartKind_RESTART_KIND_NONE}
	id := c.Submit(jg)
	waitPaused(t, failpoint.BeforeDeployingCommit, 1)
	scheduled := c.WaitJob(id, "every execution committed SCHEDULED", 10*time.Second, func(rec *pb.JobRecord) bool {
		for _, ev := range testcluster.Executions(rec) {
			if ev.GetCurrent().GetState() != pb.ExecutionState_EXECUTION_STATE_SCHEDULED {
				return false
			}
		}
		return true
	})
	created := testcluster.Attempts(scheduled)

	l1 := c.Leader()
	c.KillJM(l1) // its paused pass ends with its term's context, before the DEPLOYING commit
	failpoint.Reset()
	after := c.WaitJob(id, "the job RUNNING with every task RUNNING, or ended", 30*time.Second, func(rec *pb.JobRecord) bool {
		return testcluster.AllRunning(rec) || graph.IsGloballyTerminal(rec.Status)
	})
	if !testcluster.AllRunning(after) || after.Restarts != 0 {
		t.Fatalf("after the kill: %s, %d restarts; want RUNNING with 0 restarts", testcluster.Describe(after), after.Restarts)
	}
	if changed := testcluster.Changed(created, testcluster.Attempts(after)); len(changed) != 0 {
		t.Fatalf("the new leader replaced the never-submitted attempts: %v", changed)
	}
	l2 := c.Leader()
	r := c.Reconciliation(l2, l2.A.JM.Epoch(), "completed", 10*time.Second)
	if r.GetCounts().GetMissing() != 0 || r.GetCounts().GetExecutions() != 0 {
		t.Fatalf("reconciliation counted %d executions, %d missing; want none (nothing was submitted)", r.GetCounts().GetExecutions(), r.GetCounts().GetMissing())
	}
}
