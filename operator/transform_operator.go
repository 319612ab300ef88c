package operator

import (
	"context"
	"fmt"
	"time"
)

// transformOperator runs a Transform on a task: it owns the transform's Context (its keyed
// values, timers and watermark), fires the timers the watermark passes and the pending ones
// when the input ends, and snapshots and restores the Context of a keyed transform.
type transformOperator struct {
	kind  string
	t     Transform
	keyed bool
	ctx   *Context
}

// flusher is a transform that holds records between Process calls (the wasm operator's
// batch): Flush hands them on. The runtime flushes before the watermark advances (so a timer
// fires after the records before it), before a snapshot (the state is that after every
// record before the barrier, and their output goes before the barrier), and at the end of
// the input.
type flusher interface{ Flush(ctx *Context) error }

// flush is the transform's Flush, if it has one, with the Context's output as it is.
func (o *transformOperator) flush() error {
	if f, ok := o.t.(flusher); ok && o.ctx.out != nil {
		if err := f.Flush(o.ctx); err != nil {
			return fmt.Errorf("%s: %w", o.kind, err)
		}
	}
	return nil
}

// FlushIn is how long the transform's oldest held record may still wait (Buffering); false
// when it holds none or holds no records at all.
func (o *transformOperator) FlushIn() (time.Duration, bool) {
	if h, ok := o.t.(interface{ flushIn() (time.Duration, bool) }); ok {
		return h.flushIn()
	}
	return 0, false
}

// Flush hands on the records the transform holds (Buffering).
func (o *transformOperator) Flush(out Emit) error {
	o.ctx.out = out
	return o.flush()
}

// legacyState is a keyed transform that also reads a state of the format its kind had
// before keyedState: restoreLegacy returns false for a state of another format.
type legacyState interface {
	restoreLegacy(b []byte, c *Context) (bool, error)
}

func newTransformOperator(kind string, t Transform, keyed bool, info Info) (*transformOperator, error) {
	o := &transformOperator{kind: kind, t: t, keyed: keyed, ctx: newContext(info)}
	if len(info.Restored) == 0 {
		return o, nil
	}
	if !keyed {
		return nil, fmt.Errorf("%w: %s keeps no state, but the checkpoint holds %d bytes for it", ErrBadConfig, kind, len(info.Restored))
	}
	if l, ok := t.(legacyState); ok {
		done, err := l.restoreLegacy(info.Restored, o.ctx)
		if err != nil {
			return nil, fmt.Errorf("restore %s from its checkpointed state: %w", kind, err)
		}
		if done {
			return o, nil
		}
	}
	if err := o.ctx.restore(info.Restored); err != nil {
		return nil, fmt.Errorf("restore %s from its checkpointed state: %w", kind, err)
	}
	return o, nil
}

func (o *transformOperator) Open(context.Context) error {
	if op, ok := o.t.(Opener); ok {
		o.ctx.out = func(Record) error { return fmt.Errorf("%s: Open emitted a record", o.kind) }
		return op.Open(o.ctx)
	}
	return nil
}

func (o *transformOperator) Process(r Record, out Emit) error {
	o.ctx.out, o.ctx.key = out, r.Key
	return o.t.Process(o.ctx, r)
}

// Watermark is the Context's watermark (Watermarker).
func (o *transformOperator) Watermark() int64 { return o.ctx.watermark }

// AdvanceWatermark moves the Context's watermark to t and fires the timers at or before t
// (Watermarker).
func (o *transformOperator) AdvanceWatermark(t int64, out Emit) error {
	o.ctx.out = out
	if err := o.flush(); err != nil {
		return err
	}
	h, _ := o.t.(TimerHandler)
	if err := o.ctx.advance(t, h); err != nil {
		return fmt.Errorf("%s: %w", o.kind, err)
	}
	return nil
}

// Finish fires every pending timer (the end of input passes them all), then finishes the
// transform.
func (o *transformOperator) Finish(out Emit) error {
	o.ctx.out = out
	if err := o.flush(); err != nil {
		return err
	}
	h, _ := o.t.(TimerHandler)
	if err := o.ctx.advance(endOfTime, h); err != nil {
		return fmt.Errorf("%s: %w", o.kind, err)
	}
	if f, ok := o.t.(Finisher); ok {
		return f.Finish(o.ctx)
	}
	return nil
}

func (o *transformOperator) Close() error {
	if c, ok := o.t.(Closer); ok {
		return c.Close()
	}
	return nil
}

// SnapshotState is the Context of a keyed transform (keyedState), and nil for another.
func (o *transformOperator) SnapshotState() ([]byte, error) {
	if err := o.flush(); err != nil {
		return nil, err
	}
	if !o.keyed {
		if !o.ctx.empty() {
			return nil, fmt.Errorf("%s keeps values or timers but is not registered as keyed: a restore would lose them", o.kind)
		}
		return nil, nil
	}
	if s, ok := o.t.(contextSnapshotter); ok {
		return s.snapshotContext(o.ctx)
	}
	return o.ctx.snapshot()
}

// contextSnapshotter is a keyed transform that makes its Context's snapshot itself: the
// window and the wasm operator, whose planted bugs (window-state-unchecked, wasm-state-lost)
// leave state out of it; with the failpoints off each returns ctx.snapshot().
type contextSnapshotter interface {
	snapshotContext(ctx *Context) ([]byte, error)
}
