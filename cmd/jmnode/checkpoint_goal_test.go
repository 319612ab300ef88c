package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/jmcluster/jmcluster/testkit/benchgoal"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// checkpointThroughputJob is the keyed-sum topology the throughput goal runs: an unbounded
// sequence source without a rate limit (as fast as it goes) -> ALL_TO_ALL (by key) ->
// key_by_sum -> FORWARD -> checksum sink, each of parallelism 2: every sum subtask reads two
// channels, so its barriers align. With intervalMs > 0 it is checkpointed that often (every
// completed checkpoint retained, for the durations).
func checkpointThroughputJob(name string, intervalMs int64) *pb.JobGraph {
	jg := &pb.JobGraph{
		Name: name, Type: pb.JobType_JOB_TYPE_STREAMING,
		Vertices: []*pb.JobVertex{
			{Id: "source", Parallelism: 2, Operator: &pb.Operator{Kind: &pb.Operator_SequenceSource{SequenceSource: &pb.SequenceSource{Keys: 64}}}},
			{Id: "sum", Parallelism: 2, Operator: &pb.Operator{Kind: &pb.Operator_KeyBySum{KeyBySum: &pb.KeyBySumOperator{}}}},
			{Id: "sink", Parallelism: 2, Operator: &pb.Operator{Kind: &pb.Operator_ChecksumSink{ChecksumSink: &pb.ChecksumSink{Path: "checksum-{job}-{subtask}.json"}}}},
		},
		Edges: []*pb.JobEdge{
			{Source: "source", Target: "sum", Distribution: pb.Distribution_DISTRIBUTION_ALL_TO_ALL, ResultType: pb.ResultType_RESULT_TYPE_PIPELINED},
			{Source: "sum", Target: "sink", Distribution: pb.Distribution_DISTRIBUTION_FORWARD, ResultType: pb.ResultType_RESULT_TYPE_PIPELINED},
		},
		RestartStrategy: &pb.RestartStrategy{Kind: pb.RestartKind_RESTART_KIND_NONE},
	}
	if intervalMs > 0 {
		jg.CheckpointConfig = &pb.CheckpointConfig{IntervalMs: intervalMs, Retained: 100}
	}
	return jg
}

// throughputTrial is what one trial measured.
type throughputTrial struct {
	checkpointed bool
	recordsPerS  float64
	perCPUSecond float64         // records per CPU second of this process (every JobMaster and TaskManager of the cluster)
	cpuShare     float64         // the process's CPU over the window, in cores
	durations    []time.Duration // checkpoints completed in the window, trigger to completion
	aborted      int             // checkpoints aborted in the window
	alignments   uint64          // alignments completed in the window, on every TM
	alignSum     time.Duration
	placement    string
}

// sinkRecords sums the records the job's sink tasks read, on every TaskManager (TaskIOs).
func sinkRecords(c *testcluster.Cluster, jobID string) int64 {
	var n int64
	for _, tm := range c.TMs {
		for _, io := range tm.A.TM.TaskIOs() {
			if io.JobID == jobID && io.VertexID == "sink" {
				n += io.RecordsIn
			}
		}
	}
	return n
}

// alignmentTotals sums every TaskManager's alignment histogram (its count and its sum).
func alignmentTotals(t *testing.T, c *testcluster.Cluster) (uint64, time.Duration) {
	t.Helper()
	var n uint64
	var sum float64
	for _, tm := range c.TMs {
		fams, err := tm.A.Metrics.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			if f.GetName() == "jmcluster_tm_checkpoint_alignment_seconds" {
				for _, m := range f.GetMetric() {
					n += m.GetHistogram().GetSampleCount()
					sum += m.GetHistogram().GetSampleSum()
				}
			}
		}
	}
	return n, time.Duration(sum * float64(time.Second))
}

// TestGoalCheckpointThroughput (JMC_GOALS=1, `make bench-short`): records per second through
// the keyed-sum job (checkpointThroughputJob) on two in-process TaskManagers (three
// JobMasters, one checkpoint root), without checkpoints and with a checkpoint every second, in
// alternating trials on the same cluster: each trial submits its job, waits until every task
// runs, lets it warm up, counts the sinks' records (the TaskManagers' TaskIOs) over a fixed
// window, and cancels it. Goal: the median checkpointed rate is at least 0.9 x the median
// rate without. Also reported, without a target: the durations (trigger to completion) of the
// checkpoints completed in the windows and the mean barrier alignment (the TaskManagers'
// jmcluster_tm_checkpoint_alignment_seconds). JMC_CHECKPOINT_PPROF=DIR writes a CPU profile
// of the process over each window (DIR/<kind>-<trial>.pprof).
func TestGoalCheckpointThroughput(t *testing.T) {
	benchgoal.Skip(t)
	trials := benchgoal.Trials(3, 6)
	warmUp := time.Duration(benchgoal.Trials(2, 3)) * time.Second
	window := time.Duration(benchgoal.Trials(5, 10)) * time.Second
	profDir := os.Getenv("JMC_CHECKPOINT_PPROF")
	c := testcluster.New(t, testcluster.Options{JMs: 3, TMs: 2, Slots: 4, Checkpoints: true, LogLevel: hclog.Info})
	leader := func() pb.ClientServiceClient { return c.Client(c.Leader()) }

	run := func(k int, checkpointed bool) throughputTrial {
		t.Helper()
		kind, interval := "none", int64(0)
		if checkpointed {
			kind, interval = "checkpointed", 1000
		}
		tr := throughputTrial{checkpointed: checkpointed}
		id := c.Submit(checkpointThroughputJob(fmt.Sprintf("throughput-%s-%d", kind, k), interval))
		rec := c.WaitJob(id, "every task RUNNING", time.Minute, testcluster.AllRunning)
		onTM := map[string][]string{}
		for key, a := range testcluster.Attempts(rec) {
			onTM[a.TM] = append(onTM[a.TM], key)
		}
		for _, tm := range slices.Sorted(maps.Keys(onTM)) {
			slices.Sort(onTM[tm])
			tr.placement += fmt.Sprintf(" %s: %s;", tm, strings.Join(onTM[tm], " "))
		}
		var flowing time.Time
		testcluster.WaitFor(t, warmUp+time.Minute, "records at the sinks, then the warm-up", func() (bool, string) {
			n := sinkRecords(c, id)
			if n > 0 && flowing.IsZero() {
				flowing = time.Now()
			}
			return !flowing.IsZero() && time.Since(flowing) >= warmUp, fmt.Sprintf("%d records at the sinks", n)
		})
		if profDir != "" {
			f, err := os.Create(filepath.Join(profDir, fmt.Sprintf("%s-%d.pprof", kind, k)))
			if err != nil {
				t.Fatal(err)
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				t.Fatal(err)
			}
			defer f.Close()
		}
		a0, s0 := alignmentTotals(t, c)
		t0, n0, cpu0 := time.Now(), sinkRecords(c, id), processCPU(t)
		testcluster.WaitFor(t, window+time.Minute, "the measurement window", func() (bool, string) {
			return time.Since(t0) >= window, ""
		})
		t1, n1, cpu1 := time.Now(), sinkRecords(c, id), processCPU(t)
		a1, s1 := alignmentTotals(t, c)
		if profDir != "" {
			pprof.StopCPUProfile()
		}
		tr.recordsPerS = float64(n1-n0) / t1.Sub(t0).Seconds()
		tr.perCPUSecond = float64(n1-n0) / (cpu1 - cpu0).Seconds()
		tr.cpuShare = (cpu1 - cpu0).Seconds() / t1.Sub(t0).Seconds()
		tr.alignments, tr.alignSum = a1-a0, s1-s0
		if cp, _ := c.Leader().A.State.Checkpoints(id); cp != nil {
			for _, ck := range cp.Completed {
				if ck.CompleteUnixMs >= t0.UnixMilli() && ck.CompleteUnixMs <= t1.UnixMilli() {
					tr.durations = append(tr.durations, time.Duration(ck.CompleteUnixMs-ck.TriggerUnixMs)*time.Millisecond)
				}
			}
			for _, ck := range cp.Aborted {
				if ck.AbortUnixMs >= t0.UnixMilli() && ck.AbortUnixMs <= t1.UnixMilli() {
					tr.aborted++
					t.Logf("%s #%d: checkpoint %d aborted: %s", kind, k, ck.Id, ck.AbortReason)
				}
			}
		}
		if restarted := testcluster.Changed(testcluster.Attempts(rec), testcluster.Attempts(c.Job(id))); len(restarted) > 0 {
			t.Logf("%s #%d: tasks restarted during the trial: %v", kind, k, restarted)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := leader().CancelJob(ctx, &pb.CancelJobRequest{JobId: id}); err != nil {
			t.Fatalf("cancel %s: %v", id, err)
		}
		c.WaitJob(id, "CANCELED", time.Minute, func(r *pb.JobRecord) bool { return r.Status == pb.JobStatus_JOB_STATUS_CANCELED })
		testcluster.WaitFor(t, time.Minute, "every slot free again", func() (bool, string) {
			used := c.Leader().A.State.SlotsUsed()
			n := int32(0)
			for _, u := range used {
				n += u
			}
			return n == 0, fmt.Sprintf("slots used %v", used)
		})
		t.Logf("%s #%d: %.0f records/s over %s (%d records; the process used %.2f cores: %.0f records per CPU second;%s); %d checkpoints completed %v, %d aborted; %d alignments",
			kind, k, tr.recordsPerS, t1.Sub(t0).Round(time.Millisecond), n1-n0, tr.cpuShare, tr.perCPUSecond, tr.placement, len(tr.durations), tr.durations, tr.aborted, tr.alignments)
		return tr
	}

	var none, with, noneCPU, withCPU []float64
	var durations []time.Duration
	var alignments uint64
	var alignSum time.Duration
	for k := range trials {
		tn := run(k, false)
		none, noneCPU = append(none, tn.recordsPerS), append(noneCPU, tn.perCPUSecond)
		tr := run(k, true)
		with, withCPU = append(with, tr.recordsPerS), append(withCPU, tr.perCPUSecond)
		durations = append(durations, tr.durations...)
		alignments += tr.alignments
		alignSum += tr.alignSum
	}
	medNone, medWith := medianOf(none), medianOf(with)
	ratio := medWith / medNone
	t.Logf("records/s without checkpoints %v (median %.0f), with a checkpoint every second %v (median %.0f): %.3fx",
		rounded(none), medNone, rounded(with), medWith, ratio)
	// The machine is shared: a trial's rate follows the CPU the process was given. Records per
	// CPU second of the process (every JobMaster and TaskManager of the cluster, the checkpoint
	// work included) do not; reported, no goal.
	t.Logf("records per CPU second: without %v (median %.0f), with %v (median %.0f): %.3fx",
		rounded(noneCPU), medianOf(noneCPU), rounded(withCPU), medianOf(withCPU), medianOf(withCPU)/medianOf(noneCPU))
	if len(durations) > 0 {
		slices.Sort(durations)
		t.Logf("checkpoint duration (trigger to completion, %d checkpoints): median %s, max %s", len(durations), durations[len(durations)/2], durations[len(durations)-1])
	} else {
		t.Logf("checkpoint duration: no checkpoint completed in the windows")
	}
	if alignments > 0 {
		t.Logf("barrier alignment (%d alignments of the tasks with inputs: sum, two channels each, and sink, one): mean %s", alignments, (alignSum / time.Duration(alignments)).Round(time.Microsecond))
	}
	benchgoal.Report(t, "checkpoint-throughput-vs-none", ratio, 0.90, ratio >= 0.90, "x")
}

// processCPU is the CPU time (user and system) this process has used so far.
func processCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func medianOf(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

func rounded(xs []float64) []int64 {
	out := make([]int64, len(xs))
	for i, x := range xs {
		out[i] = int64(x + 0.5)
	}
	return out
}
