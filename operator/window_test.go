package operator

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/jmcluster/jmcluster/transport/pb"
)

func windowSpec(w *pb.WindowOperator) *pb.Operator {
	return &pb.Operator{Kind: &pb.Operator_Window{Window: w}}
}

func tumbling(size, lateness int64, field string) *pb.Operator {
	return windowSpec(&pb.WindowOperator{Kind: pb.WindowKind_WINDOW_KIND_TUMBLING, SizeMs: size, AllowedLatenessMs: lateness, Field: field})
}

// ev is a record of key k, event time t and value {"v":n}.
func ev(k string, t int64, n any) Record {
	return Record{Key: []byte(k), Value: fmt.Appendf(nil, `{"v":%v}`, n), Time: t}
}

// results returns the values emitted since the last call, one per line, each followed by its
// record's event time.
func (h *harness) results() string {
	var b strings.Builder
	for _, r := range h.out {
		fmt.Fprintf(&b, "%s @%d\n", r.Value, r.Time)
	}
	h.out = nil
	return b.String()
}

// reasons returns the reasons of the dead letters since the last call, one per line.
func (h *harness) reasons() string {
	var b strings.Builder
	for _, r := range h.dead {
		var d DeadLetter
		if err := json.Unmarshal(r.Value, &d); err != nil {
			h.t.Fatalf("dead letter %q: %v", r.Value, err)
		}
		fmt.Fprintf(&b, "%s: %s\n", d.Value, d.Reason)
	}
	h.dead = nil
	return b.String()
}

func wantLines(t *testing.T, what, got string, want ...string) {
	t.Helper()
	w := strings.Join(want, "\n")
	if len(want) > 0 {
		w += "\n"
	}
	if got != w {
		t.Fatalf("%s:\n%s\nwant:\n%s", what, got, w)
	}
}

// TestWindowTumbling: records out of order within the watermark are counted in their
// windows [k*size, (k+1)*size) per key; a window's result comes when the watermark reaches
// end-1, at event time end-1; the end of input fires the rest; negative times floor.
func TestWindowTumbling(t *testing.T) {
	h := newHarness(t, tumbling(10, 0, "v"), nil)
	h.process(ev("a", 3, 5), ev("b", 12, 1), ev("a", 11, 7), ev("a", 1, -2), ev("a", -1, 3), ev("a", 9, 40))
	h.advance(8)
	wantLines(t, "at watermark 8", h.results(), `{"key":"a","start":-10,"end":0,"count":1,"sum":3,"min":3,"max":3,"avg":3} @-1`)
	h.advance(9)
	wantLines(t, "at watermark 9", h.results(),
		`{"key":"a","start":0,"end":10,"count":3,"sum":43,"min":-2,"max":40,"avg":14.333333333333334} @9`)
	h.process(ev("b", 19, 2))
	h.finish()
	wantLines(t, "at the end", h.results(),
		`{"key":"a","start":10,"end":20,"count":1,"sum":7,"min":7,"max":7,"avg":7} @19`,
		`{"key":"b","start":10,"end":20,"count":2,"sum":3,"min":1,"max":2,"avg":1.5} @19`)
	wantLines(t, "dead letters", h.reasons())

	// Count only: the value need not have a number.
	c := newHarness(t, tumbling(10, 0, ""), nil)
	c.process(Record{Key: []byte("k"), Value: []byte(`{"x":"y"}`), Time: 4}, Record{Key: []byte("k"), Value: []byte(`[1]`), Time: 5})
	c.finish()
	wantLines(t, "count only", c.results(), `{"key":"k","start":0,"end":10,"count":2} @9`)
}

// TestWindowSliding: a record is in size/slide windows, each fired at its own end.
func TestWindowSliding(t *testing.T) {
	h := newHarness(t, windowSpec(&pb.WindowOperator{Kind: pb.WindowKind_WINDOW_KIND_SLIDING, SizeMs: 30, SlideMs: 10, Field: "v"}), nil)
	h.process(ev("a", 25, 1), ev("a", 5, 2), ev("a", 31, 4))
	h.advance(29)
	wantLines(t, "at watermark 29", h.results(),
		`{"key":"a","start":-20,"end":10,"count":1,"sum":2,"min":2,"max":2,"avg":2} @9`,
		`{"key":"a","start":-10,"end":20,"count":1,"sum":2,"min":2,"max":2,"avg":2} @19`,
		`{"key":"a","start":0,"end":30,"count":2,"sum":3,"min":1,"max":2,"avg":1.5} @29`)
	h.finish()
	wantLines(t, "at the end", h.results(),
		`{"key":"a","start":10,"end":40,"count":2,"sum":5,"min":1,"max":4,"avg":2.5} @39`,
		`{"key":"a","start":20,"end":50,"count":2,"sum":5,"min":1,"max":4,"avg":2.5} @49`,
		`{"key":"a","start":30,"end":60,"count":1,"sum":4,"min":4,"max":4,"avg":4} @59`)
}

// TestWindowSessionMerge: records less than gap apart form one session; records gap apart
// do not; an out-of-order record bridging two sessions merges them into one, whose result is
// the only one emitted.
func TestWindowSessionMerge(t *testing.T) {
	op := windowSpec(&pb.WindowOperator{Kind: pb.WindowKind_WINDOW_KIND_SESSION, GapMs: 10, Field: "v"})
	h := newHarness(t, op, nil)
	h.process(ev("a", 0, 1), ev("a", 5, 2), ev("a", 18, 3), ev("b", 0, 1), ev("b", 10, 1))
	// a: [0, 15) and [18, 28); b: [0, 10) and [10, 20) (exactly gap apart: two sessions)
	h.advance(9)
	wantLines(t, "at watermark 9", h.results(), `{"key":"b","start":0,"end":10,"count":1,"sum":1,"min":1,"max":1,"avg":1} @9`)
	h.process(ev("a", 10, 4)) // [10, 20) bridges [0, 15) and [18, 28)
	h.advance(26)
	wantLines(t, "at watermark 26", h.results(), `{"key":"b","start":10,"end":20,"count":1,"sum":1,"min":1,"max":1,"avg":1} @19`)
	h.process(ev("a", 26, 5)) // extends it to [0, 36)
	h.advance(27)
	wantLines(t, "at watermark 27 (the old end passed)", h.results())
	h.advance(35)
	wantLines(t, "at watermark 35", h.results(), `{"key":"a","start":0,"end":36,"count":5,"sum":15,"min":1,"max":5,"avg":3} @35`)
	if got := len(h.op.ctx.timers); got != 0 {
		t.Fatalf("timers left after every session fired: %d (the merged ones' were not deleted)", got)
	}
	h.finish()
	wantLines(t, "at the end", h.results())
}

// TestWindowLateness: a record for a window that fired, within allowed lateness, updates it
// and its result is emitted again at once with "update":N; once the watermark passes
// end-1+lateness the window is gone and a record for it is a dead letter. Without lateness
// that happens when the window fires. Before any watermark nothing is late.
func TestWindowLateness(t *testing.T) {
	h := newHarness(t, tumbling(10, 5, "v"), nil)
	h.process(ev("k", 900, 1)) // no watermark yet: not late, whatever the time
	h.process(ev("k", 1, 1), ev("k", 2, 2))
	h.advance(9)
	wantLines(t, "fired", h.results(), `{"key":"k","start":0,"end":10,"count":2,"sum":3,"min":1,"max":2,"avg":1.5} @9`)
	h.process(ev("k", 3, 3))
	wantLines(t, "first update", h.results(), `{"key":"k","start":0,"end":10,"count":3,"sum":6,"min":1,"max":3,"avg":2,"update":1} @9`)
	h.advance(13)
	h.process(ev("k", 4, 4))
	wantLines(t, "second update", h.results(), `{"key":"k","start":0,"end":10,"count":4,"sum":10,"min":1,"max":4,"avg":2.5,"update":2} @9`)
	// A window first seen after its end, within lateness, fires at once (no update field).
	h.process(ev("n", 5, 6))
	wantLines(t, "a new window past its end", h.results(), `{"key":"n","start":0,"end":10,"count":1,"sum":6,"min":6,"max":6,"avg":6} @9`)
	h.advance(14) // end-1+lateness: the windows' state is dropped
	h.process(ev("k", 5, 5))
	wantLines(t, "after the lateness", h.results())
	wantLines(t, "dead letters", h.reasons(), `{"v":5}: late: window [0, 10) of k closed at watermark 14`)
	h.finish()
	wantLines(t, "at the end", h.results(), `{"key":"k","start":900,"end":910,"count":1,"sum":1,"min":1,"max":1,"avg":1} @909`)

	none := newHarness(t, tumbling(10, 0, "v"), nil)
	none.process(ev("k", 1, 1))
	none.advance(9)
	none.process(ev("k", 2, 1), ev("k", 10, 1))
	none.finish()
	wantLines(t, "no lateness", none.results(),
		`{"key":"k","start":0,"end":10,"count":1,"sum":1,"min":1,"max":1,"avg":1} @9`,
		`{"key":"k","start":10,"end":20,"count":1,"sum":1,"min":1,"max":1,"avg":1} @19`)
	wantLines(t, "no lateness: dead letters", none.reasons(), `{"v":1}: late: window [0, 10) of k closed at watermark 9`)

	// A late session record that merges into a session still within its lateness is not late.
	s := newHarness(t, windowSpec(&pb.WindowOperator{Kind: pb.WindowKind_WINDOW_KIND_SESSION, GapMs: 100, AllowedLatenessMs: 50}), nil)
	s.process(Record{Key: []byte("k"), Value: []byte(`{}`), Time: 100})
	s.advance(245) // fired at 199; dropped at 249
	s.process(Record{Key: []byte("k"), Value: []byte(`{}`), Time: 50}, Record{Key: []byte("k"), Value: []byte(`{}`), Time: -60})
	wantLines(t, "session", s.results(),
		`{"key":"k","start":100,"end":200,"count":1} @199`,
		`{"key":"k","start":50,"end":200,"count":2,"update":1} @199`)
	wantLines(t, "session: dead letters", s.reasons(), `{}: late: session window [-60, 40) of k closed at watermark 245`)
}

// TestWindowDeadLetters: a value that is not JSON, lacks the field or holds no number there,
// or a record without event time, goes to the dead letters with its reason, and counts in no
// window.
func TestWindowDeadLetters(t *testing.T) {
	h := newHarness(t, tumbling(10, 0, "v"), nil)
	h.process(
		Record{Key: []byte("k"), Value: []byte(`{"v":`), Time: 1},
		Record{Key: []byte("k"), Value: []byte(`{"w":1}`), Time: 1},
		Record{Key: []byte("k"), Value: []byte(`{"v":"12"}`), Time: 1},
		Record{Key: []byte("k"), Value: []byte(`{"v":{"a":1}}`), Time: 1},
		Record{Key: []byte("k"), Value: []byte(`{"v":1e999}`), Time: 1},
		Record{Key: []byte("k"), Value: []byte(`{"v":1}`), Time: NoTimestamp},
		ev("k", 2, 8),
	)
	wantLines(t, "dead letters", h.reasons(),
		`{"v":: not valid JSON`,
		`{"w":1}: lacks the field v`,
		`{"v":"12"}: the field v is "12", not a number`,
		`{"v":{"a":1}}: the field v is {"a":1}, not a number`,
		`{"v":1e999}: the field v: 1e999 is out of the range of a float64`,
		`{"v":1}: has no event time`)
	h.finish()
	wantLines(t, "results", h.results(), `{"key":"k","start":0,"end":10,"count":1,"sum":8,"min":8,"max":8,"avg":8} @9`)

	// Without a dead-letter output the task fails, naming the record and the reason.
	o, err := New(tumbling(10, 0, "v"), Info{Vertex: "w"})
	if err != nil {
		t.Fatal(err)
	}
	err = o.Process(Record{Key: []byte("k"), Value: []byte(`nope`), Time: 1}, func(Record) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "not valid JSON") {
		t.Fatalf("no dead-letter output: %v", err)
	}
}

// TestWindowFieldPathsAndNumbers: a field path is names separated by dots, taken literally
// (gjson's wildcards and modifiers are escaped); integers stay exact integers, a fraction or
// an int64 overflow makes the sums floats, written as encoding/json writes them.
func TestWindowFieldPathsAndNumbers(t *testing.T) {
	for _, c := range []struct{ field, value, want string }{
		{"a*b", `{"axb":1,"a*b":3}`, `"sum":3`},
		{"@this", `{"@this":4}`, `"sum":4`},
		{"x.y", `{"x":{"y":5}}`, `"sum":5`},
		{"items.1", `{"items":[1,6]}`, `"sum":6`},
		{"a#", `{"a#":7,"a":[1]}`, `"sum":7`},
	} {
		h := newHarness(t, tumbling(10, 0, c.field), nil)
		h.process(Record{Key: []byte("k"), Value: []byte(c.value), Time: 1})
		h.finish()
		if got := h.results(); !strings.Contains(got, c.want) {
			t.Errorf("field %q of %s: %s, want %s", c.field, c.value, got, c.want)
		}
		if d := h.reasons(); d != "" {
			t.Errorf("field %q of %s: dead letter %s", c.field, c.value, d)
		}
	}
	h := newHarness(t, tumbling(10, 0, "v"), nil)
	h.process(ev("f", 1, 1.5), ev("f", 2, 2), ev("f", 3, "1e-7"),
		ev("i", 1, 9223372036854775807), ev("i", 2, 1),
		ev("k", 1, "\"é\""))
	h.finish()
	wantLines(t, "floats", h.results(),
		`{"key":"f","start":0,"end":10,"count":3,"sum":3.5000001,"min":1e-7,"max":2,"avg":1.1666667}`+" @9",
		`{"key":"i","start":0,"end":10,"count":2,"sum":9223372036854776000,"min":1,"max":9223372036854776000,"avg":4611686018427388000}`+" @9")
	wantLines(t, "dead letters", h.reasons(), `{"v":"é"}: the field v is "é", not a number`)

	// A key of any bytes is a JSON string in the result.
	q := newHarness(t, tumbling(10, 0, ""), nil)
	q.process(Record{Key: []byte("a\"b\\\n\xff"), Value: []byte(`{}`), Time: 1})
	q.finish()
	var res struct{ Key string }
	if err := json.Unmarshal(q.out[0].Value, &res); err != nil || res.Key != "a\"b\\\n\uFFFD" {
		t.Fatalf("key: %q, %v", q.out[0].Value, err)
	}
}

// step is one input of a task: a record, or the watermark moving to wm.
type step struct {
	r    Record
	wm   int64
	isWM bool
}

// generatedSteps is n generated events of 30 keys with up to 300 ms of disorder, and after
// every 25th the watermark 100 ms behind the highest event time seen: some records are late.
func generatedSteps(n int64) []step {
	g := NewGenerator(&pb.EventGenerator{Seed: 11, Keys: 30, KeySkew: 1, StartMs: 1_700_000_000_000, StepMs: 7, MaxDisorderMs: 300})
	var out []step
	hi := NoTimestamp
	for i := range n {
		r := g.Event(0, i).Record(0, i)
		hi = max(hi, r.Time)
		out = append(out, step{r: r})
		if i%25 == 24 {
			out = append(out, step{wm: hi - 100 - 1, isWM: true})
		}
	}
	return out
}

// run feeds steps to h.
func (h *harness) run(steps []step) {
	h.t.Helper()
	for _, s := range steps {
		if s.isWM {
			h.advance(s.wm)
		} else {
			h.process(s.r)
		}
	}
}

// TestWindowExactlyOnceAcrossRestore: a window operator restored from a snapshot and fed
// again what came after it (as a restored region is, its watermark restored) emits, after
// what the first one emitted up to the snapshot, exactly what a run without failure emits:
// every window result and every dead letter once, in the same order.
func TestWindowExactlyOnceAcrossRestore(t *testing.T) {
	steps := generatedSteps(1500)
	for _, c := range []struct {
		name                 string
		op                   *pb.Operator
		updates, deadLetters bool // the input makes late updates, dead letters
	}{
		{"tumbling with lateness", tumbling(1000, 80, "amount"), true, true},
		{"tumbling", tumbling(500, 0, "amount"), false, true},
		{"sliding", windowSpec(&pb.WindowOperator{Kind: pb.WindowKind_WINDOW_KIND_SLIDING, SizeMs: 1000, SlideMs: 250, AllowedLatenessMs: 60, Field: "amount"}), true, false},
		{"session", windowSpec(&pb.WindowOperator{Kind: pb.WindowKind_WINDOW_KIND_SESSION, GapMs: 60, AllowedLatenessMs: 30, Field: "amount"}), true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ref := newHarness(t, c.op, nil)
			ref.run(steps)
			ref.finish()
			wantOut, wantDead := ref.results(), ref.reasons()
			if n := strings.Count(wantOut, "\n"); n < 100 || strings.Contains(wantOut, `"update":1`) != c.updates || strings.Contains(wantDead, "late: ") != c.deadLetters {
				t.Fatalf("the input does not exercise what it should (updates %v, dead letters %v): %d results, dead letters:\n%s", c.updates, c.deadLetters, n, wantDead)
			}
			for cut := 0; cut < len(steps); cut += 130 {
				for !steps[cut].isWM {
					cut++
				}
				cut++ // right after a watermark
				first := newHarness(t, c.op, nil)
				first.run(steps[:cut])
				state := first.snapshot()
				before, beforeDead := first.results(), first.reasons()
				first.run(steps[cut:]) // lost with the failure: its output is never committed

				again := newHarness(t, c.op, state)
				again.advance(steps[cut-1].wm) // the restored watermark: its timers fired before the snapshot
				if got := again.results(); got != "" {
					t.Fatalf("cut %d: the restored watermark fired again:\n%s", cut, got)
				}
				again.run(steps[cut:])
				again.finish()
				if got := before + again.results(); got != wantOut {
					t.Fatalf("cut %d: results differ from a run without restore:\n%s", cut, firstDiff(got, wantOut))
				}
				if got := beforeDead + again.reasons(); got != wantDead {
					t.Fatalf("cut %d: dead letters differ from a run without restore:\n%s", cut, firstDiff(got, wantDead))
				}
			}
		})
	}
}

// firstDiff shows the first line where got and want differ.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range min(len(g), len(w)) {
		if g[i] != w[i] {
			return fmt.Sprintf("line %d:\n got  %s\n want %s", i+1, g[i], w[i])
		}
	}
	return fmt.Sprintf("%d lines, want %d", len(g), len(w))
}

// TestWindowStateFormat: a key's windows read back as written, integers and floats alike; a
// value of another format fails the task with what it is, never read as windows.
func TestWindowStateFormat(t *testing.T) {
	ws := []window{
		{start: -20, end: 10, count: 3, emitted: 2, flags: winDirty, sumI: -9, minI: -5, maxI: 1},
		{start: 10, end: 40, count: 1, flags: winFloat, sumF: 1.25, minF: 1.25, maxF: 1.25},
		{start: 1 << 62, end: 1<<62 + 60_000, count: 7},
	}
	b := encodeWindows(nil, ws)
	if len(b) != 1+3*windowBytes {
		t.Fatalf("%d bytes for 3 windows, want %d", len(b), 1+3*windowBytes)
	}
	back, err := decodeWindows(nil, b)
	if err != nil || fmt.Sprint(back) != fmt.Sprint(ws) {
		t.Fatalf("read back %v (%v), want %v", back, err, ws)
	}
	for _, bad := range [][]byte{{2}, b[:len(b)-1]} {
		if _, err := decodeWindows(nil, bad); err == nil || !strings.Contains(err.Error(), "not the format of this build") {
			t.Fatalf("%d bytes of version %d: %v", len(bad), bad[0], err)
		}
	}

	// Floats and sessions through a snapshot.
	op := windowSpec(&pb.WindowOperator{Kind: pb.WindowKind_WINDOW_KIND_SESSION, GapMs: 10, Field: "v"})
	h := newHarness(t, op, nil)
	h.process(ev("a", 0, 0.5), ev("a", 4, 2), ev("b", 3, 7))
	again := newHarness(t, op, h.snapshot())
	again.process(ev("a", 12, 1))
	again.finish()
	wantLines(t, "restored", again.results(),
		`{"key":"b","start":3,"end":13,"count":1,"sum":7,"min":7,"max":7,"avg":7} @12`,
		`{"key":"a","start":0,"end":22,"count":3,"sum":3.5,"min":0.5,"max":2,"avg":1.1666666666666667} @21`)
}

// TestWindowFloatsAsEncodingJSON: a float64 of a result is the text encoding/json writes.
func TestWindowFloatsAsEncodingJSON(t *testing.T) {
	for _, f := range []float64{0, -0.5, 1, 17, 14.333333333333334, 1e-7, 1.5e-9, 123456789.125, 1e20, 1e21, -2.5e300, 5e-324} {
		want, _ := json.Marshal(f)
		if got := appendFloat(nil, f); string(got) != string(want) {
			t.Errorf("%v: %s, encoding/json %s", f, got, want)
		}
	}
}
