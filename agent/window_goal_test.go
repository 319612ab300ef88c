package agent_test

import (
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/testkit/benchgoal"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/testkit/windowcheck"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// The window goal's jobs: a bounded, unpaced event generator of two splits (1,000 users,
// events 1 ms of event time apart, out of order by up to 300 ms, watermarks as far behind),
// keyed by user, over ALL_TO_ALL into a tumbling window of 60 s summing "amount" (about 120
// events per user and window), into a log sink; and the same job without the window.
const (
	windowGoalEvents   = 3_000_000 // per split: 3-6 s a run on two cores
	windowGoalDisorder = 300       // ms
	windowGoalSizeMs   = 60_000
)

func windowGoalJob(windowed bool) *pb.JobGraph {
	edge := func(s, d string, dist pb.Distribution) *pb.JobEdge {
		return &pb.JobEdge{Source: s, Target: d, Distribution: dist, ResultType: pb.ResultType_RESULT_TYPE_PIPELINED}
	}
	const fwd, all = pb.Distribution_DISTRIBUTION_FORWARD, pb.Distribution_DISTRIBUTION_ALL_TO_ALL
	logSink := func() *pb.Operator { return &pb.Operator{Kind: &pb.Operator_LogSink{LogSink: &pb.LogSink{}}} }
	gen := &pb.EventGenerator{Seed: 36, Count: windowGoalEvents, Keys: 1000, StartMs: 1_700_000_000_000, StepMs: 1,
		MaxDisorderMs: windowGoalDisorder, MaxAmount: 1000}
	jg := &pb.JobGraph{
		Name: "window goal", Type: pb.JobType_JOB_TYPE_STREAMING,
		Vertices: []*pb.JobVertex{
			{Id: "events", Parallelism: 2, Operator: &pb.Operator{Kind: &pb.Operator_EventGenerator{EventGenerator: gen},
				EventTime: &pb.EventTime{MaxOutOfOrdernessMs: windowGoalDisorder}}},
			{Id: "by-user", Parallelism: 2, Operator: &pb.Operator{Kind: &pb.Operator_JsonKeyBy{JsonKeyBy: &pb.JsonKeyBy{Path: "user"}}}},
			{Id: "out", Parallelism: 2, Operator: logSink()},
		},
		Edges:           []*pb.JobEdge{edge("events", "by-user", fwd), edge("by-user", "out", all)},
		DeadLetters:     &pb.DeadLetters{Operator: logSink()},
		RestartStrategy: &pb.RestartStrategy{Kind: pb.RestartKind_RESTART_KIND_NONE},
	}
	if windowed {
		jg.Name = "window goal, windowed"
		jg.Vertices = slices.Insert(jg.Vertices, 2, &pb.JobVertex{Id: "window", Parallelism: 2, Operator: &pb.Operator{Kind: &pb.Operator_Window{Window: windowGoalWindow()}}})
		jg.Edges = []*pb.JobEdge{edge("events", "by-user", fwd), edge("by-user", "window", all), edge("window", "out", fwd)}
	}
	return jg
}

func windowGoalWindow() *pb.WindowOperator {
	return &pb.WindowOperator{Kind: pb.WindowKind_WINDOW_KIND_TUMBLING, SizeMs: windowGoalSizeMs, Field: "amount"}
}

// windowRun is one run of a goal job: events generated per second from the last task RUNNING
// to the job FINISHED (the leader's committed timestamps), and what its vertices counted.
type windowRun struct {
	rate    float64
	elapsed time.Duration
	results int64         // window results (0 without the window)
	cpu     time.Duration // the test process's CPU from submission to FINISHED seen
}

// TestGoalWindowJob (JMC_GOALS=1, `make bench-short`): events per second through a keyed
// tumbling-window job (event generator -> json_key_by -> ALL_TO_ALL -> window -> log sink)
// against the same job without the window, on one cluster in the same run, the two jobs
// alternating, Trials(3, 6) of each; the goal is the median windowed rate over the median rate
// without, at least 0.5x. Not checkpointed: checkpoints' cost is the checkpoint goal's
// subject, and here it would be the window state's encoding once per interval, not the
// window's per-record work this goal is about.
func TestGoalWindowJob(t *testing.T) {
	benchgoal.Skip(t)
	c := testcluster.New(t, testcluster.Options{JMs: 3, TMs: 2, Slots: 8, LogLevel: hclog.Warn})
	trials := benchgoal.Trials(3, 6)
	want := int64(len(windowcheck.Expected(windowGoalJob(true).Vertices[0].Operator.GetEventGenerator(), 2, windowGoalWindow())))
	var plain, windowed, plainCPU, windowedCPU []float64
	for i := range trials {
		for _, w := range []bool{false, true} {
			r := runWindowGoalJob(t, c, w, want)
			perCPU := float64(2*windowGoalEvents) / r.cpu.Seconds()
			t.Logf("trial %d, %s: %.0f events/s (%d events in %s, %d window results); %.0f events per CPU second (%s of CPU)",
				i+1, windowGoalName(w), r.rate, 2*windowGoalEvents, r.elapsed, r.results, perCPU, r.cpu.Round(time.Millisecond))
			if w {
				windowed, windowedCPU = append(windowed, r.rate), append(windowedCPU, perCPU)
			} else {
				plain, plainCPU = append(plain, r.rate), append(plainCPU, perCPU)
			}
		}
	}
	mp, mw := median(plain), median(windowed)
	ratio := mw / mp
	t.Logf("without the window: %s events/s (median %.0f); with the tumbling window: %s events/s (median %.0f)",
		rates(plain), mp, rates(windowed), mw)
	// Not the goal: events per CPU second of the process (submission to FINISHED, so the
	// deployment's CPU too), which the CPU a shared machine gives the process moves less.
	t.Logf("events per CPU second: without the window %.0f, with it %.0f (medians): %.2fx",
		median(plainCPU), median(windowedCPU), median(windowedCPU)/median(plainCPU))
	benchgoal.Report(t, "window-job-vs-no-window", ratio, 0.5, ratio >= 0.5, "x")
}

func windowGoalName(w bool) string {
	if w {
		return "with the window"
	}
	return "without the window"
}

// runWindowGoalJob submits one goal job, waits for it to finish and measures it. A job that
// does not finish, whose json_key_by does not emit every event (one went to the dead
// letters), or whose window does not emit wantResults results (each (user, window) once, as
// windowcheck.Expected computes them) fails the test: the rate of a job that did other work
// is no measurement.
func runWindowGoalJob(t *testing.T, c *testcluster.Cluster, windowed bool, wantResults int64) windowRun {
	t.Helper()
	cpu0 := processCPU(t)
	id := c.Submit(windowGoalJob(windowed))
	done := c.WaitJob(id, "the goal job FINISHED", 5*time.Minute, func(r *pb.JobRecord) bool {
		return graph.IsGloballyTerminal(r.Status)
	})
	cpu := processCPU(t) - cpu0
	if done.Status != pb.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("the goal job ended %s", testcluster.Describe(done))
	}
	r := windowRun{elapsed: runningToFinished(t, done), cpu: cpu}
	r.rate = float64(2*windowGoalEvents) / r.elapsed.Seconds()
	var keyed, results int64
	for _, tm := range c.TMs {
		if tm.A == nil {
			continue
		}
		for _, io := range tm.A.TM.TaskIOs() {
			if io.JobID != id {
				continue
			}
			switch io.VertexID {
			case "by-user":
				keyed += io.RecordsOut
			case "window":
				results += io.RecordsOut
			}
		}
	}
	// RecordsOut counts the records a task emitted (not its watermarks, not its dead letters).
	if keyed != 2*windowGoalEvents {
		t.Fatalf("%s: json_key_by emitted %d records, want every event (%d)", windowGoalName(windowed), keyed, 2*windowGoalEvents)
	}
	if windowed && results != wantResults {
		t.Fatalf("with the window: %d window results, want one per (user, window) (%d)", results, wantResults)
	}
	r.results = results
	return r
}

// runningToFinished is a finished job's run: from its last task RUNNING to the job FINISHED,
// by the leader's committed timestamps.
func runningToFinished(t *testing.T, done *pb.JobRecord) time.Duration {
	t.Helper()
	var running, finished int64
	for _, ev := range testcluster.Executions(done) {
		for _, st := range ev.GetCurrent().GetStateTimestamps() {
			if st.GetState() == pb.ExecutionState_EXECUTION_STATE_RUNNING {
				running = max(running, st.GetTimestamp())
			}
		}
	}
	for _, h := range done.GetHistory() {
		if h.GetStatus() == pb.JobStatus_JOB_STATUS_FINISHED {
			finished = h.GetTimestamp()
		}
	}
	if running == 0 || finished <= running {
		t.Fatalf("no measurable run: last RUNNING at %d, FINISHED at %d (%s)", running, finished, testcluster.Describe(done))
	}
	return time.Duration(finished-running) * time.Millisecond
}

// processCPU is the CPU time (user and system) of this process so far: the cluster's, every
// JobMaster and TaskManager being in it.
func processCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func rates(xs []float64) string {
	out := ""
	for i, x := range xs {
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprintf("%.0f", x)
	}
	return out
}
