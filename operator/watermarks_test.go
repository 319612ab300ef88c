package operator

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// wmOf returns the control record tick gave, as a string: "wm 12", "idle" or "-".
func wmOf(r Record, ok bool) string {
	switch {
	case !ok:
		return "-"
	case r.Idle:
		return "idle"
	default:
		return "wm " + FormatKey(Int64Bytes(r.Time))
	}
}

// TestSourceClockBoundedOutOfOrderness: a split's watermark is its highest event time minus
// the out-of-orderness minus 1; the task's is the lowest over its splits; a tick emits it
// only when it advanced; a split that emitted nothing holds the task back.
func TestSourceClockBoundedOutOfOrderness(t *testing.T) {
	t0 := time.Unix(1000, 0)
	c := newSourceClock(&pb.EventTime{MaxOutOfOrdernessMs: 10}, 2, t0)
	c.record(0, 100)
	if got := wmOf(c.tick(t0.Add(time.Millisecond))); got != "-" {
		t.Fatalf("split 1 has emitted nothing, yet the tick gave %s", got)
	}
	c.record(1, 50)
	c.record(0, 90) // out of order: the highest stays 100
	if got := wmOf(c.tick(t0.Add(2 * time.Millisecond))); got != "wm 39" {
		t.Fatalf("tick: %s, want wm 39 (min(100, 50) - 10 - 1)", got)
	}
	if got := wmOf(c.tick(t0.Add(3 * time.Millisecond))); got != "-" {
		t.Fatalf("a tick without progress gave %s", got)
	}
	c.record(1, 200)
	if got := wmOf(c.tick(t0.Add(4 * time.Millisecond))); got != "wm 89" {
		t.Fatalf("tick: %s, want wm 89 (split 0 now the lowest)", got)
	}
	// Never back: a lower time changes nothing.
	c.record(0, 10)
	c.record(1, 10)
	if got := wmOf(c.tick(t0.Add(5 * time.Millisecond))); got != "-" {
		t.Fatalf("lower times gave %s", got)
	}
	// An ended split no longer holds the others back; all ended: nothing (Run emits the final one).
	c.end(0)
	if got := wmOf(c.tick(t0.Add(6 * time.Millisecond))); got != "wm 189" {
		t.Fatalf("split 0 ended: %s, want wm 189", got)
	}
	c.end(1)
	if got := wmOf(c.tick(t0.Add(7 * time.Millisecond))); got != "-" {
		t.Fatalf("every split ended: %s", got)
	}
	// Near the smallest time the watermark saturates instead of wrapping.
	c = newSourceClock(&pb.EventTime{MaxOutOfOrdernessMs: 10}, 1, t0)
	c.record(0, NoTimestamp+5)
	if got := wmOf(c.tick(t0)); got != "-" {
		t.Fatalf("a time near the smallest gave %s", got)
	}
}

// TestSourceClockIdleness: a split without a record for the idle timeout stops holding the
// task back; when every split is idle the task says so once; a record makes it active again
// and its watermark is said again even if it did not advance.
func TestSourceClockIdleness(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	c := newSourceClock(&pb.EventTime{IdleTimeoutMs: 300}, 2, t0)
	steps := []struct {
		ms     int
		record map[int]int64
		want   string
	}{
		{100, map[int]int64{0: 1000}, "-"}, // split 1 has said nothing, not yet idle
		{250, map[int]int64{0: 1100}, "-"},
		{299, nil, "-"},
		{300, map[int]int64{0: 1200}, "wm 1199"}, // split 1 idle at 300 ms: split 0 alone
		{500, map[int]int64{0: 1300}, "wm 1299"},
		{700, nil, "-"},                          // split 0's last record was seen at 500
		{800, nil, "idle"},                       // both idle
		{900, nil, "-"},                          // said once
		{950, map[int]int64{0: 1250}, "wm 1299"}, // active again: said again, not lower
		{1000, map[int]int64{1: 5000}, "-"},      // split 1 active again: holds at min(1299, 4999)
		{1100, map[int]int64{0: 1400, 1: 5100}, "wm 1399"},
	}
	for _, s := range steps {
		for sp, tm := range s.record {
			c.record(sp, tm)
		}
		if got := wmOf(c.tick(at(s.ms))); got != s.want {
			t.Fatalf("at %d ms: %s, want %s", s.ms, got, s.want)
		}
	}
	// Without idle_timeout_ms a split is never idle.
	c = newSourceClock(&pb.EventTime{}, 2, t0)
	c.record(0, 10)
	if got := wmOf(c.tick(at(24 * 3600 * 1000))); got != "-" {
		t.Fatalf("a day later without idleness: %s", got)
	}
}

// TestTimeReader: the event time at time_path in each format, and the reasons of a record
// whose time cannot be read.
func TestTimeReader(t *testing.T) {
	rec := func(v string) Record { return Record{Value: []byte(v), Time: NoTimestamp} }
	for _, c := range []struct {
		path   string
		format pb.TimeFormat
		value  string
		want   int64
		reason string
	}{
		{"ts", 0, `{"ts":1700000000123}`, 1700000000123, ""},
		{"ts", pb.TimeFormat_TIME_FORMAT_UNIX_MS, `{"ts":1.5e3}`, 1500, ""},
		{"event.time", 0, `{"event":{"time":-5}}`, -5, ""},
		{"items.1", 0, `{"items":[1,2]}`, 2, ""},
		{"a*b", 0, `{"a*b":7,"axb":8}`, 7, ""},
		{"ts", pb.TimeFormat_TIME_FORMAT_UNIX_SECONDS, `{"ts":1700000000.25}`, 1700000000250, ""},
		{"ts", pb.TimeFormat_TIME_FORMAT_UNIX_SECONDS, `{"ts":-1.5}`, -1500, ""},
		{"ts", pb.TimeFormat_TIME_FORMAT_UNIX_SECONDS, `{"ts":1.7e9}`, 1700000000000, ""},
		{"ts", pb.TimeFormat_TIME_FORMAT_RFC3339, `{"ts":"2026-12-06T10:00:00.250Z"}`, time.Date(2026, 12, 6, 10, 0, 0, 250e6, time.UTC).UnixMilli(), ""},
		{"ts", 0, `{"user":"u"}`, 0, "lacks the field ts"},
		{"ts", 0, `{"ts":"abc"}`, 0, `field ts is "abc", not a number of ms`},
		{"ts", 0, `{"ts":1e300}`, 0, `field ts is 1e300, not a number of ms`},
		{"ts", 0, `not json`, 0, "not valid JSON"},
		{"ts", pb.TimeFormat_TIME_FORMAT_UNIX_SECONDS, `{"ts":true}`, 0, "field ts is true, not a number of seconds"},
		{"ts", pb.TimeFormat_TIME_FORMAT_RFC3339, `{"ts":"yesterday"}`, 0, `field ts is "yesterday", not an RFC 3339 time`},
		{"ts", 0, `{"ts":"` + strings.Repeat("x", 100) + `"}`, 0, `field ts is "` + strings.Repeat("x", 63) + `...`},
	} {
		tr := newTimeReader(&pb.EventTime{TimePath: c.path, TimeFormat: c.format})
		got, reason := tr.read(rec(c.value))
		if (reason == "") != (c.reason == "") || (reason == "" && got != c.want) {
			t.Errorf("%s of %s: %d %q, want %d %q", c.path, c.value, got, reason, c.want, c.reason)
		}
		if c.reason != "" && !strings.Contains(reason, c.reason) {
			t.Errorf("%s of %s: reason %q, want %q", c.path, c.value, reason, c.reason)
		}
	}
	if _, reason := newTimeReader(&pb.EventTime{}).read(Record{Time: NoTimestamp}); !strings.Contains(reason, "has no event time") {
		t.Errorf("a record without time and no path: %q", reason)
	}
}

// runEventTime runs the generator of cfg with event time et as subtask sub of par (from
// restored state) until stop says so; it returns what the source emitted and its state at
// the stop.
func runEventTime(t *testing.T, cfg *pb.EventGenerator, et *pb.EventTime, sub, par int32, restored []byte, info Info, stop func([]Record) bool) ([]Record, []byte) {
	t.Helper()
	op := generatorOp(cfg)
	op.EventTime = et
	info.Subtask, info.Parallelism, info.Restored = sub, par, restored
	src, err := NewSource(op, info)
	if err != nil {
		t.Fatal(err)
	}
	var out []Record
	var state []byte
	errStop := errors.New("stop")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = src.Run(ctx, func(r Record) error {
		out = append(out, r)
		if stop != nil && stop(out) {
			state, err = src.(Stateful).SnapshotState()
			if err != nil {
				t.Fatal(err)
			}
			return errStop
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		t.Fatalf("run: %v; emitted %d records", err, len(out))
	}
	return out, state
}

func watermarks(rs []Record) []int64 {
	var out []int64
	for _, r := range rs {
		if r.Watermark && !r.Idle {
			out = append(out, r.Time)
		}
	}
	return out
}

// TestSourceEmitsWatermarksAndTheFinalOne: a bounded generator with event time emits its
// records with their event times, watermarks that rise and never pass a record emitted after
// them minus the out-of-orderness, and MaxWatermark last.
func TestSourceEmitsWatermarksAndTheFinalOne(t *testing.T) {
	cfg := &pb.EventGenerator{Seed: 1, Count: 400, StartMs: 1_000_000, StepMs: 10, MaxDisorderMs: 30, RatePerSecond: 2000}
	et := &pb.EventTime{MaxOutOfOrdernessMs: 30, WatermarkIntervalMs: 10}
	out, _ := runEventTime(t, cfg, et, 0, 1, nil, Info{}, nil)
	wms := watermarks(out)
	if len(wms) < 3 || wms[len(wms)-1] != MaxWatermark || !out[len(out)-1].Watermark {
		t.Fatalf("watermarks %v (the last record %+v), want several and MaxWatermark last", wms, out[len(out)-1])
	}
	wm, n := int64(NoTimestamp), 0
	for _, r := range out {
		if r.Watermark {
			if r.Time <= wm {
				t.Fatalf("watermark %d after %d", r.Time, wm)
			}
			wm = r.Time
			continue
		}
		n++
		if r.Time <= wm {
			t.Fatalf("record %d at %d after watermark %d: the bound of disorder is 30 ms, the out-of-orderness 30", r.Seq, r.Time, wm)
		}
	}
	if n != 400 {
		t.Fatalf("%d records, want 400", n)
	}
}

// TestSourceWatermarkSurvivesARestore: the state keeps the highest event time and the
// watermark emitted; a source restored from it says that watermark again first and never
// emits a lower one. An old state (positions only) still restores.
func TestSourceWatermarkSurvivesARestore(t *testing.T) {
	cfg := &pb.EventGenerator{Seed: 3, Count: 1000, StartMs: 5_000, StepMs: 1, RatePerSecond: 5000}
	et := &pb.EventTime{WatermarkIntervalMs: 5}
	out, state := runEventTime(t, cfg, et, 0, 1, nil, Info{}, func(rs []Record) bool { return len(watermarks(rs)) == 3 })
	last := watermarks(out)[2]
	var st struct {
		Next, High, Watermark *int64
	}
	if err := json.Unmarshal(state, &st); err != nil || st.Next == nil || st.High == nil || st.Watermark == nil || *st.Watermark != last {
		t.Fatalf("state %s (%v), want next, high and watermark %d", state, err, last)
	}
	again, _ := runEventTime(t, cfg, et, 0, 1, state, Info{}, func(rs []Record) bool { return len(watermarks(rs)) == 1 })
	if w := watermarks(again); len(w) != 1 || w[0] < last {
		t.Fatalf("restored at watermark %d, the first watermark is %v", last, w)
	}
	// The list format keeps each split's highest time too.
	cfg2 := &pb.EventGenerator{Seed: 3, Count: 50, StartMs: 5_000, StepMs: 1, RatePerSecond: 1000}
	listed, _ := runEventTime(t, cfg2, et, 0, 1, []byte(`{"splits":[{"id":0,"next":7,"high":9000}],"watermark":8000}`), Info{}, nil)
	if w := watermarks(listed); len(w) < 2 || w[0] != 8999 {
		t.Fatalf("restored at high 9000, watermark 8000: watermarks %v, want 8999 first", w)
	}
	// Old states, without times, restore.
	old, _ := runEventTime(t, cfg2, et, 0, 1, []byte(`{"next":40}`), Info{}, nil)
	if n := len(old) - len(watermarks(old)); n != 10 {
		t.Fatalf("restored from an old state at 40: %d records, want 10", n)
	}
}

// TestSourceIdleSplitTicks: a generator whose last split is idle runs its other split,
// then waits; its task says it is idle once the idle timeout passes and the watermark does
// not fall back.
func TestSourceIdleSplitTicks(t *testing.T) {
	cfg := &pb.EventGenerator{Seed: 3, Count: 20, StartMs: 5_000, StepMs: 1, IdleSplits: 1}
	et := &pb.EventTime{WatermarkIntervalMs: 5, IdleTimeoutMs: 20}
	// Subtask 0 of parallelism 1 with 2 splits is impossible (one split per subtask), so take
	// parallelism 2: subtask 1 reads the idle split only.
	out, _ := runEventTime(t, cfg, et, 1, 2, nil, Info{}, func(rs []Record) bool { return rs[len(rs)-1].Idle })
	if len(out) != 1 || !out[0].Idle {
		t.Fatalf("the idle split's task emitted %+v, want the idle marker only", out)
	}
	out, _ = runEventTime(t, cfg, et, 0, 2, nil, Info{}, nil)
	if w := watermarks(out); w[len(w)-1] != MaxWatermark {
		t.Fatalf("the active split's task: watermarks %v, want MaxWatermark last", w)
	}
}

// TestSourceDeadLettersAnUnreadableTime: a record whose time cannot be read goes to the
// dead-letter output with the reason, and the split's position moves past it.
func TestSourceDeadLettersAnUnreadableTime(t *testing.T) {
	cfg := &pb.EventGenerator{Seed: 3, Count: 5}
	var dead []DeadLetter
	info := Info{Vertex: "gen", DeadLetters: func(r Record) error {
		var d DeadLetter
		if err := json.Unmarshal(r.Value, &d); err != nil {
			return err
		}
		dead = append(dead, d)
		return nil
	}}
	out, _ := runEventTime(t, cfg, &pb.EventTime{TimePath: "time"}, 0, 1, nil, info, nil)
	if len(dead) != 5 || dead[0].Reason != "lacks the field time" || len(out) != 1 || out[0].Time != MaxWatermark {
		t.Fatalf("dead letters %+v, emitted %+v", dead, out)
	}
	out, _ = runEventTime(t, cfg, &pb.EventTime{TimePath: "ts"}, 0, 1, nil, Info{}, nil)
	if len(out) != 6 || out[0].Time != NewGenerator(cfg).Event(0, 0).TimeMs {
		t.Fatalf("with time_path ts: %+v", out)
	}
	// Without a dead-letter output the task fails, naming the record and the reason.
	op := generatorOp(cfg)
	op.EventTime = &pb.EventTime{TimePath: "time"}
	src, err := NewSource(op, Info{Vertex: "gen"})
	if err != nil {
		t.Fatal(err)
	}
	err = src.Run(context.Background(), func(Record) error { return nil })
	if !errors.Is(err, ErrNoDeadLetterOutput) || !strings.Contains(err.Error(), "lacks the field time") {
		t.Fatalf("run without a dead-letter output: %v", err)
	}
}

// timerAt registers a timer at each record's value and emits the time of each timer that
// fires.
type timerAt struct{}

func (timerAt) Process(ctx *Context, r Record) error {
	n, _ := Int64Of(r.Value)
	ctx.RegisterTimer(n)
	return nil
}

func (timerAt) OnTimer(ctx *Context, at int64) error {
	return ctx.Emit(Record{Key: ctx.Key(), Value: ctx.Int64Bytes(at), Time: at})
}

// TestTransformWatermark: AdvanceWatermark moves the Context's watermark and fires the timers
// at or before it, in order; the keyed state carries the watermark, a restored transform
// starts at it, and a state without one (before event time) restores as NoTimestamp.
func TestTransformWatermark(t *testing.T) {
	o, err := newTransformOperator("timer_at", timerAt{}, true, Info{})
	if err != nil {
		t.Fatal(err)
	}
	var fired []int64
	out := func(r Record) error { n, _ := Int64Of(r.Value); fired = append(fired, n); return nil }
	for _, at := range []int64{30, 10, 20, 50} {
		if err := o.Process(NumericRecord(1, at, 0, 0), out); err != nil {
			t.Fatal(err)
		}
	}
	var w Watermarker = o
	if w.Watermark() != NoTimestamp {
		t.Fatalf("watermark before the first: %d", w.Watermark())
	}
	if err := w.AdvanceWatermark(25, out); err != nil {
		t.Fatal(err)
	}
	if err := w.AdvanceWatermark(5, out); err != nil { // never back
		t.Fatal(err)
	}
	if w.Watermark() != 25 || len(fired) != 2 || fired[0] != 10 || fired[1] != 20 {
		t.Fatalf("at 25: watermark %d, fired %v; want 25 and [10 20]", w.Watermark(), fired)
	}
	state, err := o.SnapshotState()
	if err != nil || !strings.Contains(string(state), `"watermark":25`) {
		t.Fatalf("state %s (%v), want the watermark 25 in it", state, err)
	}
	again, err := newTransformOperator("timer_at", timerAt{}, true, Info{Restored: state})
	if err != nil {
		t.Fatal(err)
	}
	if again.Watermark() != 25 {
		t.Fatalf("restored watermark %d, want 25", again.Watermark())
	}
	fired = nil
	if err := again.AdvanceWatermark(40, out); err != nil || len(fired) != 1 || fired[0] != 30 {
		t.Fatalf("restored, at 40: fired %v (%v), want [30]", fired, err)
	}
	old, err := newTransformOperator("timer_at", timerAt{}, true, Info{Restored: []byte(`{"keys":[],"values":[],"timers":[]}`)})
	if err != nil || old.Watermark() != NoTimestamp {
		t.Fatalf("an old state: watermark %d (%v), want NoTimestamp", old.Watermark(), err)
	}
}
