package jobmaster_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/testkit/windowcheck"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// The window jobs of the end-to-end tests: a seeded event generator (two splits, events 10 ms
// of event time apart, out of order by up to 300 ms, paced so a job runs about ten seconds),
// its watermarks 300 ms behind (so no event is ever late and the expected results are the
// reference's), keyed by user, into a window of parallelism 2 over ALL_TO_ALL, into file sinks
// of the results committed per checkpoint (every 200 ms).
const (
	windowEvents   = 2500 // per split
	windowDisorder = 300  // ms
)

func windowGenerator() *pb.EventGenerator {
	return &pb.EventGenerator{Seed: 5703, Count: windowEvents, Keys: 40, KeySkew: 0.8, StartMs: 1_700_000_000_000, StepMs: 10,
		MaxDisorderMs: windowDisorder, RatePerSecond: 250, MaxAmount: 1000}
}

func windowJob(name string, w *pb.WindowOperator) *pb.JobGraph {
	edge := func(s, d string, dist pb.Distribution) *pb.JobEdge {
		return &pb.JobEdge{Source: s, Target: d, Distribution: dist, ResultType: pb.ResultType_RESULT_TYPE_PIPELINED}
	}
	const fwd, all = pb.Distribution_DISTRIBUTION_FORWARD, pb.Distribution_DISTRIBUTION_ALL_TO_ALL
	fileSink := func(p string) *pb.Operator {
		return &pb.Operator{Kind: &pb.Operator_FileSink{FileSink: &pb.FileSink{Path: p, Format: pb.FileSinkFormat_FILE_SINK_FORMAT_VALUE}}}
	}
	return &pb.JobGraph{
		Name: name, Type: pb.JobType_JOB_TYPE_STREAMING,
		Vertices: []*pb.JobVertex{
			{Id: "events", Parallelism: 2, Operator: &pb.Operator{Kind: &pb.Operator_EventGenerator{EventGenerator: windowGenerator()},
				EventTime: &pb.EventTime{MaxOutOfOrdernessMs: windowDisorder, WatermarkIntervalMs: 50}}},
			{Id: "by-user", Parallelism: 2, Operator: &pb.Operator{Kind: &pb.Operator_JsonKeyBy{JsonKeyBy: &pb.JsonKeyBy{Path: "user"}}}},
			{Id: "window", Parallelism: 2, Operator: &pb.Operator{Kind: &pb.Operator_Window{Window: w}}},
			{Id: "out", Parallelism: 2, Operator: fileSink("win-{subtask}.jsonl")},
		},
		Edges:            []*pb.JobEdge{edge("events", "by-user", fwd), edge("by-user", "window", all), edge("window", "out", fwd)},
		DeadLetters:      &pb.DeadLetters{Operator: fileSink("dead-{subtask}.jsonl")},
		CheckpointConfig: &pb.CheckpointConfig{IntervalMs: 200},
		RestartStrategy:  &pb.RestartStrategy{Kind: pb.RestartKind_RESTART_KIND_FIXED_DELAY, Attempts: 5, DelayMs: 100},
	}
}

var windowKinds = []struct {
	name string
	w    *pb.WindowOperator
}{
	{"tumbling", &pb.WindowOperator{Kind: pb.WindowKind_WINDOW_KIND_TUMBLING, SizeMs: 1000, Field: "amount"}},
	{"session", &pb.WindowOperator{Kind: pb.WindowKind_WINDOW_KIND_SESSION, GapMs: 250, Field: "amount"}},
}

// committedWindows reads the committed window results of the job's sinks: every part file
// once, whichever TaskManager's work dir holds it (a region restored elsewhere commits the
// same parts again, with the same bytes), through windowcheck.ReadCommitted.
func committedWindows(t *testing.T, c *testcluster.Cluster, pattern string) []windowcheck.Result {
	t.Helper()
	dir := t.TempDir()
	for _, tm := range c.TMs {
		names, err := filepath.Glob(filepath.Join(tm.WorkDir, pattern+".part-*"))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			dst := filepath.Join(dir, filepath.Base(n))
			if _, err := os.Stat(dst); err == nil {
				continue
			}
			b, err := os.ReadFile(n)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dst, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, err := windowcheck.ReadCommitted(dir, pattern)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// checkWindows fails unless the job's committed output holds every (key, window) result the
// reference computes from the generator's seed exactly once, and no dead letter.
func checkWindows(t *testing.T, c *testcluster.Cluster, w *pb.WindowOperator) {
	t.Helper()
	want := windowcheck.Expected(windowGenerator(), 2, w)
	got := committedWindows(t, c, "win-*.jsonl")
	if err := windowcheck.Compare(want, got); err != nil {
		t.Fatalf("committed window results against the reference: %v", err)
	}
	if dead := committedLinesOf(t, c, "dead-0.jsonl"); len(dead) > 0 {
		t.Fatalf("%d dead letters, want none (no event is late): first %q", len(dead), dead[0])
	}
	t.Logf("%d window results, each once, as the reference computes them", len(got))
}

// committedLinesOf is committedLines without the empty output of a sink that wrote nothing.
func committedLinesOf(t *testing.T, c *testcluster.Cluster, name string) []string {
	var out []string
	for _, l := range committedLines(t, c, name) {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

// TestWindowResultsExactlyOnceOnAQuietCluster: a keyed tumbling and a session window job of
// out-of-order events; the committed output holds every (key, window) result the reference
// computes from the generator's seed, exactly once.
func TestWindowResultsExactlyOnceOnAQuietCluster(t *testing.T) {
	for _, k := range windowKinds {
		t.Run(k.name, func(t *testing.T) {
			c := testcluster.New(t, testcluster.Options{JMs: 3, TMs: 2, Slots: 8, Checkpoints: true})
			id := c.Submit(windowJob("windows "+k.name, k.w))
			done := c.WaitJob(id, "the job FINISHED", 120*time.Second, func(r *pb.JobRecord) bool { return r.Status == pb.JobStatus_JOB_STATUS_FINISHED })
			if done.Restarts != 0 {
				t.Fatalf("the job restarted: %s", testcluster.Describe(done))
			}
			checkWindows(t, c, k.w)
		})
	}
}

// TestWindowResultsExactlyOnceAcrossTMAndLeaderKills: the same jobs on three JobMasters and
// three TaskManagers; once two checkpoints completed, the TaskManager of window[0] is killed
// (the job's one region is restored from the latest checkpoint elsewhere), and once a
// checkpoint completed after that, the leader. The leader kill restarts nothing (every
// attempt the same before and after), and the committed output holds every (key, window)
// result the reference computes, exactly once.
func TestWindowResultsExactlyOnceAcrossTMAndLeaderKills(t *testing.T) {
	for _, k := range windowKinds {
		t.Run(k.name, func(t *testing.T) {
			c := testcluster.New(t, testcluster.Options{JMs: 3, TMs: 3, Slots: 8, Checkpoints: true})
			id := c.Submit(windowJob("windows "+k.name, k.w))
			before := testcluster.Attempts(waitAllRunning(t, c, id))
			completed := func(n uint64) func() (bool, string) {
				return func() (bool, string) {
					ck, ok := c.Leader().A.State.LatestCompletedCheckpoint(id)
					return ok && ck.GetId() >= n, describeCheckpoints(checkpointsOf(c, id))
				}
			}
			testcluster.WaitFor(t, 30*time.Second, "two completed checkpoints", completed(2))

			victim := before["window[0]"].TM
			c.KillTM(tmByID(t, c, victim))
			restarted := c.WaitJob(id, "the region restored and every task RUNNING", 60*time.Second, func(r *pb.JobRecord) bool {
				return testcluster.AllRunning(r) && testcluster.Attempts(r)["window[0]"].Number > before["window[0]"].Number
			})
			ck, _ := c.Leader().A.State.LatestCompletedCheckpoint(id)
			testcluster.WaitFor(t, 30*time.Second, "a checkpoint completed after the restore", completed(ck.GetId()+1))
			if restarted.Status == pb.JobStatus_JOB_STATUS_FINISHED {
				t.Fatal("the job finished before the leader kill: make it run longer")
			}
			kept := testcluster.Attempts(c.Job(id))

			leader := c.Leader()
			c.KillJM(leader)
			if next := c.Leader(); next == leader {
				t.Fatal("no new leader")
			}
			done := c.WaitJob(id, "the job FINISHED", 120*time.Second, func(r *pb.JobRecord) bool { return r.Status == pb.JobStatus_JOB_STATUS_FINISHED })
			if ch := testcluster.Changed(kept, testcluster.Attempts(done)); len(ch) > 0 {
				t.Fatalf("the leader kill restarted tasks: %v (%s)", ch, testcluster.Describe(done))
			}
			t.Logf("%s: TaskManager %s killed, the region restored from a checkpoint; the leader %s killed, zero restarts", k.name, victim, leader.ID)
			checkWindows(t, c, k.w)
		})
	}
}
