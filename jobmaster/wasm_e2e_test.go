package jobmaster_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/operator"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/testkit/wasmbuild"
	"github.com/jmcluster/jmcluster/transport/pb"
	"github.com/jmcluster/jmcluster/wasmhost"
)

func init() { wasmhost.SetCacheDir(wasmbuild.CacheDir()) }

// The fraud job of the end-to-end tests: one split of seeded payments in event-time order (so
// each user's payments reach its fraud subtask in one order, and the rule's alerts are a
// function of the seed), keyed by user, into examples/wasm/fraud (parallelism 2, ALL_TO_ALL),
// into file sinks committed per checkpoint. idle_ms >= window_ms: a user's idle timer clears
// only times no later payment could count, so when it fires does not change the alerts.
const (
	fraudEvents    = 6000
	fraudThreshold = 70
	fraudCount     = 3
	fraudWindowMs  = 1500
	fraudIdleMs    = 3000
)

func fraudGenerator() *pb.EventGenerator {
	return &pb.EventGenerator{Seed: 37, Count: fraudEvents, Keys: 20, StartMs: 1_700_000_000_000, StepMs: 10,
		RatePerSecond: 400, MaxAmount: 100}
}

var (
	fraudOnce   sync.Once
	fraudModule []byte
)

// storeFraud builds examples/wasm/fraud once and stores it in the cluster's artifact store,
// through a follower, as `jmnode artifact put` does; the TaskManagers fetch it from there. It
// returns the sha256.
func storeFraud(t *testing.T, c *testcluster.Cluster) string {
	t.Helper()
	fraudOnce.Do(func() { fraudModule = wasmbuild.MustRead("fraud")["fraud"] })
	sha := wasmhost.Sum(fraudModule)
	var via *testcluster.JM
	for _, j := range c.JMs {
		if j.A != nil && j != c.Leader() {
			via = j
			break
		}
	}
	putArtifact(t, c, via, fraudModule)
	return sha
}

func fraudJob(sha string) *pb.JobGraph {
	edge := func(s, d string, dist pb.Distribution) *pb.JobEdge {
		return &pb.JobEdge{Source: s, Target: d, Distribution: dist, ResultType: pb.ResultType_RESULT_TYPE_PIPELINED}
	}
	const fwd, all = pb.Distribution_DISTRIBUTION_FORWARD, pb.Distribution_DISTRIBUTION_ALL_TO_ALL
	fileSink := func(p string) *pb.Operator {
		return &pb.Operator{Kind: &pb.Operator_FileSink{FileSink: &pb.FileSink{Path: p, Format: pb.FileSinkFormat_FILE_SINK_FORMAT_VALUE}}}
	}
	cfg := fmt.Sprintf(`{"threshold": %d, "count": %d, "window_ms": %d, "idle_ms": %d}`, fraudThreshold, fraudCount, fraudWindowMs, fraudIdleMs)
	return &pb.JobGraph{
		Name: "wasm fraud", Type: pb.JobType_JOB_TYPE_STREAMING,
		Vertices: []*pb.JobVertex{
			{Id: "payments", Parallelism: 1, Operator: &pb.Operator{Kind: &pb.Operator_EventGenerator{EventGenerator: fraudGenerator()},
				EventTime: &pb.EventTime{WatermarkIntervalMs: 50}}},
			{Id: "by-user", Parallelism: 1, Operator: &pb.Operator{Kind: &pb.Operator_JsonKeyBy{JsonKeyBy: &pb.JsonKeyBy{Path: "user"}}}},
			{Id: "fraud", Parallelism: 2, Operator: &pb.Operator{Kind: &pb.Operator_Wasm{Wasm: &pb.WasmOperator{
				Artifact: sha, Function: "detect", Kind: pb.WasmKind_WASM_KIND_PROCESS, Config: cfg}}}},
			{Id: "out", Parallelism: 2, Operator: fileSink("fraud-{subtask}.jsonl")},
		},
		Edges:            []*pb.JobEdge{edge("payments", "by-user", fwd), edge("by-user", "fraud", all), edge("fraud", "out", fwd)},
		DeadLetters:      &pb.DeadLetters{Operator: fileSink("dead-{subtask}.jsonl")},
		CheckpointConfig: &pb.CheckpointConfig{IntervalMs: 200},
		RestartStrategy:  &pb.RestartStrategy{Kind: pb.RestartKind_RESTART_KIND_FIXED_DELAY, Attempts: 5, DelayMs: 100},
	}
}

// expectedAlerts is the fraud rule (examples/wasm/fraud) over the generator's payments in
// order: the alerts it emits, as the module encodes them.
func expectedAlerts() []string {
	g := operator.NewGenerator(fraudGenerator())
	times := map[string][]int64{}
	var out []string
	for i := range int64(fraudEvents) {
		e := g.Event(0, i)
		if e.Amount <= fraudThreshold {
			continue
		}
		ts := append(times[e.User], e.TimeMs)
		ts = slices.DeleteFunc(ts, func(t int64) bool { return t <= e.TimeMs-fraudWindowMs })
		if len(ts) >= fraudCount {
			b, _ := json.Marshal(map[string]any{"user": e.User, "amounts": len(ts), "first_ms": ts[0], "last_ms": e.TimeMs})
			out = append(out, string(b))
			ts = nil
		}
		times[e.User] = ts
	}
	slices.Sort(out)
	return out
}

func checkAlerts(t *testing.T, c *testcluster.Cluster) {
	t.Helper()
	want := expectedAlerts()
	got := append(committedLinesOf(t, c, "fraud-0.jsonl"), committedLinesOf(t, c, "fraud-1.jsonl")...)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("committed alerts: %d, want %d exactly once\ngot  %q\nwant %q", len(got), len(want), got, want)
	}
	if dead := committedLinesOf(t, c, "dead-0.jsonl"); len(dead) > 0 {
		t.Fatalf("%d dead letters, want none: first %q", len(dead), dead[0])
	}
	if len(want) == 0 {
		t.Fatal("the reference has no alert: the test checks nothing")
	}
	t.Logf("%d alerts, each once, as the reference computes them", len(got))
}

// TestWasmFraudExactlyOnceAcrossTMAndLeaderKills: the fraud rule of examples/wasm/fraud (a
// keyed PROCESS function in WebAssembly, its state and timers checkpointed), stored as an
// artifact through a follower, on three JobMasters and three TaskManagers; once two checkpoints completed, the TaskManager of fraud[0] is
// killed (its region restored from the latest checkpoint elsewhere), and once a checkpoint
// completed after that, the leader. The leader kill restarts nothing, and the committed
// alerts are those the reference computes from the seed, each exactly once.
func TestWasmFraudExactlyOnceAcrossTMAndLeaderKills(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{JMs: 3, TMs: 3, Slots: 8, Checkpoints: true})
	sha := storeFraud(t, c)
	id := c.Submit(fraudJob(sha))
	before := testcluster.Attempts(c.WaitJob(id, "every task RUNNING", 120*time.Second, testcluster.AllRunning))
	completed := func(n uint64) func() (bool, string) {
		return func() (bool, string) {
			ck, ok := c.Leader().A.State.LatestCompletedCheckpoint(id)
			return ok && ck.GetId() >= n, describeCheckpoints(checkpointsOf(c, id))
		}
	}
	testcluster.WaitFor(t, 60*time.Second, "two completed checkpoints", completed(2))

	victim := before["fraud[0]"].TM
	c.KillTM(tmByID(t, c, victim))
	restarted := c.WaitJob(id, "the region restored and every task RUNNING", 120*time.Second, func(r *pb.JobRecord) bool {
		return testcluster.AllRunning(r) && testcluster.Attempts(r)["fraud[0]"].Number > before["fraud[0]"].Number
	})
	ck, _ := c.Leader().A.State.LatestCompletedCheckpoint(id)
	testcluster.WaitFor(t, 60*time.Second, "a checkpoint completed after the restore", completed(ck.GetId()+1))
	if restarted.Status == pb.JobStatus_JOB_STATUS_FINISHED {
		t.Fatal("the job finished before the leader kill: make it run longer")
	}
	kept := testcluster.Attempts(c.Job(id))

	leader := c.Leader()
	c.KillJM(leader)
	if next := c.Leader(); next == leader {
		t.Fatal("no new leader")
	}
	done := c.WaitJob(id, "the job FINISHED", 180*time.Second, func(r *pb.JobRecord) bool { return r.Status == pb.JobStatus_JOB_STATUS_FINISHED })
	if ch := testcluster.Changed(kept, testcluster.Attempts(done)); len(ch) > 0 {
		t.Fatalf("the leader kill restarted tasks: %v (%s)", ch, testcluster.Describe(done))
	}
	t.Logf("TaskManager %s killed, fraud[0]'s region restored from a checkpoint; the leader %s killed, zero restarts", victim, leader.ID)
	checkAlerts(t, c)
}
