package operator

import (
	"testing"

	"github.com/jmcluster/jmcluster/internal/failpoint"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// wasmCountAcrossRestore runs the kinds module's PROCESS function count (each key's count in
// its keyed state, emitted as "key=n") in real wazero: a, a, b, a snapshot, then a and b, a
// second snapshot, a restore from it, and a again. It returns what the restored task emits.
func wasmCountAcrossRestore(t *testing.T) string {
	t.Helper()
	op := wasmOperator("kinds", "count", pb.WasmKind_WASM_KIND_PROCESS, "")
	h := newWasmHarness(t, op, nil)
	h.process(text("a", "x", 100), text("a", "y", 101), text("b", "z", 102))
	h.snapshot()
	h.process(text("a", "w", 103), text("b", "v", 104))
	state := h.snapshot()
	if got, want := h.texts(), "a=a=1@100#0 a=a=2@101#0 b=b=1@102#0 a=a=3@103#0 b=b=2@104#0"; got != want {
		t.Fatalf("before the restore: got %q, want %q", got, want)
	}
	r := newWasmHarness(t, op, state)
	r.process(text("a", "u", 105), text("b", "s", 106))
	if err := r.op.Flush(r.emit); err != nil {
		t.Fatal(err)
	}
	return r.texts()
}

// TestWasmStateLostRepeatsACount: the intact operator's second snapshot holds the counts after
// every record before it (a=3, b=2), so the restored function goes on with a=4, b=3; with
// wasm-state-lost the snapshot holds the counts the task opened with (none): the restored
// function's writes since its start are lost and a count starts again, as a per-user ordinal
// would.
func TestWasmStateLostRepeatsACount(t *testing.T) {
	if got, want := wasmCountAcrossRestore(t), "a=a=4@105#0 b=b=3@106#0"; got != want {
		t.Fatalf("intact build: after the restore got %q, want %q", got, want)
	}
	failpoint.Set(t, failpoint.WasmStateLost.Name())
	if got, want := wasmCountAcrossRestore(t), "a=a=1@105#0 b=b=1@106#0"; got != want {
		t.Fatalf("with wasm-state-lost: after the restore got %q, want %q", got, want)
	}
	t.Log("caught: with wasm-state-lost the restored counts start again at 1 (the writes since the task's start are lost)")
}
