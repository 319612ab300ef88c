package main

import (
	"fmt"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/jmcluster/jmcluster/testkit/testcluster"
)

// gathered reads one unlabelled gauge, or a histogram's sample count, from a registry's
// families; false when absent.
func gathered(fams []*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, l := range m.GetLabel() {
					found = found || (l.GetName() == labels[i] && l.GetValue() == labels[i+1])
				}
				if !found {
					continue next
				}
			}
			if h := m.GetHistogram(); h != nil {
				return float64(h.GetSampleCount()), true
			}
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// TestCheckpointMetricsFollowTheRecord: with a checkpointed keyed-sum job on two in-process
// TaskManagers, the leader's checkpoint gauges show the committed record (the completed count,
// the newest completion's id, its duration and the sum of its acknowledged sizes) and the
// TaskManagers' alignment histogram counts alignments; a follower shows the same counts.
func TestCheckpointMetricsFollowTheRecord(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{JMs: 3, TMs: 2, Checkpoints: true})
	jg := checkpointThroughputJob("checkpoint-metrics", 200)
	jg.Vertices[0].Operator.GetSequenceSource().RatePerSecond = 2000
	id := c.Submit(jg)
	c.WaitJob(id, "every task RUNNING", time.Minute, testcluster.AllRunning)
	testcluster.WaitFor(t, 30*time.Second, "the gauges showing the newest of three completed checkpoints", func() (bool, string) {
		leader := c.Leader()
		fams, err := leader.A.Metrics.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		cp, _ := leader.A.State.Checkpoints(id)
		if cp == nil || cp.CompletedCount < 3 {
			return false, "fewer than three completed"
		}
		last := cp.Completed[len(cp.Completed)-1]
		var size, align int64
		for _, a := range last.Acks {
			size += a.StateSizeBytes
			align = max(align, a.AlignmentUs)
		}
		lastID, _ := gathered(fams, "jmcluster_checkpoint_last_completed_id")
		took, _ := gathered(fams, "jmcluster_checkpoint_last_duration_seconds")
		bytes, _ := gathered(fams, "jmcluster_checkpoint_last_size_bytes")
		aligned, _ := gathered(fams, "jmcluster_checkpoint_last_alignment_seconds")
		completed, _ := gathered(fams, "jmcluster_checkpoints", "status", "completed")
		seen := fmt.Sprintf("gauges: id %v duration %v s size %v alignment %v s completed %v; record: id %d duration %d ms size %d alignment %d µs completed %d",
			lastID, took, bytes, aligned, completed, last.Id, last.CompleteUnixMs-last.TriggerUnixMs, size, align, cp.CompletedCount)
		return lastID == float64(last.Id) && took == float64(last.CompleteUnixMs-last.TriggerUnixMs)/1000 && bytes == float64(size) &&
			aligned == float64(align)/1e6 && completed == float64(cp.CompletedCount) && size > 0, seen
	})
	follower := c.Follower()
	testcluster.WaitFor(t, 10*time.Second, "a follower's counts equal to its record's", func() (bool, string) {
		fams, err := follower.A.Metrics.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		cp, _ := follower.A.State.Checkpoints(id)
		completed, _ := gathered(fams, "jmcluster_checkpoints", "status", "completed")
		aborted, _ := gathered(fams, "jmcluster_checkpoints", "status", "aborted")
		return cp != nil && completed == float64(cp.CompletedCount) && aborted == float64(cp.AbortedCount),
			fmt.Sprintf("gauges completed %v aborted %v; record %v", completed, aborted, cp)
	})
	// The completed count first: every alignment of a completed checkpoint was observed before
	// its task acknowledged it.
	cp, _ := c.Leader().A.State.Checkpoints(id)
	var alignments float64
	for _, tm := range c.TMs {
		fams, err := tm.A.Metrics.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		n, _ := gathered(fams, "jmcluster_tm_checkpoint_alignment_seconds")
		alignments += n
	}
	// Each completed checkpoint was aligned by the four tasks with inputs (sum and sink).
	if alignments < 4*float64(cp.GetCompletedCount()) {
		t.Fatalf("%v alignments on the TaskManagers, want at least 4 per completed checkpoint (%d completed)", alignments, cp.GetCompletedCount())
	}
}
