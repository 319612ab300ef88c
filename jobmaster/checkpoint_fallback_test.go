package jobmaster_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/checkpoint"
	"github.com/jmcluster/jmcluster/operator"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestDamagedCheckpointFallsBackToThePreviousOne: a checkpoint every 300 ms, three retained;
// the TaskManager of region 0 is killed and, while it is down, a bit of sum[0]'s state is
// flipped in the newest completed checkpoint (and in any newer state directory, should one
// complete meanwhile). The region's restore from it fails, naming the checkpoint and the file;
// the leader restores the whole region from the previous retained checkpoint, region 1 never
// restarts, and each sink's committed output still holds every record of its region once, with
// the per-key sums computed here.
func TestDamagedCheckpointFallsBackToThePreviousOne(t *testing.T) {
	const keys = 4
	c := testcluster.New(t, testcluster.Options{JMs: 3, TMs: 3, Checkpoints: true})
	jg := keyedSumChains("damaged-checkpoint", keys, 300)
	jg.CheckpointConfig.Retained = 3
	id := c.Submit(jg)
	before := testcluster.Attempts(waitAllRunning(t, c, id))
	if before["source[0]"].TM == before["source[1]"].TM {
		t.Fatalf("both regions on %s: %v", before["source[0]"].TM, before)
	}
	testcluster.WaitFor(t, 30*time.Second, "three completed checkpoints", func() (bool, string) {
		ck, ok := c.Leader().A.State.LatestCompletedCheckpoint(id)
		return ok && ck.GetId() >= 3, describeCheckpoints(checkpointsOf(c, id))
	})

	victim := before["source[0]"].TM
	c.KillTM(tmByID(t, c, victim))
	newest, _ := c.Leader().A.State.LatestCompletedCheckpoint(id)
	ack := findAckOf(newest, "sum", 0)
	if ack == nil {
		t.Fatalf("checkpoint %d has no state of sum[0]", newest.GetId())
	}
	damaged := map[string]bool{}
	for n := newest.GetId(); ; n++ {
		dir, err := checkpoint.CheckpointDir(id, n)
		if err != nil {
			t.Fatal(err)
		}
		matches, _ := filepath.Glob(filepath.Join(c.CheckpointDir, dir, "sum-0-*.state"))
		if len(matches) == 0 && n > newest.GetId() {
			break
		}
		for _, m := range matches {
			flipLastPayloadBit(t, m)
			rel, _ := filepath.Rel(c.CheckpointDir, m)
			damaged[filepath.ToSlash(rel)] = true
		}
	}
	if !damaged[ack.GetStatePath()] {
		t.Fatalf("damaged %v, not checkpoint %d's %s", damaged, newest.GetId(), ack.GetStatePath())
	}

	// The region restarts once from the damaged checkpoint (its restore fails, naming the
	// file), then from an older one, and runs.
	var failure checkpoint.RestoreFailure
	after := c.WaitJob(id, "region 0 restored past the damaged checkpoint, every task RUNNING", 90*time.Second, func(r *pb.JobRecord) bool {
		failure = checkpoint.RestoreFailure{}
		for _, ev := range testcluster.Executions(r) {
			for _, h := range append(append([]*pb.Execution(nil), ev.GetHistory()...), ev.GetCurrent()) {
				if f, ok := checkpoint.ParseRestoreFailure(h.GetFailureCause()); ok && failure.Checkpoint == 0 {
					failure = f
				}
			}
		}
		return failure.Checkpoint != 0 && testcluster.AllRunning(r)
	})
	if !damaged[failure.Path] {
		t.Fatalf("the restore failure names %s (checkpoint %d), not a damaged file %v: %s", failure.Path, failure.Checkpoint, damaged, failure.Cause)
	}
	if !strings.Contains(failure.Cause, "checksum mismatch") {
		t.Fatalf("the restore failure does not give the cause: %s", failure.Cause)
	}
	t.Logf("restore failure: %s", failure.Cause)
	now := testcluster.Attempts(after)
	for _, k := range []string{"source[1]", "sum[1]", "sink[1]"} {
		if now[k] != before[k] {
			t.Fatalf("region 1 restarted: %s was %+v, now %+v", k, before[k], now[k])
		}
	}
	if after.GetStatus() != pb.JobStatus_JOB_STATUS_RUNNING {
		t.Fatalf("job %s: %s", after.GetStatus(), after.GetFailureCause())
	}

	// The committed output never goes back: while the region replays what it had committed
	// at the damaged checkpoint, every document committed on another TaskManager holds at
	// least what the killed one's did (the restored sink holds its commits until it does).
	var dead operator.Checksum
	for _, tm := range c.TMs {
		if tm.ID == victim {
			dead, _ = operator.ReadChecksum(filepath.Join(tm.WorkDir, fmt.Sprintf("checksum-%s-0.json", id)))
		}
	}
	regressions, seen := 0, map[uint64]bool{}
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		for _, tm := range c.TMs {
			if tm.ID == victim {
				continue
			}
			d, err := operator.ReadChecksum(filepath.Join(tm.WorkDir, fmt.Sprintf("checksum-%s-0.json", id)))
			if err != nil || seen[d.CommittedCheckpoint] || d.CommittedCheckpoint <= dead.CommittedCheckpoint {
				continue
			}
			seen[d.CommittedCheckpoint] = true
			if d.Count < dead.Count {
				regressions++
				t.Errorf("sink[0] on %s committed checkpoint %d with %d records, fewer than the %d of checkpoint %d on %s", tm.ID, d.CommittedCheckpoint, d.Count, dead.Count, dead.CommittedCheckpoint, victim)
			}
		}
		time.Sleep(10 * time.Millisecond) // sampling the committed files, not waiting for a condition
	}
	t.Logf("sink[0] on %s had committed checkpoint %d (%d records); %d later commits sampled, %d behind it", victim, dead.CommittedCheckpoint, dead.Count, len(seen), regressions)

	// Checkpoints complete again, and the committed output is exactly once.
	last := uint64(0)
	testcluster.WaitFor(t, 30*time.Second, "two checkpoints completed after the fallback", func() (bool, string) {
		ck, ok := c.Leader().A.State.LatestCompletedCheckpoint(id)
		last = ck.GetId()
		return ok && ck.GetId() >= failure.Checkpoint+2, describeCheckpoints(checkpointsOf(c, id))
	})
	for sub := range 2 {
		testcluster.WaitFor(t, 30*time.Second, fmt.Sprintf("sink[%d]'s output committed at checkpoint %d", sub, last), func() (bool, string) {
			d, on := committedDoc(t, c, id, sub)
			return d.CommittedCheckpoint >= last, fmt.Sprintf("committed %d on %s", d.CommittedCheckpoint, on)
		})
		d, on := committedDoc(t, c, id, sub)
		checkKeyedSums(t, fmt.Sprintf("sink[%d] committed at checkpoint %d on %s", sub, d.CommittedCheckpoint, on), d, sub, keys)
		t.Logf("sink[%d]: %d records committed at checkpoint %d on %s, attempts %v", sub, d.Count, d.CommittedCheckpoint, on, d.Attempts)
	}
}

// TestNoUsableCheckpointFailsTheJob: one checkpoint retained (the default); its state of sum[0]
// is damaged while region 0's TaskManager is down. The region's restore fails once, and the
// job FAILS with a cause naming the file: it never restarts the region from nothing (its sinks
// committed output).
func TestNoUsableCheckpointFailsTheJob(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{JMs: 3, TMs: 3, Checkpoints: true})
	id := c.Submit(keyedSumChains("no-usable-checkpoint", 4, 300))
	before := testcluster.Attempts(waitAllRunning(t, c, id))
	testcluster.WaitFor(t, 30*time.Second, "two completed checkpoints", func() (bool, string) {
		ck, ok := c.Leader().A.State.LatestCompletedCheckpoint(id)
		return ok && ck.GetId() >= 2, describeCheckpoints(checkpointsOf(c, id))
	})
	c.KillTM(tmByID(t, c, before["source[0]"].TM))
	newest, _ := c.Leader().A.State.LatestCompletedCheckpoint(id)
	for n := newest.GetId(); ; n++ {
		dir, _ := checkpoint.CheckpointDir(id, n)
		matches, _ := filepath.Glob(filepath.Join(c.CheckpointDir, dir, "sum-0-*.state"))
		if len(matches) == 0 && n > newest.GetId() {
			break
		}
		for _, m := range matches {
			flipLastPayloadBit(t, m)
		}
	}
	failed := c.WaitJob(id, "the job FAILED", 60*time.Second, func(r *pb.JobRecord) bool {
		return r.GetStatus() == pb.JobStatus_JOB_STATUS_FAILED
	})
	cause := failed.GetFailureCause()
	if !strings.HasPrefix(cause, "checkpoint restore refused: no usable checkpoint for region") || !strings.Contains(cause, "/sum-0-") {
		t.Fatalf("the job failed with %q, want a refused restore naming sum[0]'s file", cause)
	}
	if failed.GetRestarts() > 2 {
		t.Fatalf("%d restarts before the job failed: the damaged checkpoint was tried again", failed.GetRestarts())
	}
	t.Logf("job FAILED after %d restarts: %s", failed.GetRestarts(), cause)
}

// findAckOf returns the acknowledgement of vertex[subtask] in ck, or nil.
func findAckOf(ck *pb.CheckpointRecord, vertex string, subtask int32) *pb.TaskCheckpointAck {
	for _, a := range ck.GetAcks() {
		if a.GetVertexId() == vertex && a.GetSubtaskIndex() == subtask {
			return a
		}
	}
	return nil
}

// flipLastPayloadBit flips the lowest bit of a state file's last byte (in the payload): the
// file keeps its length and header, only the CRC-32C tells.
func flipLastPayloadBit(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) <= checkpoint.HeaderSize {
		t.Fatalf("%s: %d bytes, no payload", path, len(b))
	}
	b[len(b)-1] ^= 1
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
