package jobmaster_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestNoRedeployWithoutAMajorityOfThePool: two of three TaskManagers go silent (their servers
// stop, their gossip stays alive, as for TMs cut off from the JobMasters). The leader still
// hears one TM of three: no strict majority of the pool, so it cannot know the silent ones
// stopped their tasks, and it redeploys none of their attempts — for three heartbeat timeouts
// here, until proof of death or the grace in general — although it declares them lost. One of
// them comes back (a new process): two of three heartbeat, and once the redeploy delay has run
// the held regions restart and the job runs.
func TestNoRedeployWithoutAMajorityOfThePool(t *testing.T) {
	c := newCluster(t)
	id := c.Submit(sourceSink("no-majority", 3, 100))
	rec := waitAllRunning(t, c, id)
	before := testcluster.Attempts(rec)
	silent := []*testcluster.TM{c.TMs[0], c.TMs[1]}
	for _, tm := range silent {
		c.SilenceTM(tm)
	}
	hbTimeout := c.Opts.HeartbeatTimeout
	l := c.Leader()
	// Lost by heartbeat silence (or gossip), their attempts FAILED, but nothing redeployed.
	testcluster.WaitFor(t, 4*hbTimeout, "the silent TMs' attempts failed", func() (bool, string) {
		r := c.Job(id)
		for k, a := range testcluster.Attempts(r) {
			if (a.TM == silent[0].ID || a.TM == silent[1].ID) && before[k].ID == a.ID && stateOf(r, k) != pb.ExecutionState_EXECUTION_STATE_FAILED && stateOf(r, k) != pb.ExecutionState_EXECUTION_STATE_CANCELED {
				return false, testcluster.Describe(r)
			}
		}
		return true, ""
	})
	held := time.Now()
	for time.Since(held) < 3*hbTimeout {
		r := c.Job(id)
		for k, a := range testcluster.Attempts(r) {
			if before[k].TM != c.TMs[2].ID && a.ID != before[k].ID {
				t.Fatalf("%s was redeployed (%v -> %v) while only 1 of 3 pool members heartbeats: %s", k, before[k], a, testcluster.Describe(r))
			}
		}
		time.Sleep(c.Opts.HeartbeatTimeout / 10) // polling a bounded protocol window, not waiting for a state
	}
	// One comes back: a majority heartbeats again.
	c.KillTM(silent[0])
	c.StartTM(silent[0])
	after := c.WaitJob(id, "the held regions restarted and the job RUNNING", 6*hbTimeout, func(r *pb.JobRecord) bool {
		if !testcluster.AllRunning(r) {
			return false
		}
		for k, a := range testcluster.Attempts(r) {
			if before[k].TM != c.TMs[2].ID && a.ID == before[k].ID {
				return false
			}
		}
		return true
	})
	t.Logf("leader %s; after: %s", l.ID, testcluster.Describe(after))
}

// stateOf is the state of the current execution of "vertex[subtask]".
func stateOf(rec *pb.JobRecord, key string) pb.ExecutionState {
	for _, ev := range testcluster.Executions(rec) {
		if fmt.Sprintf("%s[%d]", ev.VertexId, ev.SubtaskIndex) == key {
			return ev.GetCurrent().GetState()
		}
	}
	return pb.ExecutionState_EXECUTION_STATE_UNSPECIFIED
}
