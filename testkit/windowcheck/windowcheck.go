// Package windowcheck is the reference the window operator's output is checked against: the
// result of every (key, window) of a job event_generator -> window (keyed by user), computed
// from the generator's seed by an algorithm of its own; the reading of a file sink's
// committed output of window results; and their comparison, which names missing, unexpected,
// duplicated and wrong results.
package windowcheck

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/jmcluster/jmcluster/operator"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// Result is one window result, as the window operator writes it (WindowOperator in
// graph.proto): Sum, Min, Max and Avg are 0 for a window without a field.
type Result struct {
	Key    string  `json:"key"`
	Start  int64   `json:"start"`
	End    int64   `json:"end"`
	Count  int64   `json:"count"`
	Sum    float64 `json:"sum,omitempty"`
	Min    float64 `json:"min,omitempty"`
	Max    float64 `json:"max,omitempty"`
	Avg    float64 `json:"avg,omitempty"`
	Update int64   `json:"update,omitempty"`
}

// id is what names a result: its key and window.
type id struct {
	key        string
	start, end int64
}

func (r Result) id() id { return id{r.Key, r.Start, r.End} }

func (i id) String() string { return fmt.Sprintf("%s [%d, %d)", i.key, i.start, i.end) }

func (r Result) String() string {
	b, _ := json.Marshal(r)
	return string(b)
}

// event is what a window reads of a generated event.
type event struct {
	t, v int64
}

// Expected returns the result of every (key, window) of w over the events of gen on splits
// source subtasks (event i < gen.count of each split; an unbounded generator has none), in
// order of key then window: every event counted, none late (the window's lateness does not
// matter), so the job must let none be late (max_out_of_orderness_ms >= max_disorder_ms).
// w.field is "" (count only), "amount" or "ts"; another panics. The windows are computed
// from the events of each key sorted by time: a tumbling window per multiple of size, every
// sliding window that holds an event, sessions cut where two successive events are gap_ms or
// more apart.
func Expected(gen *pb.EventGenerator, splits int32, w *pb.WindowOperator) []Result {
	field := w.GetField()
	if field != "" && field != "amount" && field != "ts" {
		panic(fmt.Sprintf("windowcheck.Expected: field %q: the generator's events have the numbers amount and ts only", field))
	}
	g := operator.NewGenerator(gen)
	byKey := map[string][]event{}
	for s := range splits {
		for i := int64(0); i < gen.GetCount(); i++ {
			e := g.Event(s, i)
			v := e.Amount
			if field == "ts" {
				v = e.TimeMs
			}
			byKey[e.User] = append(byKey[e.User], event{e.TimeMs, v})
		}
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []Result
	for _, k := range keys {
		evs := byKey[k]
		slices.SortStableFunc(evs, func(a, b event) int { return cmp.Compare(a.t, b.t) })
		out = append(out, windowsOf(k, evs, w)...)
	}
	return out
}

// windowsOf returns the results of key k's events evs (sorted by time), in window order.
func windowsOf(k string, evs []event, w *pb.WindowOperator) []Result {
	acc := map[[2]int64][]event{}
	switch w.GetKind() {
	case pb.WindowKind_WINDOW_KIND_TUMBLING:
		for _, e := range evs {
			s := floorDiv(e.t, w.GetSizeMs()) * w.GetSizeMs()
			acc[[2]int64{s, s + w.GetSizeMs()}] = append(acc[[2]int64{s, s + w.GetSizeMs()}], e)
		}
	case pb.WindowKind_WINDOW_KIND_SLIDING:
		for _, e := range evs {
			for s := floorDiv(e.t, w.GetSlideMs()) * w.GetSlideMs(); s > e.t-w.GetSizeMs(); s -= w.GetSlideMs() {
				acc[[2]int64{s, s + w.GetSizeMs()}] = append(acc[[2]int64{s, s + w.GetSizeMs()}], e)
			}
		}
	case pb.WindowKind_WINDOW_KIND_SESSION:
		for i := 0; i < len(evs); {
			j := i + 1
			for j < len(evs) && evs[j].t-evs[j-1].t < w.GetGapMs() {
				j++
			}
			acc[[2]int64{evs[i].t, evs[j-1].t + w.GetGapMs()}] = evs[i:j]
			i = j
		}
	default:
		panic(fmt.Sprintf("windowcheck: window kind %v", w.GetKind()))
	}
	out := make([]Result, 0, len(acc))
	for win, es := range acc {
		r := Result{Key: k, Start: win[0], End: win[1], Count: int64(len(es))}
		if w.GetField() != "" {
			sum, lo, hi := int64(0), es[0].v, es[0].v
			for _, e := range es {
				sum, lo, hi = sum+e.v, min(lo, e.v), max(hi, e.v)
			}
			r.Sum, r.Min, r.Max = float64(sum), float64(lo), float64(hi)
			r.Avg = float64(sum) / float64(len(es))
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Result) int { return cmp.Compare(a.Start, b.Start) })
	return out
}

func floorDiv(t, m int64) int64 {
	q := t / m
	if t%m != 0 && t < 0 {
		q--
	}
	return q
}

// ReadCommitted reads the committed output of the file sinks (FILE_SINK_FORMAT_VALUE) whose
// paths, relative to dir, match pattern (filepath.Match's syntax, "win/out-*.txt"): their part
// files, PATH.part-<checkpoint> and PATH.part-end (operator/filecommit.go), in name order;
// a temporary ".tmp" file is not committed output. Every line must be one window result.
func ReadCommitted(dir, pattern string) ([]Result, error) {
	files, err := filepath.Glob(filepath.Join(dir, pattern) + ".part-*")
	if err != nil {
		return nil, fmt.Errorf("windowcheck: pattern %q: %w", pattern, err)
	}
	var out []Result
	for _, f := range files {
		if strings.HasSuffix(f, ".tmp") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("windowcheck: %w", err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, 1<<20)
		for line := 1; sc.Scan(); line++ {
			var r Result
			dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&r); err != nil {
				return nil, fmt.Errorf("windowcheck: %s line %d: %q is not a window result: %w", f, line, sc.Bytes(), err)
			}
			out = append(out, r)
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("windowcheck: %s: %w", f, err)
		}
	}
	return out, nil
}

// showMax is how many of each kind of difference Compare names.
const showMax = 5

// Compare checks got against want, results named by key and window: each expected one
// exactly once with the same values (count, sum, min, max, avg, and no update: the reference
// has no late record), and nothing else. The error counts the missing, unexpected,
// duplicated and wrong results and names the first few of each; nil when they agree.
func Compare(want, got []Result) error {
	wantBy := make(map[id]Result, len(want))
	for _, r := range want {
		wantBy[r.id()] = r
	}
	seen := make(map[id]int, len(got))
	var missing, unexpected, duplicated, wrong []string
	for _, r := range got {
		i := r.id()
		seen[i]++
		w, ok := wantBy[i]
		switch {
		case !ok:
			if seen[i] == 1 {
				unexpected = append(unexpected, r.String())
			}
		case seen[i] == 2:
			duplicated = append(duplicated, i.String())
		case seen[i] == 1 && r != w:
			wrong = append(wrong, fmt.Sprintf("got %s, want %s", r, w))
		}
	}
	for _, r := range want {
		if seen[r.id()] == 0 {
			missing = append(missing, r.id().String())
		}
	}
	if len(missing)+len(unexpected)+len(duplicated)+len(wrong) == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "window results differ (%d expected, %d got): %d missing, %d unexpected, %d duplicated, %d wrong",
		len(want), len(got), len(missing), len(unexpected), len(duplicated), len(wrong))
	for _, l := range []struct {
		name string
		s    []string
	}{{"missing", missing}, {"unexpected", unexpected}, {"duplicated", duplicated}, {"wrong", wrong}} {
		if len(l.s) > 0 {
			fmt.Fprintf(&b, "; %s: %s", l.name, strings.Join(l.s[:min(len(l.s), showMax)], ", "))
			if len(l.s) > showMax {
				fmt.Fprintf(&b, " and %d more", len(l.s)-showMax)
			}
		}
	}
	return fmt.Errorf("%s", b.String())
}
