package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestDrainMovesOnlyTheDrainedTaskManagersRegions runs real processes with default Raft
// timings: three TaskManagers of four slots and a streaming job of six regions (two per TM).
// `jmnode tm drain` of one TaskManager moves exactly the regions that had a task on it, once:
// their attempts are new and off the drained TM, every other attempt is unchanged, the job's
// restart count is unchanged and it stays RUNNING. A leader kill afterwards moves nothing
// again (the drain is replicated state) and `tm list` on the new leader shows it. A drain the
// others have no room for is refused, naming --force; an unknown id is NOT_FOUND; --undo ends
// the drain.
func TestDrainMovesOnlyTheDrainedTaskManagersRegions(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds jmnode and runs processes")
	}
	d := newProcessCluster(t, defaultRaftProcs)
	before := submitChain(t, d, "drain", 6)
	id := before.JobGraph.JobId
	ctx := context.Background()
	leader, err := d.waitLeader(ctx, "", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	attempts := testcluster.Attempts(before)
	onTM := map[string][]string{}
	for k, a := range attempts {
		onTM[a.TM] = append(onTM[a.TM], k)
	}
	drained := "tm1"
	moved := onTM[drained]
	slices.Sort(moved)
	if len(moved) == 0 {
		t.Fatalf("nothing placed on %s: %v", drained, attempts)
	}
	t.Logf("%s holds %v", drained, moved)

	out := captureStdout(t, func() error {
		return run([]string{"tm", "drain", drained, "--addr", leader.LeaderGrpcAddress, "--timeout", "10s", "--wait", "60s"})
	})
	t.Logf("tm drain:\n%s", out)
	if !strings.Contains(out, "drained (index") || !strings.Contains(out, "holds no task: drained") {
		t.Fatalf("tm drain output:\n%s", out)
	}
	after, err := d.waitJob(ctx, id, 60*time.Second, allRunning)
	if err != nil {
		t.Fatal(err)
	}
	now := testcluster.Attempts(after)
	changed := testcluster.Changed(attempts, now)
	if !slices.Equal(changed, moved) {
		t.Fatalf("changed %v, want exactly the executions that were on %s: %v", changed, drained, moved)
	}
	for _, k := range moved {
		if a := now[k]; a.TM == drained || a.Number != attempts[k].Number+1 {
			t.Fatalf("%s: attempt %+v after the drain, was %+v: want the next attempt, off %s", k, a, attempts[k], drained)
		}
	}
	if after.Restarts != before.Restarts || after.Status != pb.JobStatus_JOB_STATUS_RUNNING {
		t.Fatalf("job %s with %d restarts after the drain, was %d", after.Status, after.Restarts, before.Restarts)
	}

	// Refusals: no room elsewhere, an unknown id.
	var full string
	for tm, ks := range onTMs(now) {
		if tm != drained && len(ks) >= 3 {
			full = tm
		}
	}
	if err := runCLI([]string{"tm", "drain", full, "--addr", leader.LeaderGrpcAddress, "--timeout", "10s"}); err == nil ||
		!strings.Contains(err.Error(), "--force") || !strings.Contains(err.Error(), "FailedPrecondition") {
		t.Fatalf("a drain of %s with no room elsewhere: %v", full, err)
	}
	if err := runCLI([]string{"tm", "drain", "tm-nosuch", "--addr", leader.LeaderGrpcAddress, "--timeout", "10s"}); err == nil || !strings.Contains(err.Error(), "NotFound") {
		t.Fatalf("a drain of an unknown TaskManager: %v", err)
	}

	// The drain survives a leader kill, and nothing moves again.
	if err := d.Proc(leader.LeaderId).Kill(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	next := waitReconciledAfter(t, d, leader.Epoch, []string{leader.LeaderId}, 18)
	again, err := d.waitJob(ctx, id, 30*time.Second, allRunning)
	if err != nil {
		t.Fatal(err)
	}
	if diff := compareAttempts(after, again); len(diff) > 0 {
		t.Fatalf("attempts changed across the failover after the drain: %v", diff)
	}
	out = captureStdout(t, func() error { return run([]string{"tm", "list", "--addr", next.LeaderGrpcAddress}) })
	var row string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, drained+" ") {
			row = l
		}
	}
	if !strings.Contains(row, "since ") || !strings.Contains(row, " 0 ") {
		t.Fatalf("tm list on the new leader %s does not show %s drained and empty:\n%s", next.LeaderId, drained, out)
	}
	out = captureStdout(t, func() error {
		return run([]string{"tm", "drain", drained, "--undo", "--addr", next.LeaderGrpcAddress, "--timeout", "10s"})
	})
	if !strings.Contains(out, "no longer drained") {
		t.Fatalf("tm drain --undo: %s", out)
	}
	st, err := d.status(next.LeaderGrpcAddress)
	if err != nil {
		t.Fatal(err)
	}
	for _, tm := range st.TaskManagers {
		if tm.Drained {
			t.Fatalf("%s still drained after --undo", tm.Id)
		}
	}
}

func onTMs(m map[string]testcluster.Attempt) map[string][]string {
	out := map[string][]string{}
	for k, a := range m {
		out[a.TM] = append(out[a.TM], k)
	}
	return out
}
