package jobmaster_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// regionHomes checks that every region of the job runs in one slot of one TM (slot sharing:
// subtask i of each vertex, so every FORWARD edge is TM-local) and returns each region's TM.
func regionHomes(t *testing.T, rec *pb.JobRecord, regions [][]string) []string {
	t.Helper()
	homes := make([]string, len(regions))
	for i, r := range regions {
		slots := map[string]bool{}
		for _, k := range r {
			var v string
			var s int32
			fmt.Sscanf(strings.Replace(k, "[", " ", 1), "%s %d]", &v, &s)
			e := execution(t, rec, v, s).Current
			slots[fmt.Sprintf("%s/%d", e.Slot.TmId, e.Slot.Index)] = true
			homes[i] = e.Slot.TmId
		}
		if len(slots) != 1 {
			t.Fatalf("region %d %v is in slots %v, want one slot of one TM: %v", i, r, slots, testcluster.Attempts(rec))
		}
	}
	return homes
}

// TestTaskManagerLossRestartsOnlyTheRegionsItHeld: the demo's job (source -> map -> sink,
// FORWARD, parallelism 3) on three TMs of four slots runs one region per TM, each region in
// one shared slot; killing one TM restarts exactly the region it held — a third of the job:
// its three tasks get attempt number + 1 on a remaining TM (again in one slot), the job counts
// one restart, the history of each of its tasks ends in FAILED naming the lost TM, the TMs
// start no other task again, and the other two regions keep their attempts.
func TestTaskManagerLossRestartsOnlyTheRegionsItHeld(t *testing.T) {
	c := newCluster(t)
	id := c.Submit(testcluster.StreamingChain("demo-shaped", 3, 200, 0))
	rec := waitAllRunning(t, c, id)
	regions := regionKeys(t, rec.JobGraph)
	before := testcluster.Attempts(rec)
	homes := regionHomes(t, rec, regions)
	if sorted := slices.Sorted(slices.Values(homes)); !slices.Equal(sorted, []string{"tm1", "tm2", "tm3"}) {
		t.Fatalf("regions on %v, want one region on each of tm1, tm2, tm3: %v", homes, before)
	}
	t.Logf("placement: %v (region i on homes[i])", homes)

	victim := homes[1]
	held, kept := regions[1], append(slices.Clone(regions[0]), regions[2]...)
	c.KillTM(tmByID(t, c, victim))
	t.Logf("killed %s, which held region 1 %v", victim, held)

	after := c.WaitJob(id, "region 1 restarted on a remaining TM", 30*time.Second, func(r *pb.JobRecord) bool {
		now := testcluster.Attempts(r)
		for _, k := range held {
			if now[k].Number != before[k].Number+1 || now[k].TM == victim {
				return false
			}
		}
		return r.Status == pb.JobStatus_JOB_STATUS_RUNNING && testcluster.AllRunning(r)
	})
	now := testcluster.Attempts(after)
	if changed := testcluster.Changed(pick(before, kept), now); len(changed) != 0 {
		t.Fatalf("tasks of regions the lost TM did not hold restarted: %v\nbefore %v\nafter  %v", changed, before, now)
	}
	if changed := testcluster.Changed(before, now); len(changed) != len(held) {
		t.Fatalf("%d of %d tasks restarted (%v), want the %d of region 1", len(changed), len(before), changed, len(held))
	}
	if after.Restarts != 1 {
		t.Fatalf("job restarts %d, want 1 (one region restart)", after.Restarts)
	}
	regionHomes(t, after, regions)
	for _, k := range held {
		var v string
		var s int32
		fmt.Sscanf(strings.Replace(k, "[", " ", 1), "%s %d]", &v, &s)
		h := execution(t, after, v, s).History
		if len(h) == 0 || h[len(h)-1].AttemptId != before[k].ID || h[len(h)-1].State != stFailed || !strings.Contains(h[len(h)-1].FailureCause, victim) {
			t.Fatalf("%s: history %v, want its attempt %s FAILED naming %s last", k, h, before[k].ID, victim)
		}
	}
	// The TMs' own event logs: the tasks started again are region 1's, nothing else.
	var want []string
	for _, k := range held {
		want = append(want, fmt.Sprintf("%s#1 on %s", k, now[k].TM))
	}
	testcluster.WaitFor(t, 10*time.Second, "the TMs' start events of attempt number 1", func() (bool, string) {
		got := c.Restarted(id)
		slices.Sort(got)
		slices.Sort(want)
		return slices.Equal(got, want), fmt.Sprintf("got %v, want %v", got, want)
	})
}

// TestTaskManagerLossIsOneRestart: a TM holding two regions of six is lost; both regions
// restart together, counted as one restart of the strategy, so a job allowed one restart
// survives the loss of a TM however many regions it held (it failed, "restart strategy
// exhausted", when each region counted one).
func TestTaskManagerLossIsOneRestart(t *testing.T) {
	c := newCluster(t)
	jg := testcluster.StreamingChain("two-per-tm", 6, 100, 0)
	jg.RestartStrategy = &pb.RestartStrategy{Kind: pb.RestartKind_RESTART_KIND_FIXED_DELAY, Attempts: 1, DelayMs: 100}
	id := c.Submit(jg)
	rec := waitAllRunning(t, c, id)
	regions := regionKeys(t, rec.JobGraph)
	before := testcluster.Attempts(rec)
	homes := regionHomes(t, rec, regions)
	victim := homes[0]
	var held []string
	for i, r := range regions {
		if homes[i] == victim {
			held = append(held, r...)
		}
	}
	if len(held) != 6 {
		t.Fatalf("%s holds %v, want two regions of three tasks (placement %v)", victim, held, homes)
	}
	c.KillTM(tmByID(t, c, victim))
	after := c.WaitJob(id, "both regions of the lost TM restarted", 30*time.Second, func(r *pb.JobRecord) bool {
		now := testcluster.Attempts(r)
		for _, k := range held {
			if now[k].Number != before[k].Number+1 {
				return r.Status == pb.JobStatus_JOB_STATUS_FAILED
			}
		}
		return r.Status == pb.JobStatus_JOB_STATUS_RUNNING && testcluster.AllRunning(r)
	})
	if after.Status != pb.JobStatus_JOB_STATUS_RUNNING || after.Restarts != 1 {
		t.Fatalf("job %s with %d restarts (cause %q), want RUNNING after one restart", testcluster.Describe(after), after.Restarts, after.FailureCause)
	}
	if changed := testcluster.Changed(before, testcluster.Attempts(after)); len(changed) != len(held) {
		t.Fatalf("restarted %v, want the %d tasks of %s's two regions %v", changed, len(held), victim, held)
	}
	regionHomes(t, after, regions)
}
