package operator

import "github.com/jmcluster/jmcluster/wasmhost"

// WasmStatser is a transform that runs a WebAssembly module (the wasm operator): the counts
// of its instance (wasmhost.Stats: calls, records in and out, time in the module, traps).
type WasmStatser interface{ WasmStats() wasmhost.Stats }

// WasmStats returns the counts of the WebAssembly instance op runs, and false for an operator
// that runs none. The instance counts on the task's goroutine and is used by one goroutine at
// a time: call it on that goroutine (the TaskManager copies the counts for its metrics there).
func WasmStats(op Operator) (wasmhost.Stats, bool) {
	o, ok := op.(*transformOperator)
	if !ok {
		return wasmhost.Stats{}, false
	}
	w, ok := o.t.(WasmStatser)
	if !ok {
		return wasmhost.Stats{}, false
	}
	return w.WasmStats(), true
}
