package operator

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/jmcluster/jmcluster/internal/failpoint"
	"github.com/jmcluster/jmcluster/transport/pb"
)

func init() {
	register("window", runtime{transform: func(op *pb.Operator, _ Info) Transform { return newWindowOp(op.GetWindow()) }, keyed: true})
}

// maxWindowEventTime bounds the event time of a record a window takes (either sign): far
// from int64's ends, so a window's start, end and lateness never overflow
// (graph.MaxWindowMs bounds the lengths). A record outside goes to the dead letters.
const maxWindowEventTime = 1 << 62

// The transient flags of a window while a record is applied (never in the state).
const (
	winTouched = 1 << 6 // the record is counted in the window
	winArm     = 1 << 7 // the window is new or its end moved: its timers are to register
)

// windowOp is the window operator (WindowOperator in graph.proto; docs/task-runtime.md#windows):
// per record key, its open windows and their accumulators are the key's value in the Context
// (window_state.go), and each window has a timer at end-1 (its result is emitted then) and,
// with allowed lateness, one at end-1+lateness (its state is dropped then; with no lateness
// the first does both). The fields are the configuration and scratch buffers reused between
// records, never state: a checkpoint of the Context is all there is.
type windowOp struct {
	kind                       pb.WindowKind
	size, slide, gap, lateness int64
	field                      string // as configured, for the dead letters' reasons
	path                       string // field in gjson's syntax, every special character escaped
	hasField                   bool
	ws                         []window // the current key's windows (scratch)
	buf                        []byte   // its encoded value (scratch)
	oldEnds                    []int64  // ends of session windows a record merged (scratch)
}

func newWindowOp(w *pb.WindowOperator) *windowOp {
	o := &windowOp{
		kind: w.GetKind(), size: w.GetSizeMs(), slide: w.GetSlideMs(), gap: w.GetGapMs(),
		lateness: w.GetAllowedLatenessMs(), field: w.GetField(), hasField: w.GetField() != "",
	}
	if o.kind == pb.WindowKind_WINDOW_KIND_TUMBLING {
		o.slide = o.size
	}
	if o.hasField {
		o.path = GJSONPath(o.field)
	}
	return o
}

// GJSONPath is the gjson path of a field path ("user.id", "items.0": names separated by
// dots, graph.CheckWindowField): each name escaped, so no character of it is a wildcard, a
// modifier or a query.
func GJSONPath(p string) string {
	parts := strings.Split(p, ".")
	for i, s := range parts {
		parts[i] = gjson.Escape(s)
	}
	return strings.Join(parts, ".")
}

// read checks r and returns its field's number; a reason when r goes to the dead letters.
func (o *windowOp) read(r *Record) (number, string) {
	if r.Time == NoTimestamp {
		return number{}, "has no event time"
	}
	if r.Time < -maxWindowEventTime || r.Time > maxWindowEventTime {
		return number{}, fmt.Sprintf("event time %d is out of the range a window takes (±2^62 ms)", r.Time)
	}
	// gjson reads a string; the value is not kept beyond this call, so no copy is made.
	s := unsafe.String(unsafe.SliceData(r.Value), len(r.Value))
	if !gjson.Valid(s) {
		return number{}, "not valid JSON"
	}
	if !o.hasField {
		return number{}, ""
	}
	res := gjson.Get(s, o.path)
	switch {
	case !res.Exists():
		return number{}, "lacks the field " + o.field
	case res.Type != gjson.Number:
		raw := res.Raw
		if len(raw) > 40 {
			raw = raw[:40] + "..."
		}
		return number{}, fmt.Sprintf("the field %s is %s, not a number", o.field, raw)
	}
	n, err := parseNumber(res.Raw)
	if err != nil {
		return number{}, fmt.Sprintf("the field %s: %s %v", o.field, res.Raw, err)
	}
	return n, ""
}

// Process counts r in its windows: those of its event time that are not closed (past
// end-1+lateness at the watermark). A window that already fired emits its result again at
// once, as an update; one that has not waits for its timer. A record with no open window, or
// that read cannot take, goes to the dead letters and changes nothing.
func (o *windowOp) Process(ctx *Context, r Record) error {
	n, reason := o.read(&r)
	if reason != "" {
		return ctx.DeadLetter(r, reason)
	}
	kv := ctx.entry() // one lookup of the key for the read and the write below
	var v []byte
	if kv != nil {
		v = kv.b
	}
	ws, err := decodeWindows(o.ws[:0], v)
	if err != nil {
		return fmt.Errorf("window: key %s: %w", FormatKey(ctx.Key()), err)
	}
	o.ws, o.oldEnds = ws, o.oldEnds[:0]
	wm := ctx.Watermark()
	if o.kind == pb.WindowKind_WINDOW_KIND_SESSION {
		reason = o.session(r.Key, r.Time, n, wm)
	} else {
		reason = o.fixed(r.Key, r.Time, n, wm)
	}
	if reason != "" {
		return ctx.DeadLetter(r, reason)
	}
	for i := range o.ws {
		w := &o.ws[i]
		if w.flags&winTouched == 0 {
			continue
		}
		if w.flags&winArm != 0 {
			if wm == NoTimestamp || w.end-1 > wm {
				ctx.RegisterTimer(w.end - 1)
			}
			if o.lateness > 0 {
				ctx.RegisterTimer(w.end - 1 + o.lateness)
			}
		}
		w.flags &^= winTouched | winArm
		if wm != NoTimestamp && w.end-1 <= wm { // fired already: emit the update now
			if err := o.emit(ctx, w); err != nil {
				return err
			}
		} else {
			w.flags |= winDirty
		}
	}
	for _, e := range o.oldEnds {
		for _, at := range [2]int64{e - 1, e - 1 + o.lateness} {
			if !o.needs(at) {
				ctx.DeleteTimer(at)
			}
		}
	}
	o.buf = encodeWindows(o.buf[:0], o.ws)
	ctx.setEntry(kv, o.buf)
	return nil
}

// closed reports whether the window ending at end is past its lateness at watermark wm.
func (o *windowOp) closed(end, wm int64) bool {
	return wm != NoTimestamp && end-1+o.lateness <= wm
}

// fixed counts a record of time t in its TUMBLING or SLIDING windows that are open (in o.ws,
// marked winTouched); the reason for the dead letters when none is, or when a sum would
// overflow.
func (o *windowOp) fixed(key []byte, t int64, n number, wm int64) string {
	last := t - floorMod(t, o.slide)
	first := last - (o.size/o.slide-1)*o.slide
	open := 0
	for s := first; s <= last; s += o.slide {
		if o.closed(s+o.size, wm) {
			continue
		}
		open++
		i, found := slices.BinarySearchFunc(o.ws, s, func(w window, s int64) int { return cmp.Compare(w.start, s) })
		if !found {
			o.ws = slices.Insert(o.ws, i, window{start: s, end: s + o.size, flags: winArm})
		}
		w := &o.ws[i]
		if err := w.add(n, o.hasField); err != nil {
			return fmt.Sprintf("the field %s %v", o.field, err)
		}
		w.flags |= winTouched
	}
	if open == 0 {
		return fmt.Sprintf("late: window [%d, %d) of %s closed at watermark %d", last, last+o.size, keyText(key), wm)
	}
	return ""
}

// session counts a record of time t in the session window [t, t+gap) merged with every
// window of the key it overlaps (a record may bridge two); the reason for the dead letters
// when the merged window is closed or its sum would overflow.
func (o *windowOp) session(key []byte, t int64, n number, wm int64) string {
	m := window{start: t, end: t + o.gap}
	if err := m.add(n, o.hasField); err != nil {
		return fmt.Sprintf("the field %s %v", o.field, err)
	}
	// Windows are disjoint and sorted by start, so by end too: those m overlaps are a run.
	i, _ := slices.BinarySearchFunc(o.ws, m.start, func(w window, s int64) int {
		if w.end <= s {
			return -1
		}
		return 1
	})
	j := i
	for j < len(o.ws) && o.ws[j].start < m.end {
		j++
	}
	start, end := m.start, m.end
	if j > i {
		start, end = min(start, o.ws[i].start), max(end, o.ws[j-1].end)
	}
	if o.closed(end, wm) {
		return fmt.Sprintf("late: session window [%d, %d) of %s closed at watermark %d", start, end, keyText(key), wm)
	}
	arm := true
	for k := i; k < j; k++ {
		if !m.merge(&o.ws[k], o.hasField) {
			return fmt.Sprintf("the field %s would make the window's sum leave the range of a float64", o.field)
		}
		if o.ws[k].end == m.end {
			arm = false // its timers are m's
		} else {
			o.oldEnds = append(o.oldEnds, o.ws[k].end)
		}
	}
	m.flags |= winTouched
	if arm {
		m.flags |= winArm
	}
	o.ws = slices.Replace(o.ws, i, j, m)
	return ""
}

// needs reports whether a window of the key has a timer at at.
func (o *windowOp) needs(at int64) bool {
	for i := range o.ws {
		if e := o.ws[i].end - 1; e == at || e+o.lateness == at {
			return true
		}
	}
	return false
}

// OnTimer emits the result of every window of the key whose end-1 the watermark passed and
// that has records not in its last result, then drops the windows past their lateness.
func (o *windowOp) OnTimer(ctx *Context, at int64) error {
	v, ok := ctx.Value()
	if !ok {
		return nil
	}
	ws, err := decodeWindows(o.ws[:0], v)
	if err != nil {
		return fmt.Errorf("window: key %s: %w", FormatKey(ctx.Key()), err)
	}
	o.ws = ws
	for i := range o.ws {
		if w := &o.ws[i]; w.flags&winDirty != 0 && w.end-1 <= at {
			if err := o.emit(ctx, w); err != nil {
				return err
			}
		}
	}
	o.ws = slices.DeleteFunc(o.ws, func(w window) bool { return w.end-1+o.lateness <= at })
	if len(o.ws) == 0 {
		ctx.ClearValue()
		return nil
	}
	o.buf = encodeWindows(o.buf[:0], o.ws)
	ctx.SetValue(o.buf)
	return nil
}

// snapshotContext is the window's checkpointed state: the Context's snapshot, every key's
// open windows with it. The planted bug window-state-unchecked leaves the windows out (the
// timers and the watermark stay): a restored window holds none, and counts only the records
// after the checkpoint (contextSnapshotter).
func (o *windowOp) snapshotContext(ctx *Context) ([]byte, error) {
	if failpoint.Enabled(failpoint.WindowStateUnchecked) {
		c := *ctx
		c.values = nil
		return c.snapshot()
	}
	return ctx.snapshot()
}

// emit sends w's result (appendResult): key the current key, event time end-1, no lineage
// (Origin and Seq 0: operator/DESIGN.md says why).
func (o *windowOp) emit(ctx *Context, w *window) error {
	v := appendResult(make([]byte, 0, 96+len(ctx.Key())), ctx.Key(), w, o.hasField)
	w.emitted++
	w.flags &^= winDirty
	return ctx.Emit(Record{Key: ctx.Key(), Value: v, Time: w.end - 1})
}

func floorMod(t, m int64) int64 {
	r := t % m
	if r < 0 {
		r += m
	}
	return r
}

// keyText shows a key in a reason: its characters when it is valid UTF-8, else FormatKey's
// form.
func keyText(k []byte) string {
	if utf8.Valid(k) {
		return string(k)
	}
	return FormatKey(k)
}
