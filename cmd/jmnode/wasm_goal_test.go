package main

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/testkit/benchgoal"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/testkit/wasmbuild"
	"github.com/jmcluster/jmcluster/transport/pb"
	"github.com/jmcluster/jmcluster/wasmhost"
)

// wasmGoalFunction is the map of the kinds test module the goal runs
// (testkit/wasmbuild/testdata/kinds): the value in ASCII upper case, written into the SDK's
// scratch memory (fn.Scratch).
const wasmGoalFunction = "upper_fast"

// mapJob is source -> map -> log sink, each of parallelism 1, FORWARD: with sha "" the
// built-in map over the sequence source's numeric records, else the wasm MAP of the kinds
// module (sha) over the event generator's JSON events padded to 100 bytes. Both sources run
// without a rate limit; the log sink below debug costs nothing per record.
func mapJob(name, sha string) *pb.JobGraph {
	source := &pb.Operator{Kind: &pb.Operator_SequenceSource{SequenceSource: &pb.SequenceSource{Keys: 64}}}
	mapOp := &pb.Operator{Kind: &pb.Operator_Map{Map: &pb.MapOperator{Multiply: 2, Add: 1}}}
	if sha != "" {
		source = &pb.Operator{Kind: &pb.Operator_EventGenerator{EventGenerator: &pb.EventGenerator{Seed: 1, Keys: 1000, ValueBytes: 100}}}
		mapOp = &pb.Operator{Kind: &pb.Operator_Wasm{Wasm: &pb.WasmOperator{Artifact: sha, Function: wasmGoalFunction, Kind: pb.WasmKind_WASM_KIND_MAP}}}
	}
	return &pb.JobGraph{
		Name: name, Type: pb.JobType_JOB_TYPE_STREAMING,
		Vertices: []*pb.JobVertex{
			{Id: "source", Parallelism: 1, Operator: source},
			{Id: "map", Parallelism: 1, Operator: mapOp},
			{Id: "sink", Parallelism: 1, Operator: &pb.Operator{Kind: &pb.Operator_LogSink{LogSink: &pb.LogSink{}}}},
		},
		Edges: []*pb.JobEdge{
			{Source: "source", Target: "map", Distribution: pb.Distribution_DISTRIBUTION_FORWARD, ResultType: pb.ResultType_RESULT_TYPE_PIPELINED},
			{Source: "map", Target: "sink", Distribution: pb.Distribution_DISTRIBUTION_FORWARD, ResultType: pb.ResultType_RESULT_TYPE_PIPELINED},
		},
		RestartStrategy: &pb.RestartStrategy{Kind: pb.RestartKind_RESTART_KIND_NONE},
	}
}

// TestGoalWasmMapJob (JMC_GOALS=1, `make bench-short`): records per second at the sink of a
// job whose map is a WebAssembly MAP over 100-byte records (mapJob with the kinds module)
// against the same job with the built-in map over its numeric records, on one in-process
// TaskManager (one JobMaster), in alternating trials: each submits its job, waits until
// records reach the sink, warms up, counts the sink's records over a window, and cancels it.
// Goal: the median wasm rate is at least 0.5x the median built-in rate. The module's own cost
// per record is TestGoalWasmMap's (./operator/).
func TestGoalWasmMapJob(t *testing.T) {
	benchgoal.Skip(t)
	trials := benchgoal.Trials(3, 6)
	warmUp := time.Duration(benchgoal.Trials(2, 3)) * time.Second
	window := time.Duration(benchgoal.Trials(4, 10)) * time.Second
	module := wasmbuild.MustRead("kinds")["kinds"]
	c := testcluster.New(t, testcluster.Options{JMs: 1, TMs: 1, Slots: 4, LogLevel: hclog.Info})
	sha, _ := c.PutArtifact(t, nil, module)

	run := func(k int, wasm bool) float64 {
		t.Helper()
		kind, art := "builtin", ""
		if wasm {
			kind, art = "wasm", sha
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		resp, err := c.Client(c.Leader()).SubmitJob(ctx, &pb.SubmitJobRequest{JobGraph: mapJob(fmt.Sprintf("map-%s-%d", kind, k), art)})
		if err != nil {
			t.Fatalf("submit: %v", err)
		}
		id := resp.JobId
		c.WaitJob(id, "every task RUNNING", time.Minute, testcluster.AllRunning)
		var flowing time.Time
		testcluster.WaitFor(t, warmUp+time.Minute, "records at the sink, then the warm-up", func() (bool, string) {
			n := sinkRecords(c, id)
			if n > 0 && flowing.IsZero() {
				flowing = time.Now()
			}
			return !flowing.IsZero() && time.Since(flowing) >= warmUp, fmt.Sprintf("%d records at the sink", n)
		})
		t0, n0, cpu0 := time.Now(), sinkRecords(c, id), processCPU(t)
		testcluster.WaitFor(t, window+time.Minute, "the measurement window", func() (bool, string) {
			return time.Since(t0) >= window, ""
		})
		t1, n1, cpu1 := time.Now(), sinkRecords(c, id), processCPU(t)
		rate := float64(n1-n0) / t1.Sub(t0).Seconds()
		if _, err := c.Client(c.Leader()).CancelJob(ctx, &pb.CancelJobRequest{JobId: id}); err != nil {
			t.Fatalf("cancel %s: %v", id, err)
		}
		c.WaitJob(id, "CANCELED", time.Minute, func(r *pb.JobRecord) bool { return r.Status == pb.JobStatus_JOB_STATUS_CANCELED })
		t.Logf("%s #%d: %.0f records/s over %s (%d records; the process used %.2f cores)",
			kind, k, rate, t1.Sub(t0).Round(time.Millisecond), n1-n0, (cpu1-cpu0).Seconds()/t1.Sub(t0).Seconds())
		return rate
	}

	var builtin, wasm []float64
	for k := range trials {
		builtin = append(builtin, run(k, false))
		wasm = append(wasm, run(k, true))
	}
	mb, mw := median(builtin), median(wasm)
	t.Logf("median: built-in map %.0f records/s, wasm MAP (%s) of 100-byte records %.0f records/s", mb, wasmGoalFunction, mw)
	ratio := mw / mb
	benchgoal.Report(t, "wasm_map_vs_builtin", ratio, 0.5, ratio >= 0.5, "x")
}

// TestGoalWasmTaskStart (JMC_GOALS=1, `make bench-short`): the start of a task that runs a
// WebAssembly MAP on a TaskManager whose module is cached (fetched, compiled, and a warm
// instance waiting: the TaskManager ran the module before, as after a region's restart) against
// the start of the same task with the built-in map: the TaskManager's own measure, deployment
// accepted to RUNNING (TaskIO.Start, jmcluster_tm_task_start_seconds). mapJob's map task, in
// alternating trials on one in-process TaskManager (sources paced to 100 records/s, so the
// tasks' starts are not measured against a source running flat out). Goal: the median wasm
// start at most 2x the median built-in start.
func TestGoalWasmTaskStart(t *testing.T) {
	benchgoal.Skip(t)
	trials := benchgoal.Trials(7, 15)
	module := wasmbuild.MustRead("kinds")["kinds"]
	c := testcluster.New(t, testcluster.Options{JMs: 1, TMs: 1, Slots: 4, LogLevel: hclog.Info})
	sha, _ := c.PutArtifact(t, nil, module)

	start := func(name string, wasm, first bool) time.Duration {
		t.Helper()
		art := ""
		if wasm {
			art = sha
		}
		if wasm && !first {
			testcluster.WaitFor(t, 2*time.Minute, "a warm instance of the module", func() (bool, string) {
				n := wasmhost.Default().WarmWaiting(sha)
				return n > 0, fmt.Sprintf("%d waiting", n)
			})
		}
		jg := mapJob(name, art)
		if g := jg.Vertices[0].Operator.GetEventGenerator(); g != nil {
			g.RatePerSecond = 100
		} else {
			jg.Vertices[0].Operator.GetSequenceSource().RatePerSecond = 100
		}
		var resp *pb.SubmitJobResponse
		writeRetried(t, "submit "+name, func(ctx context.Context) (err error) {
			resp, err = c.Client(c.Leader()).SubmitJob(ctx, &pb.SubmitJobRequest{JobGraph: jg})
			return err
		})
		c.WaitJob(resp.JobId, "every task RUNNING", time.Minute, testcluster.AllRunning)
		var took time.Duration
		for _, io := range c.TMs[0].A.TM.TaskIOs() {
			if io.JobID == resp.JobId && io.VertexID == "map" {
				took = io.Start
			}
		}
		if took <= 0 {
			t.Fatalf("%s: the map task runs with no start time", name)
		}
		writeRetried(t, "cancel "+name, func(ctx context.Context) error {
			_, err := c.Client(c.Leader()).CancelJob(ctx, &pb.CancelJobRequest{JobId: resp.JobId})
			return err
		})
		c.WaitJob(resp.JobId, "CANCELED", time.Minute, func(r *pb.JobRecord) bool { return r.Status == pb.JobStatus_JOB_STATUS_CANCELED })
		return took
	}

	cold := start("first", true, true) // fetches and compiles the module, then starts a warm instance
	t.Logf("the first wasm task's start (the artifact fetched; the module compiled unless this process compiled it before; its start): %v", cold)
	var builtin, wasm []float64
	for k := range trials {
		b, w := start(fmt.Sprintf("builtin-%d", k), false, false), start(fmt.Sprintf("wasm-%d", k), true, false)
		builtin, wasm = append(builtin, float64(b)), append(wasm, float64(w))
		t.Logf("#%d: built-in map task %v, wasm MAP task %v", k, b, w)
	}
	mb, mw := median(builtin), median(wasm)
	t.Logf("median task start: built-in %v, wasm with its module cached %v", time.Duration(mb), time.Duration(mw))
	ratio := mw / mb
	benchgoal.Report(t, "wasm_task_start_vs_builtin", ratio, 2, ratio <= 2, "x")
}

// writeRetried runs a write call until it is not refused by the JobMaster's client write rate
// limit (a goal test submits and cancels faster than a person does); any other error fails.
func writeRetried(t *testing.T, what string, call func(ctx context.Context) error) {
	t.Helper()
	testcluster.WaitFor(t, time.Minute, what, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := call(ctx)
		if err != nil && status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("%s: %v", what, err)
		}
		return err == nil, fmt.Sprint(err)
	})
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
