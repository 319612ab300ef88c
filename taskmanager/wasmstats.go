package taskmanager

import (
	"sync/atomic"
	"time"

	"github.com/jmcluster/jmcluster/operator"
)

// WasmIO is the counts of the WebAssembly module a task runs (the wasm operator's instance):
// its calls (batches and timers), the records it was given and emitted, the time in the
// module and the calls that trapped.
type WasmIO struct {
	Calls, RecordsIn, RecordsOut, Traps int64
	InModule                            time.Duration
}

// wasmCounts are a wasm task's WasmIO for the scrape. The instance counts on the task's
// goroutine, and is not to be read from another; that goroutine copies its counts here
// (wasmSampler) after each pass of its input loop and when it ends, so a scrape reads them
// with no lock and at most one pass behind.
type wasmCounts struct {
	on                                  atomic.Bool // the task runs a module
	calls, recordsIn, recordsOut, traps atomic.Int64
	inModule                            atomic.Int64 // ns
}

// wasmSampler returns the copy of op's module counts into t's, a no-op for an operator that
// runs no module. Call both on the task's goroutine.
func wasmSampler(t *task, op operator.Operator) func() {
	if _, ok := operator.WasmStats(op); !ok {
		return func() {}
	}
	c := &t.wasm
	c.on.Store(true)
	return func() {
		s, _ := operator.WasmStats(op)
		c.calls.Store(s.Calls)
		c.recordsIn.Store(s.RecordsIn)
		c.recordsOut.Store(s.RecordsOut)
		c.traps.Store(s.Traps)
		c.inModule.Store(int64(s.InModule))
	}
}

// io is the counts, nil for a task that runs no module.
func (c *wasmCounts) io() *WasmIO {
	if !c.on.Load() {
		return nil
	}
	return &WasmIO{Calls: c.calls.Load(), RecordsIn: c.recordsIn.Load(), RecordsOut: c.recordsOut.Load(), Traps: c.traps.Load(),
		InModule: time.Duration(c.inModule.Load())}
}
