package jobmaster_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/operator"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// committedDoc is the newest committed document of a sink subtask across every TaskManager's
// work dir (a region restarted elsewhere continues its document there), and the TM it is on.
func committedDoc(t *testing.T, c *testcluster.Cluster, jobID string, subtask int) (operator.Checksum, string) {
	t.Helper()
	var best operator.Checksum
	on := ""
	for _, tm := range c.TMs {
		cs, err := operator.ReadChecksum(filepath.Join(tm.WorkDir, fmt.Sprintf("checksum-%s-%d.json", jobID, subtask)))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if on == "" || cs.CommittedCheckpoint > best.CommittedCheckpoint {
			best, on = cs, tm.ID
		}
	}
	return best, on
}

// checkKeyedSums fails unless doc accounts origin `origin` exactly once from seq 0 on, with
// the per-key counts and sums of running sums of values 0..last (keys v % keys).
func checkKeyedSums(t *testing.T, what string, doc operator.Checksum, origin int, keys int64) {
	t.Helper()
	o, ok := doc.Origins[strconv.Itoa(origin)]
	if !ok || o.FirstSeq != 0 || o.Gaps != 0 || o.Duplicates != 0 || o.Count != o.LastSeq+1 || doc.Count != o.Count {
		t.Fatalf("%s: origin %d %+v, %d records in all (committed checkpoint %d, attempts %v): want every seq 0..last once",
			what, origin, o, doc.Count, doc.CommittedCheckpoint, doc.Attempts)
	}
	want := map[int64]operator.KeyStat{}
	running := map[int64]int64{}
	for v := int64(0); v <= o.LastSeq; v++ {
		k := v % keys
		running[k] += v
		ks := want[k]
		ks.Count++
		ks.Sum += running[k]
		want[k] = ks
	}
	for k := int64(0); k < keys; k++ {
		if got := doc.Keys[strconv.FormatInt(k, 10)]; got != want[k] {
			t.Fatalf("%s: key %d %+v, want %+v (seqs 0..%d)", what, k, got, want[k], o.LastSeq)
		}
	}
}

// TestCommittedOutputExactlyOnceAcrossTMAndLeaderFailures: a keyed-sum job with checkpoints
// every 500 ms; the TaskManager of one region is killed, then the leader. Each sink's committed
// output (its newest committed document, wherever its region runs now) holds every record of
// its region exactly once, no gap, no duplicate, and its per-key sums are the ones computed
// here; the region the TM kill did not touch kept its attempts through both failures.
func TestCommittedOutputExactlyOnceAcrossTMAndLeaderFailures(t *testing.T) {
	const keys = 4
	c := testcluster.New(t, testcluster.Options{JMs: 3, TMs: 3, Checkpoints: true})
	id := c.Submit(keyedSumChains("exactly-once", keys, 500))
	before := testcluster.Attempts(waitAllRunning(t, c, id))
	completed := func(n uint64) func() (bool, string) {
		return func() (bool, string) {
			ck, ok := c.Leader().A.State.LatestCompletedCheckpoint(id)
			return ok && ck.GetId() >= n, describeCheckpoints(checkpointsOf(c, id))
		}
	}
	testcluster.WaitFor(t, 30*time.Second, "two completed checkpoints", completed(2))

	victim := before["source[0]"].TM
	c.KillTM(tmByID(t, c, victim))
	c.WaitJob(id, "region 0 restarted and every task RUNNING", 60*time.Second, func(r *pb.JobRecord) bool {
		return testcluster.AllRunning(r) && testcluster.Attempts(r)["source[0]"].Number > before["source[0]"].Number
	})
	ck, _ := c.Leader().A.State.LatestCompletedCheckpoint(id)
	testcluster.WaitFor(t, 30*time.Second, "a checkpoint completed after the restart", completed(ck.GetId()+1))

	leader := c.Leader()
	c.KillJM(leader)
	next := c.Leader()
	if next == leader {
		t.Fatal("no new leader")
	}
	ck, _ = next.A.State.LatestCompletedCheckpoint(id)
	testcluster.WaitFor(t, 30*time.Second, "two checkpoints completed by the new leader", completed(ck.GetId()+2))
	after := testcluster.Attempts(c.WaitJob(id, "every task RUNNING", 30*time.Second, testcluster.AllRunning))
	for _, k := range []string{"source[1]", "sum[1]", "sink[1]"} {
		if after[k] != before[k] {
			t.Fatalf("region 1 restarted: %s was %+v, now %+v", k, before[k], after[k])
		}
	}
	last, _ := next.A.State.LatestCompletedCheckpoint(id)
	for sub := range 2 {
		var doc operator.Checksum
		var on string
		testcluster.WaitFor(t, 30*time.Second, fmt.Sprintf("sink[%d]'s output committed at checkpoint %d", sub, last.GetId()), func() (bool, string) {
			doc, on = committedDoc(t, c, id, sub)
			return doc.CommittedCheckpoint >= last.GetId(), fmt.Sprintf("committed %d on %s", doc.CommittedCheckpoint, on)
		})
		checkKeyedSums(t, fmt.Sprintf("sink[%d] committed at checkpoint %d on %s", sub, doc.CommittedCheckpoint, on), doc, sub, keys)
		t.Logf("sink[%d]: %d records committed at checkpoint %d on %s, attempts %v", sub, doc.Count, doc.CommittedCheckpoint, on, doc.Attempts)
	}
}
