package operator

import (
	"context"
	"fmt"
	"testing"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// harness drives one transform as a task does, without a TaskManager (Flink's
// OneInputStreamOperatorTestHarness): records in, timers advanced, snapshots taken and
// restored, the emitted records and the dead letters collected.
type harness struct {
	t    *testing.T
	op   *transformOperator
	out  []Record
	dead []Record // the dead letters (DeadLetterRecord), in order
}

// newHarness opens the transform of kind (its catalogue runtime) restored from state.
func newHarness(t *testing.T, op *pb.Operator, state []byte) *harness {
	t.Helper()
	h := &harness{t: t}
	o, err := New(op, h.info(state))
	if err != nil {
		t.Fatal(err)
	}
	return h.open(o.(*transformOperator))
}

// newTransformHarness opens tr as a transform (keyed: its Context is checkpointed), restored
// from state.
func newTransformHarness(t *testing.T, tr Transform, keyed bool, state []byte) *harness {
	t.Helper()
	h := &harness{t: t}
	o, err := newTransformOperator("test", tr, keyed, h.info(state))
	if err != nil {
		t.Fatal(err)
	}
	return h.open(o)
}

// info is the task's Info: restored from state, its dead letters collected in h.dead.
func (h *harness) info(state []byte) Info {
	return Info{Vertex: "v", Restored: state, DeadLetters: func(r Record) error { h.dead = append(h.dead, r); return nil }}
}

func (h *harness) open(o *transformOperator) *harness {
	h.t.Helper()
	if err := o.Open(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = o.Close() })
	h.op = o
	return h
}

func (h *harness) emit(r Record) error { h.out = append(h.out, r); return nil }

// process feeds records.
func (h *harness) process(rs ...Record) {
	h.t.Helper()
	for _, r := range rs {
		if err := h.op.Process(r, h.emit); err != nil {
			h.t.Fatal(err)
		}
	}
}

// advance fires the timers at or before t.
func (h *harness) advance(t int64) {
	h.t.Helper()
	h.op.ctx.out = h.emit
	tr, _ := h.op.t.(TimerHandler)
	if err := h.op.ctx.advance(t, tr); err != nil {
		h.t.Fatal(err)
	}
}

// finish ends the input: every pending timer fires.
func (h *harness) finish() {
	h.t.Helper()
	if err := h.op.Finish(h.emit); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) snapshot() []byte {
	h.t.Helper()
	b, err := h.op.SnapshotState()
	if err != nil {
		h.t.Fatal(err)
	}
	return b
}

// take returns the records emitted since the last take, as "key:value" strings.
func (h *harness) take() string {
	s := fmt.Sprint(keyValues(h.out))
	h.out = nil
	return s
}

func keyValues(rs []Record) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = fmt.Sprintf("%d:%d", num(r.Key), num(r.Value))
	}
	return out
}

// num reads a numeric key or value; -999999 for one that is not.
func num(b []byte) int64 {
	n, ok := Int64Of(b)
	if !ok {
		return -999999
	}
	return n
}

// countThenEmit counts each key's records in its keyed value and registers a timer for the
// key at time 10*key; the timer emits (key, count) and clears the count. A record of value
// -1 deletes its key's timer; one of value -2 registers a timer at 0, whose handler registers
// another at 1 for the same key.
type countThenEmit struct{}

func (countThenEmit) Process(ctx *Context, r Record) error {
	switch num(r.Value) {
	case -1:
		ctx.DeleteTimer(10 * num(ctx.Key()))
		return nil
	case -2:
		ctx.RegisterTimer(0)
		return nil
	}
	n, _ := ctx.Int64()
	ctx.SetInt64(n + 1)
	ctx.RegisterTimer(10 * num(ctx.Key()))
	return nil
}

func (countThenEmit) OnTimer(ctx *Context, at int64) error {
	if at == 0 {
		ctx.RegisterTimer(1)
		return ctx.Emit(NumericRecord(num(ctx.Key()), -100, 0, 0))
	}
	n, _ := ctx.Int64()
	ctx.ClearValue()
	return ctx.Emit(NumericRecord(num(ctx.Key()), n, 0, 0))
}

// TestTimersAndKeyedStateThroughTheHarness: a transform's keyed values and timers are the
// runtime's: timers fire in order of time then key once time passes them (and those
// registered while firing, when due), a deleted timer does not fire, the end of input fires
// every pending one, and a snapshot carries values and timers into a restored transform.
func TestTimersAndKeyedStateThroughTheHarness(t *testing.T) {
	h := newTransformHarness(t, countThenEmit{}, true, nil)
	h.process(NumericRecord(3, 0, 0, 0), NumericRecord(1, 0, 0, 0), NumericRecord(3, 0, 0, 0), NumericRecord(2, 0, 0, 0), NumericRecord(1, 0, 0, 0), NumericRecord(3, 0, 0, 0))
	h.advance(15) // fires key 1's timer at 10
	if got := h.take(); got != "[1:2]" {
		t.Fatalf("advanced to 15: %s, want [1:2]", got)
	}
	h.process(NumericRecord(2, -1, 0, 0), NumericRecord(4, 0, 0, 0), NumericRecord(5, -2, 0, 0))
	h.advance(0) // key 5's timer at 0; the one its handler registers at 1 is not due
	if got := h.take(); got != "[5:-100]" {
		t.Fatalf("advanced to 0: %s", got)
	}
	state := h.snapshot()

	// Restored elsewhere from the snapshot: key 3's count and timer, key 4's, key 5's at 1;
	// key 2's timer was deleted (its count stays, without a timer).
	again := newTransformHarness(t, countThenEmit{}, true, state)
	again.process(NumericRecord(3, 0, 0, 0))
	again.finish()
	if got := again.take(); got != "[5:0 3:4 4:1]" {
		t.Fatalf("restored, then the end of input: %s, want [5:0 3:4 4:1]", got)
	}
	vals, err := KeyedValues(again.snapshot())
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := Int64Value(vals[2]); len(vals) != 1 || n != 1 {
		t.Fatalf("after the end: values %v, want only key 2's count 1", vals)
	}

	// A transform that is not keyed keeps nothing: a snapshot with values is an error.
	plain := newTransformHarness(t, countThenEmit{}, false, nil)
	plain.process(NumericRecord(1, 0, 0, 0))
	if _, err := plain.op.SnapshotState(); err == nil {
		t.Fatal("a transform not registered as keyed snapshotted its values")
	}
}

// TestKeyBySumThroughTheHarness: key_by_sum's sums are keyed values, carried by a snapshot.
func TestKeyBySumThroughTheHarness(t *testing.T) {
	op := &pb.Operator{Kind: &pb.Operator_KeyBySum{KeyBySum: &pb.KeyBySumOperator{}}}
	h := newHarness(t, op, nil)
	h.process(NumericRecord(1, 5, 0, 0), NumericRecord(2, 1, 0, 0), NumericRecord(1, 2, 0, 0))
	if got := h.take(); got != "[1:5 2:1 1:7]" {
		t.Fatalf("sums %s", got)
	}
	again := newHarness(t, op, h.snapshot())
	again.process(NumericRecord(2, 10, 0, 0), NumericRecord(1, 1, 0, 0))
	again.finish()
	if got := again.take(); got != "[2:11 1:8]" {
		t.Fatalf("restored sums %s", got)
	}
}
