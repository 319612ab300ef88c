package jobmaster_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestTaskManagerLossRestartsOnlyAffectedRegions: a TM killed abruptly is declared lost; every
// failover region with a task on it restarts as a whole with attempt number + 1 on the
// remaining TMs; the job is RUNNING again; executions of unaffected regions keep their attempts.
func TestTaskManagerLossRestartsOnlyAffectedRegions(t *testing.T) {
	c := newCluster(t)
	jg := sourceSink("tm-loss", 3, 200)
	id := c.Submit(jg)
	rec := waitAllRunning(t, c, id)
	before := testcluster.Attempts(rec)
	regions := regionKeys(t, rec.JobGraph)

	// Pick a TM whose loss leaves at least one region untouched.
	var victim string
	var affected, unaffected []string
	for _, tm := range c.TMs {
		var a, u []string
		for _, r := range regions {
			hit := false
			for _, k := range r {
				hit = hit || before[k].TM == tm.ID
			}
			if hit {
				a = append(a, r...)
			} else {
				u = append(u, r...)
			}
		}
		if len(a) > 0 && len(u) > 0 {
			victim, affected, unaffected = tm.ID, a, u
			break
		}
	}
	if victim == "" {
		t.Fatalf("no TM leaves a region untouched: %v", before)
	}
	t.Logf("killing %s: regions with %v restart, %v keep running", victim, affected, unaffected)
	c.KillTM(tmByID(t, c, victim))

	after := c.WaitJob(id, "affected regions restarted on the remaining TMs", 30*time.Second, func(r *pb.JobRecord) bool {
		if !testcluster.AllRunning(r) {
			return false
		}
		now := testcluster.Attempts(r)
		for _, k := range affected {
			if now[k].Number != before[k].Number+1 || now[k].TM == victim {
				return false
			}
		}
		return true
	})
	now := testcluster.Attempts(after)
	for _, k := range affected {
		if now[k].ID == before[k].ID {
			t.Errorf("%s kept attempt %s", k, now[k].ID)
		}
	}
	if changed := testcluster.Changed(pick(before, unaffected), now); len(changed) != 0 {
		t.Fatalf("unaffected executions changed attempt: %v\nbefore %v\nafter  %v", changed, before, now)
	}
	for _, k := range unaffected {
		if now[k].TM == victim {
			t.Fatalf("%s still placed on the lost %s", k, victim)
		}
	}
	// The restarted tasks really run on the TMs the graph names.
	for _, k := range affected {
		found := false
		for _, ti := range tmByID(t, c, now[k].TM).A.TM.Tasks() {
			found = found || (ti.AttemptID == now[k].ID && ti.State == stRunning)
		}
		if !found {
			t.Errorf("%s attempt %s not RUNNING on %s", k, now[k].ID, now[k].TM)
		}
	}
}

func pick(m map[string]testcluster.Attempt, keys []string) map[string]testcluster.Attempt {
	out := map[string]testcluster.Attempt{}
	for _, k := range keys {
		out[k] = m[k]
	}
	return out
}

// TestFailedTaskRestartsItsRegionUntilAttemptsExhausted: a task that FAILS restarts only its
// failover region (attempt number + 1), under a fixed-delay strategy with one restart; the
// next failure exhausts the strategy and the job goes FAILED with every task terminal and
// every slot free.
func TestFailedTaskRestartsItsRegionUntilAttemptsExhausted(t *testing.T) {
	c := newCluster(t)
	jg := testcluster.StreamingChain("fail", 2, 200, 0)
	jg.RestartStrategy = &pb.RestartStrategy{Kind: pb.RestartKind_RESTART_KIND_FIXED_DELAY, Attempts: 1, DelayMs: 100}
	id := c.Submit(jg)
	rec := waitAllRunning(t, c, id)
	before := testcluster.Attempts(rec)
	region0 := []string{"source[0]", "map[0]", "sink[0]"}
	region1 := []string{"source[1]", "map[1]", "sink[1]"}

	failOn := func(key string, a testcluster.Attempt) {
		t.Helper()
		if err := tmByID(t, c, a.TM).A.TM.FailTask(a.ID, "injected failure of "+key); err != nil {
			t.Fatalf("fail %s: %v", key, err)
		}
	}
	failOn("map[0]", before["map[0]"])
	after := c.WaitJob(id, "region 0 restarted", 20*time.Second, func(r *pb.JobRecord) bool {
		now := testcluster.Attempts(r)
		return testcluster.AllRunning(r) && now["map[0]"].Number == 1
	})
	now := testcluster.Attempts(after)
	for _, k := range region0 {
		if now[k].Number != before[k].Number+1 || now[k].ID == before[k].ID {
			t.Errorf("%s: attempt %+v after the restart, was %+v", k, now[k], before[k])
		}
	}
	if changed := testcluster.Changed(pick(before, region1), now); len(changed) != 0 {
		t.Fatalf("region 1 restarted too: %v", changed)
	}
	if after.Restarts != 1 {
		t.Fatalf("restarts = %d, want 1", after.Restarts)
	}
	// map[0]'s earlier attempt ended FAILED with the injected cause, unless the failure of
	// sink[0], which reads from it and broke with it, reached the leader first: then map[0]
	// was being cancelled and its own failure completed the cancellation (Flink's rule, fsm
	// updateState), and sink[0]'s history shows the failure.
	hist := execution(t, after, "map", 0).History
	if len(hist) == 0 {
		t.Fatal("map[0] has no earlier attempt")
	}
	switch last := hist[len(hist)-1]; {
	case last.State == stFailed:
		if !strings.Contains(last.FailureCause, "injected failure") {
			t.Fatalf("map[0] failed with %q, not the injected failure", last.FailureCause)
		}
	default:
		sh := execution(t, after, "sink", 0).History
		if len(sh) == 0 || sh[len(sh)-1].State != stFailed {
			t.Fatalf("neither map[0] (%v) nor sink[0] (%v) shows the failure", hist, sh)
		}
	}

	// The strategy allows one restart: the next failure fails the job.
	failOn("source[1]", now["source[1]"])
	final := c.WaitJob(id, "job FAILED with every task terminal", 20*time.Second,
		allInState(jobFailed, stFailed, stCanceled))
	if !strings.Contains(final.FailureCause, "exhausted") {
		t.Errorf("failure cause %q does not say the restarts are exhausted", final.FailureCause)
	}
	testcluster.WaitFor(t, 10*time.Second, "every slot free", func() (bool, string) {
		var seen []string
		ok := true
		for _, tm := range c.TMs {
			free := tm.A.TM.FreeSlots()
			ok = ok && free == c.Opts.Slots
			seen = append(seen, fmt.Sprintf("%s:%d free", tm.ID, free))
		}
		return ok, strings.Join(seen, " ")
	})
}
