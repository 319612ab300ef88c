package operator

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/jmcluster/jmcluster/transport/pb"
)

func generatorOp(g *pb.EventGenerator) *pb.Operator {
	return &pb.Operator{Kind: &pb.Operator_EventGenerator{EventGenerator: g}}
}

// runGenerator runs the generator of g as subtask sub of par, from restored state, and returns
// its records; stopAt > 0 stops it (with the source's state then) at that many records.
func runGenerator(t *testing.T, g *pb.EventGenerator, sub, par int32, restored []byte, stopAt int) ([]Record, []byte) {
	t.Helper()
	src, err := NewSource(generatorOp(g), Info{Subtask: sub, Parallelism: par, Restored: restored})
	if err != nil {
		t.Fatal(err)
	}
	var out []Record
	var state []byte
	errStop := errors.New("stop")
	err = src.Run(context.Background(), func(r Record) error {
		if stopAt > 0 && len(out) == stopAt {
			state, err = src.(Stateful).SnapshotState() // the barrier in front of r
			if err != nil {
				t.Fatal(err)
			}
			return errStop
		}
		out = append(out, r)
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		t.Fatal(err)
	}
	return out, state
}

// TestEventGeneratorIsAFunctionOfSeedSplitAndIndex: the records are GeneratedEvent's, the
// same for the same seed, and different for another seed or split; a source restored from a
// position emits exactly the records after it.
func TestEventGeneratorIsAFunctionOfSeedSplitAndIndex(t *testing.T) {
	cfg := &pb.EventGenerator{Seed: 42, Count: 500, Keys: 50, StartMs: 1_700_000_000_000, StepMs: 10, MaxDisorderMs: 250, MaxAmount: 20}
	a, _ := runGenerator(t, cfg, 1, 2, nil, 0)
	b, _ := runGenerator(t, cfg, 1, 2, nil, 0)
	if len(a) != 500 || !reflect.DeepEqual(a, b) {
		t.Fatalf("two runs: %d and %d records, equal %v", len(a), len(b), reflect.DeepEqual(a, b))
	}
	g := NewGenerator(cfg)
	for i, r := range a {
		e := g.Event(1, int64(i))
		if e != GeneratedEvent(cfg, 1, int64(i)) || !reflect.DeepEqual(r, e.Record(1, int64(i))) {
			t.Fatalf("record %d: %+v, event %+v", i, r, e)
		}
		var v struct {
			User   string `json:"user"`
			Amount int64  `json:"amount"`
			TS     int64  `json:"ts"`
		}
		if err := json.Unmarshal(r.Value, &v); err != nil || v.User != string(r.Key) || v.TS != r.Time || v.Amount != e.Amount ||
			r.Origin != 1 || r.Seq != int64(i) || v.Amount < 1 || v.Amount > 20 {
			t.Fatalf("record %d: %s key %s time %d origin %d seq %d (%v)", i, r.Value, r.Key, r.Time, r.Origin, r.Seq, err)
		}
	}
	other, _ := runGenerator(t, &pb.EventGenerator{Seed: 43, Count: 500, Keys: 50, StartMs: 1_700_000_000_000, StepMs: 10, MaxDisorderMs: 250, MaxAmount: 20}, 1, 2, nil, 0)
	split0, _ := runGenerator(t, cfg, 0, 2, nil, 0)
	if reflect.DeepEqual(a, other) || reflect.DeepEqual(a, split0) {
		t.Fatal("another seed or split gives the same events")
	}
	// Restore: stopped at 137 with its state, a new source from that state emits the rest.
	head, state := runGenerator(t, cfg, 1, 2, nil, 137)
	if string(state) != `{"next":137}` {
		t.Fatalf("state %s", state)
	}
	tail, _ := runGenerator(t, cfg, 1, 2, state, 0)
	if got := append(head, tail...); !reflect.DeepEqual(got, a) {
		t.Fatalf("head %d + restored tail %d records differ from one run of %d", len(head), len(tail), len(a))
	}
}

// TestEventGeneratorDisorderBound: every event time is within max_disorder_ms before its place
// start + i*step, every jitter of [0, max] occurs, and with 0 the events are in order.
func TestEventGeneratorDisorderBound(t *testing.T) {
	const start, step, maxD = 1000, 3, 7
	g := NewGenerator(&pb.EventGenerator{Seed: 9, StartMs: start, StepMs: step, MaxDisorderMs: maxD})
	seen := map[int64]bool{}
	late := 0
	var maxSoFar int64
	for i := range int64(5000) {
		e := g.Event(0, i)
		j := start + i*step - e.TimeMs
		if j < 0 || j > maxD {
			t.Fatalf("event %d at %d: jitter %d outside [0, %d]", i, e.TimeMs, j, maxD)
		}
		seen[j] = true
		if e.TimeMs < maxSoFar {
			late++
		}
		maxSoFar = max(maxSoFar, e.TimeMs)
	}
	if len(seen) != maxD+1 || late == 0 {
		t.Fatalf("jitters seen %v, %d events out of order", seen, late)
	}
	inOrder := NewGenerator(&pb.EventGenerator{Seed: 9, StartMs: start, StepMs: step})
	for i := range int64(1000) {
		if e := inOrder.Event(0, i); e.TimeMs != start+i*step {
			t.Fatalf("no disorder: event %d at %d", i, e.TimeMs)
		}
	}
}

// TestEventGeneratorKeys: uniform keys stay in range and all occur; a skew makes user-0000 the
// most frequent, by far.
func TestEventGeneratorKeys(t *testing.T) {
	count := func(cfg *pb.EventGenerator) map[string]int {
		g := NewGenerator(cfg)
		m := map[string]int{}
		for i := range int64(20000) {
			m[g.Event(3, i).User]++
		}
		return m
	}
	for k, want := range map[int64]string{0: "user-0000", 42: "user-0042", 999: "user-0999", 1000: "user-1000", 123456: "user-123456"} {
		if got := UserName(k); got != want {
			t.Fatalf("UserName(%d) = %q, want %q", k, got, want)
		}
	}
	u := count(&pb.EventGenerator{Seed: 1, Keys: 10})
	if len(u) != 10 || u["user-0000"] > 2*u["user-0009"] {
		t.Fatalf("uniform: %v", u)
	}
	z := count(&pb.EventGenerator{Seed: 1, Keys: 10, KeySkew: 1.5})
	if len(z) > 10 || z["user-0000"] < 4*z["user-0009"] || z["user-0000"] < z["user-0001"] {
		t.Fatalf("skew 1.5: %v", z)
	}
	if one := count(&pb.EventGenerator{Seed: 1}); len(one) != 1 || one["user-0000"] != 20000 {
		t.Fatalf("keys 0: %v", one)
	}
}

// TestFileSinkFormats: VALUE and KEY_TAB_VALUE write the bytes raw, one record per line, and
// refuse a record that would break its line, naming it.
func TestFileSinkFormats(t *testing.T) {
	recs := []Record{{Key: []byte("user-0001"), Value: []byte(`{"a":1}`), Origin: 0, Seq: 0}, {Key: []byte("k"), Value: []byte("x y"), Origin: 0, Seq: 1}}
	for f, want := range map[pb.FileSinkFormat]string{
		pb.FileSinkFormat_FILE_SINK_FORMAT_VALUE:         "{\"a\":1}\nx y\n",
		pb.FileSinkFormat_FILE_SINK_FORMAT_KEY_TAB_VALUE: "user-0001\t{\"a\":1}\nk\tx y\n",
	} {
		dir := t.TempDir()
		s, err := New(&pb.Operator{Kind: &pb.Operator_FileSink{FileSink: &pb.FileSink{Path: "out.txt", Format: f}}}, Info{Job: "j", Vertex: "v", AttemptID: "a", WorkDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		collect(t, s, recs)
		if got, err := os.ReadFile(filepath.Join(dir, "out.txt")); err != nil || string(got) != want {
			t.Fatalf("%v: %q (%v), want %q", f, got, err, want)
		}
	}
	bad := []struct {
		f pb.FileSinkFormat
		r Record
	}{
		{pb.FileSinkFormat_FILE_SINK_FORMAT_VALUE, Record{Value: []byte("a\nb"), Origin: 2, Seq: 7}},
		{pb.FileSinkFormat_FILE_SINK_FORMAT_KEY_TAB_VALUE, Record{Key: []byte("a\tb"), Value: []byte("v"), Origin: 2, Seq: 7}},
		{pb.FileSinkFormat_FILE_SINK_FORMAT_KEY_TAB_VALUE, Record{Key: []byte("k"), Value: []byte("v\r"), Origin: 2, Seq: 7}},
	}
	for _, c := range bad {
		b, err := appendLine([]byte("x"), &c.r, c.f)
		if err == nil || !strings.Contains(err.Error(), "origin 2, seq 7") || string(b) != "x" {
			t.Fatalf("%v %q: %q, %v", c.f, c.r.Value, b, err)
		}
	}
}

// TestEventGeneratorValueBytes: value_bytes pads each event's JSON with a "pad" field to
// exactly that many bytes, or to the least it can when the event is nearly that long; the
// JSON keeps its fields and the key stays the user.
func TestEventGeneratorValueBytes(t *testing.T) {
	for _, size := range []int32{0, 10, 45, 100, 1000} {
		recs, _ := runGenerator(t, &pb.EventGenerator{Seed: 7, Count: 50, Keys: 20, StartMs: 1_700_000_000_000, ValueBytes: size}, 0, 1, nil, 0)
		for i, r := range recs {
			var v struct {
				User string `json:"user"`
				Pad  string `json:"pad"`
			}
			if err := json.Unmarshal(r.Value, &v); err != nil || v.User != string(r.Key) {
				t.Fatalf("value_bytes %d, record %d: %s (%v)", size, i, r.Value, err)
			}
			plain := len(GeneratedEvent(&pb.EventGenerator{Seed: 7, Keys: 20, StartMs: 1_700_000_000_000}, 0, int64(i)).JSON(nil))
			switch {
			case int(size) <= plain && (len(r.Value) != plain || v.Pad != ""):
				t.Fatalf("value_bytes %d <= the event's %d bytes, record %d padded: %s", size, plain, i, r.Value)
			case int(size) > plain && len(r.Value) != max(int(size), plain+len(padField)+1):
				t.Fatalf("value_bytes %d, record %d: %d bytes: %s", size, i, len(r.Value), r.Value)
			case int(size) > plain && strings.Trim(v.Pad, "x") != "":
				t.Fatalf("value_bytes %d, record %d: pad %q", size, i, v.Pad)
			}
		}
	}
}
