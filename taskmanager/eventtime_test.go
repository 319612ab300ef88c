package taskmanager

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/checkpoint"
	"github.com/jmcluster/jmcluster/operator"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// wmProbe is a keyed transform that watches its task's event time: per attempt number, the
// first and the lowest and highest Context.Watermark() it saw (at Open, each record, each
// timer) and the event time of the first record it processed. It registers a timer at each
// record's time, so the watermark's advance fires timers.
type wmProbe struct{ s *probeStats }

type probeStats struct {
	mu    sync.Mutex
	open  map[int32]int64 // attempt number -> the watermark at Open
	low   map[int32]int64
	high  map[int32]int64
	first map[int32]int64 // the event time of the first record
	fired atomic.Int64    // timers fired
}

func newProbeStats() *probeStats {
	return &probeStats{open: map[int32]int64{}, low: map[int32]int64{}, high: map[int32]int64{}, first: map[int32]int64{}}
}

func (s *probeStats) see(ctx *operator.Context) {
	a, w := ctx.Info().AttemptNumber, ctx.Watermark()
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.low[a]; !ok || w < l {
		s.low[a] = w
	}
	if h, ok := s.high[a]; !ok || w > h {
		s.high[a] = w
	}
}

// get returns attempt a's watermark at Open, lowest, highest, and first record's time (ok:
// a record was seen).
func (s *probeStats) get(a int32) (open, low, high, first int64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	first, ok = s.first[a]
	return s.open[a], s.low[a], s.high[a], first, ok
}

func (p wmProbe) Open(ctx *operator.Context) error {
	p.s.mu.Lock()
	p.s.open[ctx.Info().AttemptNumber] = ctx.Watermark()
	p.s.mu.Unlock()
	p.s.see(ctx)
	return nil
}

func (p wmProbe) Process(ctx *operator.Context, r operator.Record) error {
	a := ctx.Info().AttemptNumber
	p.s.mu.Lock()
	if _, ok := p.s.first[a]; !ok {
		p.s.first[a] = r.Time
	}
	p.s.mu.Unlock()
	p.s.see(ctx)
	ctx.RegisterTimer(r.Time)
	return nil
}

func (p wmProbe) OnTimer(ctx *operator.Context, at int64) error {
	if at > ctx.Watermark() {
		return fmt.Errorf("timer at %d fired at watermark %d", at, ctx.Watermark())
	}
	p.s.fired.Add(1)
	p.s.see(ctx)
	return nil
}

// reportedWatermark is the watermark attempt's task last reported in a heartbeat (0: none).
func (j *testJM) reportedWatermark(attempt string) int64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	for i := len(j.beats) - 1; i >= 0; i-- {
		for _, d := range j.beats[i].GetDeployed() {
			if d.GetAttemptId() == attempt && d.GetWatermarkMs() != 0 {
				return d.GetWatermarkMs()
			}
		}
	}
	return 0
}

// idleJob runs a two-split event generator (parallelism 2, the last split idle) into the probe
// (parallelism 1, ALL_TO_ALL) on one TaskManager, with event time idle after idleMs (0:
// never). The generator's event time advances 1 s per second (5 ms steps at 200 per second).
func idleJob(t *testing.T, idleMs int64) (*testJM, *probeStats) {
	stats := newProbeStats()
	operator.ReplaceTransform(t, "map", true, func(*pb.Operator, operator.Info) operator.Transform { return wmProbe{stats} })
	jm := startJM(t)
	tm := newTM(t, "tm1", jm, nil)
	c := client(t, tm)
	const job = "idle"
	gen := &pb.Operator{Kind: &pb.Operator_EventGenerator{EventGenerator: &pb.EventGenerator{
		Seed: 1, Keys: 4, StartMs: 1_000_000, StepMs: 5, RatePerSecond: 200, IdleSplits: 1}},
		EventTime: &pb.EventTime{IdleTimeoutMs: idleMs, WatermarkIntervalMs: 50}}
	probe := &pb.Operator{Kind: &pb.Operator_Map{Map: &pb.MapOperator{}}}
	submit(t, c, 1, deploy(job, "probe", 0, 1, "probe-0", 0, probe,
		gate("gen->probe", pipelined, channel("gen->probe", 0, 0, "gen-0", tm.DataAddr()), channel("gen->probe", 1, 0, "gen-1", tm.DataAddr()))))
	for i := range int32(2) {
		submit(t, c, 1, deploy(job, "gen", i, 2, fmt.Sprintf("gen-%d", i), i+1, gen, nil, produces("gen->probe", i, 1, allToAll, pipelined)))
	}
	waitFor(t, 20*time.Second, "the probe's first record", func() (bool, string) {
		_, _, _, _, ok := stats.get(0)
		return ok, "none"
	})
	return jm, stats
}

// idleBound is how many idle timeouts the tests give an idle split to stop holding the
// watermark back (it takes one, plus a watermark interval and a tick).
const idleBound = 20

// TestIdleSplitDoesNotHoldBackTheWatermark: an idle source partition does not hold back the
// watermark past the idle timeout. The generator's split 1 emits nothing; once it is idle
// (300 ms without a record), the probe's watermark follows split 0 alone: it passes the
// event time of the first record the probe saw within idleBound idle timeouts, and the timers
// at the records' times fire.
func TestIdleSplitDoesNotHoldBackTheWatermark(t *testing.T) {
	const idleMs = 300
	_, stats := idleJob(t, idleMs)
	_, _, _, first, _ := stats.get(0)
	waitFor(t, idleBound*idleMs*time.Millisecond, fmt.Sprintf("the probe's watermark to pass %d, the time of its first record", first), func() (bool, string) {
		_, _, high, _, _ := stats.get(0)
		return high > first && stats.fired.Load() > 0, fmt.Sprintf("watermark %d, %d timers fired", high, stats.fired.Load())
	})
}

// TestWithoutIdlenessAnIdleSplitHoldsBackTheWatermark: the same job without idle_timeout_ms.
// Split 0's task reports its watermark rising (its source emits watermarks), but the probe's
// stays at none: split 1 said nothing, and it holds it back. (So the test above can fail.)
func TestWithoutIdlenessAnIdleSplitHoldsBackTheWatermark(t *testing.T) {
	const idleMs = 300
	jm, stats := idleJob(t, 0)
	_, _, _, first, _ := stats.get(0)
	// The generator's event time runs at the wall clock's pace: idleBound idle timeouts of it,
	// the time the test above gives the watermark to pass the first record.
	waitFor(t, 60*time.Second, fmt.Sprintf("split 0's task to report a watermark %d idle timeouts past the probe's first record", idleBound), func() (bool, string) {
		w := jm.reportedWatermark("gen-0")
		return w > first+idleBound*idleMs, fmt.Sprintf("gen-0 at %d, the first record at %d", w, first)
	})
	if _, low, high, _, _ := stats.get(0); low != operator.NoTimestamp || high != operator.NoTimestamp || stats.fired.Load() != 0 {
		t.Fatalf("the probe's watermark moved to %d (%d timers fired), want none: split 1 holds it back", high, stats.fired.Load())
	}
	if w := jm.reportedWatermark("probe-0"); w != 0 {
		t.Fatalf("the probe's task reported watermark %d, want none", w)
	}
}

// TestWatermarksSurviveARestore: a checkpointed generator -> probe job; checkpoint 1 keeps
// the source's watermark and the probe's (in their states). Both restored from it as attempt
// 1: the probe opens at the checkpointed watermark, never sees a lower one, and its watermark
// advances past it again; the restored source's first reported watermark is no lower than
// its checkpointed one.
func TestWatermarksSurviveARestore(t *testing.T) {
	stats := newProbeStats()
	operator.ReplaceTransform(t, "map", true, func(*pb.Operator, operator.Info) operator.Transform { return wmProbe{stats} })
	jm := startJM(t)
	ckdir := t.TempDir()
	tm := newTM(t, "tm1", jm, func(c *Config) { c.CheckpointDir = ckdir })
	c := client(t, tm)
	const job = "wmrestore"
	gen := &pb.Operator{Kind: &pb.Operator_EventGenerator{EventGenerator: &pb.EventGenerator{
		Seed: 1, Keys: 4, StartMs: 1_000_000, StepMs: 5, MaxDisorderMs: 20, RatePerSecond: 500}},
		EventTime: &pb.EventTime{MaxOutOfOrdernessMs: 20, WatermarkIntervalMs: 20}}
	probe := &pb.Operator{Kind: &pb.Operator_Map{Map: &pb.MapOperator{}}}
	ck := func(d *pb.TaskDeploymentDescriptor) *pb.TaskDeploymentDescriptor { d.Checkpointed = true; return d }
	probeTDD := func(attempt, producer string) *pb.TaskDeploymentDescriptor {
		return ck(deploy(job, "probe", 0, 1, attempt, 0, probe, gate("gen->probe", pipelined, channel("gen->probe", 0, 0, producer, tm.DataAddr()))))
	}
	genTDD := func(attempt string) *pb.TaskDeploymentDescriptor {
		return ck(deploy(job, "gen", 0, 1, attempt, 1, gen, nil, produces("gen->probe", 0, 1, forward, pipelined)))
	}
	submit(t, c, 1, probeTDD("probe-a", "gen-a"))
	submit(t, c, 1, genTDD("gen-a"))
	waitFor(t, 20*time.Second, "the probe's watermark", func() (bool, string) {
		_, _, high, _, _ := stats.get(0)
		return high > 1_000_000, fmt.Sprint(high)
	})
	if _, err := c.TriggerCheckpoint(context.Background(), &pb.TriggerCheckpointRequest{Epoch: 1, JobId: job, CheckpointId: 1, AttemptIds: []string{"gen-a", "probe-a"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "both tasks acknowledging checkpoint 1", func() (bool, string) {
		acks := jm.checkpointAcks(1)
		return len(acks) == 2, fmt.Sprint(keysOf(acks))
	})
	acks := jm.checkpointAcks(1)
	st, err := checkpoint.Open(ckdir, checkpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var srcState, probeState struct{ Watermark *int64 }
	for key, into := range map[string]any{"gen[0]": &srcState, "probe[0]": &probeState} {
		b, err := st.ReadChecksum(acks[key].GetStatePath(), acks[key].GetChecksum())
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, into); err != nil {
			t.Fatalf("%s's state %s: %v", key, b, err)
		}
	}
	if srcState.Watermark == nil || probeState.Watermark == nil || *probeState.Watermark > *srcState.Watermark {
		t.Fatalf("checkpointed watermarks: source %v, probe %v; want both, the probe's at most the source's", srcState.Watermark, probeState.Watermark)
	}
	srcWM, probeWM := *srcState.Watermark, *probeState.Watermark

	for _, a := range []string{"probe-a", "gen-a"} { // the consumer first: a producer cancelled first fails it
		if _, err := c.CancelTask(context.Background(), &pb.CancelTaskRequest{Epoch: 1, JobId: job, AttemptId: a}); err != nil {
			t.Fatal(err)
		}
		jm.waitState(t, a, canceled)
	}
	restored := func(d *pb.TaskDeploymentDescriptor, key string) *pb.TaskDeploymentDescriptor {
		d.AttemptNumber, d.RestoreCheckpointId, d.RestoreFrom = 1, 1, acks[key]
		return d
	}
	submit(t, c, 1, restored(probeTDD("probe-b", "gen-b"), "probe[0]"))
	submit(t, c, 1, restored(genTDD("gen-b"), "gen[0]"))
	waitFor(t, 20*time.Second, "the restored probe's watermark to pass the checkpointed one", func() (bool, string) {
		_, _, high, _, _ := stats.get(1)
		return high > probeWM, fmt.Sprintf("%d, checkpointed %d", high, probeWM)
	})
	if open, low, _, _, _ := stats.get(1); open != probeWM || low < probeWM {
		t.Fatalf("the restored probe opened at watermark %d and saw %d, want it to start at the checkpointed %d and never go lower", open, low, probeWM)
	}
	waitFor(t, 20*time.Second, "the restored source's reported watermark", func() (bool, string) {
		w := jm.reportedWatermark("gen-b")
		return w != 0, "none"
	})
	jm.mu.Lock()
	var reported []int64
	for _, b := range jm.beats {
		for _, d := range b.GetDeployed() {
			if d.GetAttemptId() == "gen-b" && d.GetWatermarkMs() != 0 {
				reported = append(reported, d.GetWatermarkMs())
			}
		}
	}
	jm.mu.Unlock()
	if reported[0] < srcWM {
		t.Fatalf("the restored source reported watermark %d first, below its checkpointed %d", reported[0], srcWM)
	}
	if probe := jm.reportedWatermark("probe-b"); probe != 0 && probe < probeWM {
		t.Fatalf("the restored probe's task reported %d, below the checkpointed %d", probe, probeWM)
	}
}

// TestWaitingSourceTakesPartInCheckpoints: a source task whose only split is idle waits for
// ever, emitting nothing; a triggered checkpoint's barrier is still injected (at a tick of
// its wait) and the task acknowledges the checkpoint.
func TestWaitingSourceTakesPartInCheckpoints(t *testing.T) {
	jm := startJM(t)
	tm := newTM(t, "tm1", jm, func(c *Config) { c.CheckpointDir = t.TempDir() })
	c := client(t, tm)
	for i, et := range []*pb.EventTime{nil, {WatermarkIntervalMs: 20}} {
		job, vertex, attempt := fmt.Sprintf("waiting-%d", i), fmt.Sprintf("gen%d", i), fmt.Sprintf("gen-1-%d", i)
		gen := &pb.Operator{Kind: &pb.Operator_EventGenerator{EventGenerator: &pb.EventGenerator{Seed: 1, IdleSplits: 1}}, EventTime: et}
		d := deploy(job, vertex, 1, 2, attempt, 0, gen, nil)
		d.Checkpointed = true
		submit(t, c, 1, d)
		jm.waitState(t, attempt, running)
		const id = 1
		if _, err := c.TriggerCheckpoint(context.Background(), &pb.TriggerCheckpointRequest{Epoch: 1, JobId: job, CheckpointId: id, AttemptIds: []string{attempt}}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 20*time.Second, fmt.Sprintf("the waiting source %s acknowledging checkpoint %d", attempt, id), func() (bool, string) {
			acks := jm.checkpointAcks(id)
			return acks[vertex+"[1]"] != nil, fmt.Sprint(keysOf(acks))
		})
		if _, err := c.CancelTask(context.Background(), &pb.CancelTaskRequest{Epoch: 1, JobId: job, AttemptId: attempt}); err != nil {
			t.Fatal(err)
		}
		jm.waitState(t, attempt, canceled)
	}
}
