package operator

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/testkit/wasmbuild"
	"github.com/jmcluster/jmcluster/transport/pb"
	"github.com/jmcluster/jmcluster/wasmhost"
)

var wasmModules map[string][]byte

func TestMain(m *testing.M) {
	wasmhost.SetCacheDir(wasmbuild.CacheDir())
	wasmModules = wasmbuild.MustRead("kinds", "wordsplit", "fraud")
	os.Exit(m.Run())
}

// artifacts serves the modules by sha256, as the TaskManager's Info.Artifact does.
func artifacts(ctx context.Context, sha string) ([]byte, error) {
	for _, b := range wasmModules {
		if wasmhost.Sum(b) == sha {
			return b, nil
		}
	}
	return nil, fmt.Errorf("no artifact %s", sha)
}

func wasmOperator(module, function string, kind pb.WasmKind, config string) *pb.Operator {
	return &pb.Operator{Kind: &pb.Operator_Wasm{Wasm: &pb.WasmOperator{
		Artifact: wasmhost.Sum(wasmModules[module]), Function: function, Kind: kind, Config: config,
	}}}
}

// newWasmHarness opens the wasm transform of op, restored from state, its artifacts served by
// artifacts.
func newWasmHarness(t *testing.T, op *pb.Operator, state []byte) *harness {
	t.Helper()
	h := &harness{t: t}
	info := h.info(state)
	info.Artifact = artifacts
	info.Job = "job"
	o, err := New(op, info)
	if err != nil {
		t.Fatal(err)
	}
	// No batch handed on by its age: the tests count the calls (a loaded machine is slow).
	o.(*transformOperator).t.(*wasmOp).delay = time.Hour
	return h.open(o.(*transformOperator))
}

// TestWasmBatchDelay: a record that comes when the batch's first has waited WasmBatchDelay
// hands the batch on.
func TestWasmBatchDelay(t *testing.T) {
	h := newWasmHarness(t, wasmOperator("kinds", "upper", pb.WasmKind_WASM_KIND_MAP, ""), nil)
	h.op.t.(*wasmOp).delay = 0
	h.process(text("a", "x", 1))
	if got := h.texts(); got != "a=X@1#0" {
		t.Errorf("got %q, want the record handed on at once", got)
	}

	// The delay passes while the batch waits: the next record hands both on.
	w := h.op.t.(*wasmOp)
	w.delay = 20 * time.Millisecond
	h.process(text("b", "y", 2))
	for deadline := time.Now().Add(10 * time.Second); time.Since(w.first) < w.delay; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the batch's delay of %v has not passed after 10 s", w.delay)
		}
	}
	if got := h.texts(); got != "" {
		t.Errorf("got %q before a record came after the delay", got)
	}
	h.process(text("c", "z", 3))
	if got := h.texts(); got != "b=Y@2#0 c=Z@3#0" {
		t.Errorf("got %q, want both records handed on by the record after the delay", got)
	}
}

func text(k, v string, tm int64) Record { return Record{Key: []byte(k), Value: []byte(v), Time: tm} }

// texts returns the records emitted since the last call as "key=value@time#seq".
func (h *harness) texts() string {
	var out []string
	for _, r := range h.out {
		out = append(out, fmt.Sprintf("%s=%s@%d#%d", r.Key, r.Value, r.Time, r.Seq))
	}
	h.out = nil
	return strings.Join(out, " ")
}

// watermark advances the watermark to t as the TaskManager does (the batch first).
func (h *harness) watermark(t int64) {
	h.t.Helper()
	if err := h.op.AdvanceWatermark(t, h.emit); err != nil {
		h.t.Fatal(err)
	}
}

func TestWasmKinds(t *testing.T) {
	in := []Record{text("a", "hello", 1), text("b", "go+", 2), text("c", "", 3)}
	for i := range in {
		in[i].Seq = int64(i + 10)
	}
	for _, tc := range []struct {
		fn, config string
		kind       pb.WasmKind
		want       string
	}{
		{"upper", `{"suffix":"!"}`, pb.WasmKind_WASM_KIND_MAP, "a=HELLO!@1#10 b=GO+!@2#11 c=!@3#12"},
		{"dup", "", pb.WasmKind_WASM_KIND_FLAT_MAP, "a=hello@1#10 a=hello@1#10 b=go+@2#11 b=go+@2#11 b=+@2#11 c=@3#12 c=@3#12"},
		{"even", "", pb.WasmKind_WASM_KIND_FILTER, "c=@3#12"},
		{"first", "", pb.WasmKind_WASM_KIND_KEY_BY, "h=hello@1#10 g=go+@2#11 =@3#12"},
	} {
		h := newWasmHarness(t, wasmOperator("kinds", tc.fn, tc.kind, tc.config), nil)
		h.process(in...)
		if got := h.texts(); got != "" {
			t.Errorf("%s: %q emitted before the batch was handed on", tc.fn, got)
		}
		h.finish()
		if got := h.texts(); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.fn, got, tc.want)
		}
	}
}

// TestWasmKindRules: a function whose output breaks its kind's rule fails the task naming it.
func TestWasmKindRules(t *testing.T) {
	for _, tc := range []struct {
		fn   string
		kind pb.WasmKind
		want string
	}{
		{"dup", pb.WasmKind_WASM_KIND_MAP, "a MAP function emits one record per record, in order"},
		{"upper", pb.WasmKind_WASM_KIND_FILTER, "a FILTER function emits each record unchanged or not at all"},
		{"upper", pb.WasmKind_WASM_KIND_KEY_BY, "a KEY_BY function changes only the key"},
		{"even", pb.WasmKind_WASM_KIND_MAP, "a MAP function emits one record per record: it emitted 1 for 2"},
	} {
		h := newWasmHarness(t, wasmOperator("kinds", tc.fn, tc.kind, ""), nil)
		h.process(text("a", "xy", 1), text("b", "x", 1))
		err := h.op.Finish(h.emit)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "function "+tc.fn) {
			t.Errorf("%s as %s: %v, want %q", tc.fn, tc.kind, err, tc.want)
		}
	}
}

// TestWasmBatches: records reach the module WasmBatchRecords at a time; the rest at a flush.
func TestWasmBatches(t *testing.T) {
	h := newWasmHarness(t, wasmOperator("kinds", "echo", pb.WasmKind_WASM_KIND_MAP, ""), nil)
	n := 2*WasmBatchRecords + 7
	for i := range n {
		h.process(text("k", fmt.Sprint(i), int64(i)))
	}
	inst := h.op.t.(*wasmOp).inst
	if got := len(h.out); got != 2*WasmBatchRecords {
		t.Errorf("%d records out before the flush, want %d", got, 2*WasmBatchRecords)
	}
	if _, err := h.op.SnapshotState(); err != nil {
		t.Fatal(err)
	}
	if got := len(h.out); got != n {
		t.Errorf("%d records out after a snapshot, want %d", got, n)
	}
	if s := inst.Stats(); s.Calls != 4 || s.RecordsIn != int64(n) || s.RecordsOut != int64(n) {
		t.Errorf("stats %+v, want 4 calls (init and 3 batches) and %d records in and out", s, n)
	}
}

// TestWasmProcessState: a PROCESS function's keyed state and timers are the Context's: they are
// in the snapshot (taken after the batch is handed on), a restored task goes on from them, and
// its timers fire as the watermark passes them.
func TestWasmProcessState(t *testing.T) {
	op := wasmOperator("kinds", "count", pb.WasmKind_WASM_KIND_PROCESS, "")
	h := newWasmHarness(t, op, nil)
	h.process(text("a", "x", 100), text("a", "y", 101), text("b", "z", 102))
	state := h.snapshot()
	if got, want := h.texts(), "a=a=1@100#0 a=a=2@101#0 b=b=1@102#0"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}

	r := newWasmHarness(t, op, state)
	r.process(text("a", "w", 105))
	r.watermark(111) // a's timers at 110 and 111 fire; 115 waits
	if got, want := r.texts(), "a=a=3@105#0 a=timer a=3@110#0 a=timer a=@111#0"; got != want {
		t.Errorf("restored: got %q, want %q", got, want)
	}
	r.process(text("a", "v", 120), text("b", "u", 120))
	r.finish()
	if got, want := r.texts(), "a=a=1@120#0 b=b=2@120#0 b=timer b=2@112#0 a=timer a=1@115#0 a=timer a=@130#0 b=timer b=@130#0"; got != want {
		t.Errorf("after the restore: got %q, want %q", got, want)
	}
}

func TestWasmOpenErrors(t *testing.T) {
	op := wasmOperator("kinds", "nosuch", pb.WasmKind_WASM_KIND_MAP, "")
	info := Info{Vertex: "v", Artifact: artifacts}
	o, err := New(op, info)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Open(context.Background()); err == nil || !strings.Contains(err.Error(), "does not export the function nosuch (wasm.function)") {
		t.Errorf("a function the module lacks: %v", err)
	}
	_ = o.Close()
	o, _ = New(wasmOperator("kinds", "upper", pb.WasmKind_WASM_KIND_MAP, ""), Info{Vertex: "v"})
	if err := o.Open(context.Background()); err == nil || !strings.Contains(err.Error(), "cannot fetch artifacts") {
		t.Errorf("no artifacts: %v", err)
	}
	o, _ = New(wasmOperator("kinds", "upper", pb.WasmKind_WASM_KIND_MAP, `{"suffix":1}`), info)
	if err := o.Open(context.Background()); err == nil || !strings.Contains(err.Error(), "init with wasm.config") {
		t.Errorf("a config the module refuses: %v", err)
	}
	h := newWasmHarness(t, wasmOperator("kinds", "count", pb.WasmKind_WASM_KIND_PROCESS, ""), nil)
	h.process(text("a", "fail", 1))
	if err := h.op.Finish(h.emit); err == nil || !strings.Contains(err.Error(), "function count returned an error: the value is fail") {
		t.Errorf("a function's error: %v", err)
	}
}
