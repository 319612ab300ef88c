package operator

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// SourceContext is what a source reaches its task through while it reads its splits. It is
// used on the task's goroutine only (but for the ticker's flag).
type SourceContext struct {
	ctx    context.Context
	info   Info
	out    Emit
	splits []Split // the task's splits; Next is the position a checkpoint keeps

	// Event time (nil clock: the source has no event_time): each record's time is read
	// (times), the clock generates the watermarks at each tick of the ticker.
	clock    *sourceClock
	times    timeReader
	interval time.Duration // the ticker's period
	now      func() time.Time
	due      atomic.Bool   // the ticker ticked: the next Emit or Wait handles it
	tick     chan struct{} // the ticker's wake-up of a Wait; nil before the ticker starts
	stopTick func()
	poll     func() error // the task's, called at each tick of a Wait (Poller)
	timer    *time.Timer  // Wait's, reused
}

// Context is cancelled when the task ends.
func (c *SourceContext) Context() context.Context { return c.ctx }

// Info describes the task the source runs in.
func (c *SourceContext) Info() Info { return c.info }

// Emit hands r, read at position pos of the split at index split of Read's splits, to the
// downstream partitions. A checkpoint taken in front of r keeps pos as the split's position,
// so a source restored from it reads r again; once r is emitted, the position is pos+1.
// With event time, r's time is read first (a record whose time cannot be read goes to the
// dead-letter output instead), and a due watermark follows r.
func (c *SourceContext) Emit(split int, pos int64, r Record) error {
	c.splits[split].Next = pos
	if c.clock == nil {
		if err := c.out(r); err != nil {
			return err
		}
		c.splits[split].Next = pos + 1
		return nil
	}
	t, reason := c.times.read(r)
	if reason != "" {
		return c.DeadLetter(split, pos, r, reason)
	}
	r.Time = t
	if err := c.out(r); err != nil {
		return err
	}
	c.splits[split].Next = pos + 1
	c.clock.record(split, t)
	return c.after(split, pos)
}

// DeadLetter sends r, read at position pos of the split at index split, to the job's
// dead-letter output with the reason it could not be emitted (DeadLetterRecord); the split's
// position moves past it as Emit's does.
func (c *SourceContext) DeadLetter(split int, pos int64, r Record, reason string) error {
	c.splits[split].Next = pos
	if err := sendDeadLetter(c.info, r, reason); err != nil {
		return err
	}
	c.splits[split].Next = pos + 1
	if c.clock == nil {
		return nil
	}
	return c.after(split, pos)
}

// after is event time's part after the record at pos of split: the split's end, a due tick.
func (c *SourceContext) after(split int, pos int64) error {
	if e := c.splits[split].End; e > 0 && pos+1 >= e {
		c.clock.end(split)
	}
	if c.due.Load() {
		return c.onTick()
	}
	return nil
}

// Wait returns after d, or the context's error when the task ends first; a negative d waits
// until the task ends. A source waits here, not on a timer of its own (a pacer between
// records, a split without data): the task's watermarks and idleness go on ticking while it
// waits, and a triggered checkpoint's barrier is injected.
func (c *SourceContext) Wait(d time.Duration) error {
	if d == 0 {
		return c.ctx.Err()
	}
	var fire <-chan time.Time
	if d > 0 {
		if c.timer == nil {
			c.timer = time.NewTimer(d)
		} else {
			c.timer.Reset(d)
		}
		fire = c.timer.C
		defer c.timer.Stop()
	}
	if c.tick == nil && (d < 0 || c.clock != nil || c.poll != nil) { // a tick injects a barrier even in a short wait
		c.startTicker()
	}
	for {
		select {
		case <-c.ctx.Done():
			return c.ctx.Err()
		case <-fire:
			return nil
		case <-c.tick:
			if err := c.ticked(); err != nil {
				return err
			}
		}
	}
}

// ticked handles a tick during a wait: the due watermark and idleness (onTick), then the
// task's poll (the barriers triggered meanwhile).
func (c *SourceContext) ticked() error {
	if err := c.onTick(); err != nil {
		return err
	}
	if c.poll != nil {
		return c.poll()
	}
	return nil
}

// WaitReady returns once it received a signal from ready, or the context's
// error when the task ends first: a source whose records come from another goroutine waits
// here, and its watermarks, idleness and checkpoint barriers go on ticking while it waits.
func (c *SourceContext) WaitReady(ready <-chan struct{}) error {
	if c.tick == nil {
		c.startTicker()
	}
	for {
		select {
		case <-c.ctx.Done():
			return c.ctx.Err()
		case <-ready:
			return nil
		case <-c.tick:
			if err := c.ticked(); err != nil {
				return err
			}
		}
	}
}

// onTick handles a tick of the ticker: the clock's watermark or idle marker, if any, goes out.
func (c *SourceContext) onTick() error {
	c.due.Store(false)
	select {
	case <-c.tick:
	default:
	}
	if c.clock == nil {
		return nil
	}
	r, ok := c.clock.tick(c.now())
	if !ok {
		return nil
	}
	return c.out(r)
}

// startTicker starts the goroutine that ticks every interval until stopTick.
func (c *SourceContext) startTicker() {
	c.tick = make(chan struct{}, 1)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tk := time.NewTicker(c.interval)
		defer tk.Stop()
		for {
			select {
			case <-done:
				return
			case <-tk.C:
				c.due.Store(true)
				select {
				case c.tick <- struct{}{}:
				default:
				}
			}
		}
	}()
	c.stopTick = func() { close(done); wg.Wait() }
}

// sourceOperator runs a Source on a task: it assigns the task its splits, keeps their
// positions (sourceState) and restores them; with event time, it keeps the splits' highest
// event times and the watermark emitted, and emits the final watermark.
type sourceOperator struct {
	src Source
	sc  SourceContext
}

// sourceState is the positions of a source task's splits: {"next":N} for a task of one split
// (the format of a single position), {"splits":[{"id":I,"next":N},...]} for one of several.
// With event time, each split's highest event time (high) and the task's watermark emitted
// (watermark) come with them: {"next":N,"high":H,"watermark":W}, {"splits":[{"id":I,
// "next":N,"high":H},...],"watermark":W}. A state without them (before event time, or of a
// split that emitted nothing) restores as none.
type sourceState struct {
	Next *int64 `json:"next,omitempty"`
	// Source is the state of a source that keeps one of its own (ownStateSource).
	Source    json.RawMessage `json:"source,omitempty"`
	High      *int64          `json:"high,omitempty"`
	Splits    []splitState    `json:"splits,omitempty"`
	Watermark *int64          `json:"watermark,omitempty"`
}

// ownStateSource is a Source whose work its fixed splits cannot express (the file source's
// files, found while it runs): it keeps a state of its own, kept by the checkpoint in the
// source state's "source" beside its splits' positions. snapshotSource is called on the
// task's goroutine with the task's splits as SnapshotState keeps them (a record in flight
// is before the barrier when its split's Next is past its position); restoreSource gets what
// it returned, before Read.
type ownStateSource interface {
	snapshotSource(splits []Split) (json.RawMessage, error)
	restoreSource(b json.RawMessage) error
}

type splitState struct {
	ID   int32  `json:"id"`
	Next int64  `json:"next"`
	High *int64 `json:"high,omitempty"`
}

func newSourceOperator(kind string, src Source, info Info, et *pb.EventTime) (*sourceOperator, error) {
	par := max(info.Parallelism, info.Subtask+1, 1) // a task outside its parallelism reads the split of its index
	o := &sourceOperator{src: src, sc: SourceContext{info: info, interval: DefaultWatermarkInterval, now: time.Now}}
	o.sc.splits = AssignSplits(src.Splits(par), info.Subtask, par)
	if et != nil {
		o.sc.clock, o.sc.times = newSourceClock(et, len(o.sc.splits), time.Now()), newTimeReader(et)
		if ms := et.GetWatermarkIntervalMs(); ms > 0 {
			o.sc.interval = time.Duration(ms) * time.Millisecond
		}
	}
	if len(info.Restored) > 0 {
		if err := o.restore(info.Restored); err != nil {
			return nil, fmt.Errorf("restore %s from its checkpointed state: %w", kind, err)
		}
	}
	return o, nil
}

// SetPoll makes poll called at each tick of a Wait (Poller).
func (o *sourceOperator) SetPoll(poll func() error) { o.sc.poll = poll }

// Run reads the task's splits. With event time the ticker runs meanwhile, and a source whose
// splits were all read emits the final watermark (MaxWatermark) before it returns.
func (o *sourceOperator) Run(ctx context.Context, out Emit) error {
	o.sc.ctx, o.sc.out = ctx, out
	if o.sc.clock != nil {
		for i := range o.sc.clock.splits {
			o.sc.clock.splits[i].last = o.sc.now() // idleness counts from the start of the run
		}
		o.sc.startTicker()
	}
	defer func() {
		if o.sc.stopTick != nil {
			o.sc.stopTick()
		}
	}()
	if err := o.src.Read(&o.sc, slices.Clone(o.sc.splits)); err != nil {
		return err
	}
	if o.sc.clock == nil {
		return nil
	}
	o.sc.clock.emitted = MaxWatermark
	return out(Record{Watermark: true, Time: MaxWatermark})
}

// SnapshotState returns the position of each split: the record being emitted when the
// barrier is injected comes after the barrier (the TaskManager injects it in front of it).
func (o *sourceOperator) SnapshotState() ([]byte, error) {
	ss := make([]splitState, len(o.sc.splits))
	for i, s := range o.sc.splits {
		ss[i] = splitState{ID: s.ID, Next: s.Next}
	}
	var wm *int64
	if c := o.sc.clock; c != nil {
		for i := range ss {
			if h := c.splits[i].high; h != NoTimestamp {
				ss[i].High = &h
			}
		}
		if c.emitted != NoTimestamp {
			wm = &c.emitted
		}
	}
	var own json.RawMessage
	if src, ok := o.src.(ownStateSource); ok {
		b, err := src.snapshotSource(o.sc.splits)
		if err != nil {
			return nil, err
		}
		own = b
	}
	if len(ss) == 1 {
		return json.Marshal(sourceState{Next: &ss[0].Next, High: ss[0].High, Watermark: wm, Source: own})
	}
	return json.Marshal(sourceState{Splits: ss, Watermark: wm, Source: own})
}

func (o *sourceOperator) restore(b []byte) error {
	var st sourceState
	if err := json.Unmarshal(b, &st); err != nil {
		return err
	}
	if src, ok := o.src.(ownStateSource); ok && len(st.Source) > 0 {
		if err := src.restoreSource(st.Source); err != nil {
			return err
		}
	} else if len(st.Source) > 0 {
		return fmt.Errorf("a state of its own for a source that keeps none")
	}
	restored := st.Splits
	if st.Next != nil {
		if len(o.sc.splits) != 1 || len(st.Splits) > 0 {
			return fmt.Errorf("one position for %d splits", len(o.sc.splits))
		}
		restored = []splitState{{ID: o.sc.splits[0].ID, Next: *st.Next, High: st.High}}
	}
	if len(restored) != len(o.sc.splits) {
		return fmt.Errorf("positions of %d splits for the %d splits of this subtask", len(restored), len(o.sc.splits))
	}
	for _, r := range restored {
		i := slices.IndexFunc(o.sc.splits, func(s Split) bool { return s.ID == r.ID })
		if i < 0 {
			return fmt.Errorf("split %d is not one of this subtask's", r.ID)
		}
		s := &o.sc.splits[i]
		switch {
		case r.Next < 0:
			return fmt.Errorf("split %d: position %d is negative", r.ID, r.Next)
		case s.End > 0 && r.Next > s.End:
			return fmt.Errorf("split %d: position %d is outside the sequence [0, %d)", r.ID, r.Next, s.End)
		}
		s.Next = r.Next
		if c := o.sc.clock; c != nil {
			if r.High != nil {
				c.splits[i].high = *r.High
			}
			if s.End > 0 && s.Next >= s.End {
				c.end(i)
			}
		}
	}
	if c := o.sc.clock; c != nil && st.Watermark != nil {
		c.emitted, c.resend = *st.Watermark, true // said again at the first tick, never lower
	}
	return nil
}
