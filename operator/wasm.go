package operator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jmcluster/jmcluster/internal/failpoint"
	"github.com/jmcluster/jmcluster/transport/pb"
	"github.com/jmcluster/jmcluster/wasmhost"
)

func init() {
	// keyed: a PROCESS function's values and timers are the Context's, checkpointed like the
	// built-ins'; the other kinds leave the Context empty.
	register("wasm", runtime{transform: func(op *pb.Operator, info Info) Transform {
		return &wasmOp{cfg: op.GetWasm(), info: info, delay: WasmBatchDelay}
	}, keyed: true})
}

// The wasm operator's batches: the records a transform buffers before it calls the module
// (docs/user-functions.md, "Batches"). A batch is also handed on before a timer fires, before
// the watermark advances, before a snapshot and at the end of the input.
const (
	// WasmBatchRecords is the most records of one call.
	WasmBatchRecords = 256
	// WasmBatchBytes: a batch is handed on once its encoding holds this many bytes.
	WasmBatchBytes = 1 << 20
	// WasmBatchDelay: once the batch's first record has waited this long the batch is handed
	// on, by the record that comes then or, when none comes, by the TaskManager while the task
	// waits for input (Buffering): no record waits longer, on a busy stream or a quiet one.
	WasmBatchDelay = 100 * time.Millisecond
	// WasmFetchTimeout bounds the fetch of the module's artifact at the task's start.
	WasmFetchTimeout = 30 * time.Second
)

// ErrNoArtifacts: the task has no way to fetch an artifact (Info.Artifact is nil).
var ErrNoArtifacts = errors.New("this TaskManager cannot fetch artifacts")

// wasmOp is the wasm transform: a user function in a WebAssembly module (wasmhost), called
// once per batch of records.
type wasmOp struct {
	cfg   *pb.WasmOperator
	info  Info
	inst  *wasmhost.Instance
	batch wasmhost.Batch
	recs  []Record // the records of batch, in order
	tb    wasmhost.Batch
	st    wasmState
	first time.Time     // when the batch's first record came
	delay time.Duration // WasmBatchDelay (tests that count calls make it longer)
	err   error         // a failed call: the instance is broken, every later record fails
	// stale is, with the planted bug wasm-state-lost, the keyed values of the previous
	// snapshot (or of the restore): what the next snapshot holds instead of the current ones.
	stale map[string]*keyValue
}

// kindName is the operator's kind as the spec names it (MAP, ...).
func (w *wasmOp) kindName() string {
	return strings.TrimPrefix(w.cfg.GetKind().String(), "WASM_KIND_")
}

// testArtifacts, when set, is the fetch of every wasm task (ServeArtifactsForTests).
var testArtifacts atomic.Pointer[func(context.Context, string) ([]byte, error)]

// ServeArtifactsForTests makes every wasm task fetch its module with fetch instead of its
// Info.Artifact until tb's cleanup: for a test of modules through real TaskManagers without
// JobMasters that store artifacts (the end-to-end tests use the artifact store).
func ServeArtifactsForTests(tb interface{ Cleanup(func()) }, fetch func(ctx context.Context, sha256 string) ([]byte, error)) {
	testArtifacts.Store(&fetch)
	tb.Cleanup(func() { testArtifacts.Store(nil) })
}

func (w *wasmOp) Open(ctx *Context) error {
	if f := testArtifacts.Load(); f != nil {
		w.info.Artifact = *f
	}
	if w.info.Artifact == nil {
		return fmt.Errorf("wasm: artifact %s: %w", w.cfg.GetArtifact(), ErrNoArtifacts)
	}
	fctx, cancel := context.WithTimeout(context.Background(), WasmFetchTimeout)
	defer cancel()
	module, err := w.info.Artifact(fctx, w.cfg.GetArtifact())
	if err != nil {
		return fmt.Errorf("wasm: fetch artifact %s: %w", w.cfg.GetArtifact(), err)
	}
	lg := w.info.Logger.With("function", w.cfg.GetFunction(), "kind", w.kindName())
	inst, err := wasmhost.Default().Instantiate(context.Background(), w.cfg.GetArtifact(), module, wasmhost.Config{
		Label:       fmt.Sprintf("%s/%s/%d", w.info.Job, w.info.Vertex, w.info.Subtask),
		Logger:      lg,
		MemoryMiB:   w.cfg.GetMemoryLimitMib(),
		CallTimeout: time.Duration(w.cfg.GetCallTimeoutMs()) * time.Millisecond,
	})
	if err != nil {
		return fmt.Errorf("wasm: %w", err)
	}
	w.inst = inst
	if !inst.Has(w.cfg.GetFunction()) {
		return fmt.Errorf("wasm: module %s does not export the function %s (wasm.function)", shortSHA(w.cfg.GetArtifact()), w.cfg.GetFunction())
	}
	if err := inst.Init([]byte(w.cfg.GetConfig())); err != nil {
		return fmt.Errorf("wasm: init with wasm.config: %w", err)
	}
	w.st.ctx = ctx
	if failpoint.Enabled(failpoint.WasmStateLost) {
		w.stale = cloneValues(ctx.values)
	}
	return nil
}

// snapshotContext is the operator's checkpointed state: the Context's snapshot, a PROCESS
// function's keyed values with it (contextSnapshotter). The planted bug wasm-state-lost
// snapshots the values as they were when the task opened (its restore), timers and watermark
// as they are: a task restored from it has lost every state write since its own start.
func (w *wasmOp) snapshotContext(ctx *Context) ([]byte, error) {
	if w.stale == nil || !failpoint.Enabled(failpoint.WasmStateLost) {
		return ctx.snapshot()
	}
	c := *ctx
	c.values = w.stale
	return c.snapshot()
}

// cloneValues is a copy of a Context's values (wasm-state-lost's stale state).
func cloneValues(m map[string]*keyValue) map[string]*keyValue {
	out := make(map[string]*keyValue, len(m))
	for k, v := range m {
		out[k] = &keyValue{slices.Clone(v.b)}
	}
	return out
}

func shortSHA(s string) string { return s[:min(len(s), 12)] }

func (w *wasmOp) Process(ctx *Context, r Record) error {
	if w.err != nil {
		return w.err
	}
	// The clock's reading of the first record, then the monotonic clock's alone (time.Since:
	// half the cost of time.Now, which is as much as a built-in operator's whole record).
	if w.batch.Len() == 0 {
		w.first = time.Now()
	}
	w.batch.Add(r.Key, r.Value, r.Time)
	w.recs = append(w.recs, r)
	if w.batch.Len() >= WasmBatchRecords || w.batch.Size() >= WasmBatchBytes || time.Since(w.first) >= w.delay {
		return w.Flush(ctx)
	}
	return nil
}

// Flush calls the module with the records buffered and emits its output (the flush hook of
// transformOperator).
// flushIn is how long the batch's first record may still wait before the batch is handed on
// (WasmBatchDelay from its arrival); false when the batch is empty.
func (w *wasmOp) flushIn() (time.Duration, bool) {
	if w.batch.Len() == 0 || w.err != nil {
		return 0, false
	}
	return w.delay - time.Since(w.first), true
}

func (w *wasmOp) Flush(ctx *Context) error {
	if w.err != nil {
		return w.err
	}
	if w.batch.Len() == 0 {
		return nil
	}
	defer func() {
		w.batch.Reset()
		clear(w.recs) // the records' bytes are not kept past the call
		w.recs = w.recs[:0]
	}()
	var st wasmhost.State
	if w.cfg.GetKind() == pb.WasmKind_WASM_KIND_PROCESS {
		w.st.ctx, w.st.recs = ctx, w.recs
		st = &w.st
	}
	out, err := w.inst.Call(w.cfg.GetFunction(), &w.batch, st)
	if err != nil {
		w.err = err
		return err
	}
	return w.emit(ctx, out, w.recs)
}

// emit decodes a call's output, checks it against the kind, and emits its records: each
// keeps the lineage of the input record it names and the fields its flags keep.
func (w *wasmOp) emit(ctx *Context, out []byte, in []Record) error {
	kind := w.cfg.GetKind()
	one := kind == pb.WasmKind_WASM_KIND_MAP || kind == pb.WasmKind_WASM_KIND_KEY_BY
	next, n := 0, 0 // the input record the next output of a one-to-one kind must name
	err := wasmhost.Decode(out, len(in), func(o wasmhost.Out) error {
		src := int(o.Src)
		switch {
		case one && src != next:
			return fmt.Errorf("a %s function emits one record per record, in order: its output names record %d where record %d was due", w.kindName(), src, next)
		case kind == pb.WasmKind_WASM_KIND_FILTER && (src < next || o.Flags != wasmhost.SameKey|wasmhost.SameValue|wasmhost.SameTime):
			return fmt.Errorf("a FILTER function emits each record unchanged or not at all: its output for record %d is another or a second one", src)
		case kind == pb.WasmKind_WASM_KIND_KEY_BY && o.Flags&(wasmhost.SameValue|wasmhost.SameTime) != wasmhost.SameValue|wasmhost.SameTime:
			return fmt.Errorf("a KEY_BY function changes only the key: its output for record %d changes the value or the time", src)
		}
		next = src + 1
		r := in[src]
		if o.Flags&wasmhost.SameKey == 0 {
			r.Key = o.Key
		}
		if o.Flags&wasmhost.SameValue == 0 {
			r.Value = o.Value
		}
		if o.Flags&wasmhost.SameTime == 0 {
			r.Time = o.Time
		}
		n++
		return ctx.Emit(r)
	})
	if err == nil && one && next != len(in) {
		err = fmt.Errorf("a %s function emits one record per record: it emitted %d for %d", w.kindName(), next, len(in))
	}
	w.inst.CountOut(n)
	if err != nil {
		w.err = fmt.Errorf("wasm: module %s, function %s: %w", shortSHA(w.cfg.GetArtifact()), w.cfg.GetFunction(), err)
		return w.err
	}
	return nil
}

// OnTimer calls the module's jm_timer with one record: the timer's key, no value, its time.
func (w *wasmOp) OnTimer(ctx *Context, at int64) error {
	if err := w.Flush(ctx); err != nil {
		return err
	}
	key := append([]byte(nil), ctx.Key()...)
	w.tb.Reset()
	w.tb.Add(key, nil, at)
	rec := []Record{{Key: key, Time: at}}
	w.st.ctx, w.st.recs = ctx, rec
	out, err := w.inst.Timer(&w.tb, &w.st)
	if err != nil {
		w.err = err
		return err
	}
	return w.emit(ctx, out, rec)
}

func (w *wasmOp) Finish(ctx *Context) error { return w.Flush(ctx) }

func (w *wasmOp) Close() error {
	if w.inst == nil {
		return nil
	}
	return w.inst.Close()
}

// wasmState is the keyed state of a PROCESS call (wasmhost.State): record i's key made the
// Context's current key, then the Context's values and timers.
type wasmState struct {
	ctx  *Context
	recs []Record
}

func (s *wasmState) key(i uint32) {
	if int(i) >= len(s.recs) {
		panic(fmt.Errorf("a state call names record %d of a batch of %d", i, len(s.recs)))
	}
	s.ctx.key = s.recs[i].Key
}

func (s *wasmState) Get(i uint32) ([]byte, bool)      { s.key(i); return s.ctx.Value() }
func (s *wasmState) Put(i uint32, v []byte)           { s.key(i); s.ctx.SetValue(v) }
func (s *wasmState) Delete(i uint32)                  { s.key(i); s.ctx.ClearValue() }
func (s *wasmState) RegisterTimer(i uint32, at int64) { s.key(i); s.ctx.RegisterTimer(at) }
func (s *wasmState) DeleteTimer(i uint32, at int64)   { s.key(i); s.ctx.DeleteTimer(at) }
func (s *wasmState) Watermark() int64                 { return s.ctx.Watermark() }

// WasmStats is the counts of the operator's instance (WasmStatser); zero before Open.
func (w *wasmOp) WasmStats() wasmhost.Stats {
	if w.inst == nil {
		return wasmhost.Stats{}
	}
	return w.inst.Stats()
}
