package agent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/testkit/benchgoal"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// cancelJob cancels a job and waits until it is CANCELED and every slot is free again.
func cancelJob(t *testing.T, c *testcluster.Cluster, id string) {
	t.Helper()
	// Asked again through a leader change (a loaded machine may see an election).
	testcluster.WaitFor(t, time.Minute, "the job's cancellation accepted", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := c.Client(c.Leader()).CancelJob(ctx, &pb.CancelJobRequest{JobId: id})
		return err == nil, fmt.Sprint(err)
	})
	c.WaitJob(id, "CANCELED", time.Minute, func(r *pb.JobRecord) bool { return r.Status == pb.JobStatus_JOB_STATUS_CANCELED })
	testcluster.WaitFor(t, time.Minute, "every slot free again", func() (bool, string) {
		n := int32(0)
		for _, u := range c.Leader().A.State.SlotsUsed() {
			n += u
		}
		return n == 0, fmt.Sprintf("%d slots used", n)
	})
}

// TestGoalLatencyWithCheckpoints (JMC_GOALS=full only, `make bench`): the latency goal's job
// on the same cluster, first without checkpoints, then checkpointed every second, a 10 s
// window each: record latency in the checkpointed window against the uncheckpointed one; the
// records that reached the sink while a checkpoint was in flight (between its trigger and its
// completion, the leader's timestamps) against the others; and committed-output visibility:
// for each record, the completion of the first checkpoint triggered after the record's
// emission minus that emission. That checkpoint's barrier follows the record on every FORWARD
// channel, so the sink commits the record with it (a record emitted in the moment between the
// trigger and its barrier's injection at the source is counted against the next checkpoint:
// an upper bound; and the sink's own commit follows the completion by a notification). Then
// the 10 s around one checkpoint of the job checkpointed every 20 s (latencyAroundACheckpoint).
// Logged, without a goal.
func TestGoalLatencyWithCheckpoints(t *testing.T) {
	benchgoal.Skip(t)
	if !benchgoal.Full() {
		t.Skip("JMC_GOALS=full only (make bench)")
	}
	c, log := latencyCluster(t)
	id, _ := startLatencyJob(t, c, log, "latency", 0, 3*time.Second)
	from, cpu0 := time.Now(), processCPU(t)
	waitUntil(t, from.Add(latencyWindow), "the uncheckpointed window")
	steady := statsOf(latencies(log.between(from, time.Now())))
	t.Logf("without checkpoints, 10 s window: %s; the process used %.2f cores", steady, (processCPU(t)-cpu0).Seconds()/time.Since(from).Seconds())
	cancelJob(t, c, id)

	id, attempts := startLatencyJob(t, c, log, "latency, checkpointed", 1000, 3*time.Second)
	from, cpu0 = time.Now(), processCPU(t)
	waitUntil(t, from.Add(latencyWindow), "the checkpointed window")
	to := time.Now()
	cores := (processCPU(t) - cpu0).Seconds() / to.Sub(from).Seconds()
	samples := log.between(from, to)
	// Wait for the checkpoint after the window's last emission to complete.
	var cps []*pb.CheckpointRecord
	testcluster.WaitFor(t, time.Minute, "a checkpoint triggered after the window completed", func() (bool, string) {
		cp, _ := c.Leader().A.State.Checkpoints(id)
		cps = cp.GetCompleted()
		if n := len(cps); n > 0 && cps[n-1].TriggerUnixMs > to.UnixMilli() {
			return true, ""
		}
		return false, fmt.Sprintf("%d checkpoints completed", len(cps))
	})
	var inFlight, outside, visible []time.Duration
	aborted := 0
	if cp, _ := c.Leader().A.State.Checkpoints(id); cp != nil {
		for _, a := range cp.Aborted {
			if a.AbortUnixMs >= from.UnixMilli() && a.AbortUnixMs < to.UnixMilli() {
				aborted++
			}
		}
	}
	var durations []time.Duration
	for _, ck := range cps {
		if ck.TriggerUnixMs >= from.UnixMilli() && ck.CompleteUnixMs < to.UnixMilli() {
			durations = append(durations, time.Duration(ck.CompleteUnixMs-ck.TriggerUnixMs)*time.Millisecond)
		}
	}
	for _, s := range samples {
		at, em := s.at.UnixMilli(), s.emitted.UnixMilli()
		during := false
		for _, ck := range cps {
			if at >= ck.TriggerUnixMs && at <= ck.CompleteUnixMs {
				during = true
			}
		}
		if during {
			inFlight = append(inFlight, s.lat)
		} else {
			outside = append(outside, s.lat)
		}
		for _, ck := range cps {
			if ck.TriggerUnixMs > em {
				visible = append(visible, time.Duration(ck.CompleteUnixMs*int64(time.Millisecond)-s.emitted.UnixNano()))
				break
			}
		}
	}
	all := statsOf(latencies(samples))
	ratio := 0.0
	if steady.p99 > 0 {
		ratio = float64(all.p99) / float64(steady.p99)
	}
	t.Logf("checkpoints every 1 s, 10 s window: %s (p99 %.2fx the uncheckpointed steady p99 %s); "+
		"while a checkpoint was in flight: %s; outside: %s; committed-output visibility: %s; %d checkpoints in the window, trigger to completion %v, %d aborted; the process used %.2f cores",
		all, ratio, steady.p99.Round(time.Microsecond), statsOf(inFlight), statsOf(outside), statsOf(visible), len(durations), durations, aborted, cores)
	if restarted := testcluster.Changed(attempts, testcluster.Attempts(c.Job(id))); len(restarted) > 0 {
		t.Errorf("%d tasks restarted: %v", len(restarted), restarted[:min(len(restarted), 10)])
	}
	cancelJob(t, c, id)
	latencyAroundACheckpoint(t, c, log)
}

// latencyAroundACheckpoint: the job checkpointed every 20 s, the 10 s before one checkpoint's
// trigger against the 10 s from it (no other checkpoint in either), as the failover goal takes
// the 10 s around a leader kill. Logged, without a goal.
func latencyAroundACheckpoint(t *testing.T, c *testcluster.Cluster, log *latencyLog) {
	t.Helper()
	id, _ := startLatencyJob(t, c, log, "latency, a checkpoint every 20 s", 20_000, 3*time.Second)
	earliest := time.Now().Add(latencyWindow - 3*time.Second) // records flowed for 3 s already
	var ck *pb.CheckpointRecord
	testcluster.WaitFor(t, time.Minute, "a checkpoint triggered 10 s or more after records began to flow, completed", func() (bool, string) {
		cp, _ := c.Leader().A.State.Checkpoints(id)
		for _, r := range cp.GetCompleted() {
			if r.TriggerUnixMs >= earliest.UnixMilli() {
				ck = r
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d checkpoints completed", len(cp.GetCompleted()))
	})
	trigger := time.UnixMilli(ck.TriggerUnixMs)
	waitUntil(t, trigger.Add(latencyWindow), "the 10 s from the trigger")
	before := statsOf(latencies(log.between(trigger.Add(-latencyWindow), trigger)))
	after := statsOf(latencies(log.between(trigger, trigger.Add(latencyWindow))))
	t.Logf("a checkpoint every 20 s: the 10 s before checkpoint %d's trigger: %s; the 10 s from it: %s (p99 %.2fx); trigger to completion %s",
		ck.Id, before, after, float64(after.p99)/float64(max(before.p99, 1)), time.Duration(ck.CompleteUnixMs-ck.TriggerUnixMs)*time.Millisecond)
	cancelJob(t, c, id)
}
