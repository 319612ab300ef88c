package taskmanager

import (
	"fmt"

	"github.com/jmcluster/jmcluster/dataplane"
	"github.com/jmcluster/jmcluster/operator"
)

// Watermarks in a task (docs/task-runtime.md, "Event time and watermarks"). A source's
// watermarks come from its SourceContext; a task with inputs keeps, per input channel, the
// latest watermark and whether the channel is idle or ended (channelClocks), and its own
// watermark is the lowest over the channels that are neither. When it advances, the
// operator's timers fire (operator.Watermarker), then the watermark goes downstream. Both go
// out through the task's emit, which broadcasts a watermark or idle marker to every output
// subpartition (emitWatermark). Only the task's goroutine touches them.

// clockAction is what a change of the channels' clocks asks the task to do.
type clockAction int

const (
	noAction     clockAction = iota
	advanceTo                // the task's watermark advanced: fire the timers, forward it
	forwardIdle              // every channel that has not ended is idle
	forwardAgain             // active again after idle: say the watermark again
)

// channelClock is one input channel's part of a task's watermark.
type channelClock struct {
	wm    int64 // the channel's latest watermark; NoTimestamp: none yet
	idle  bool
	ended bool
}

// channelClocks is the watermark of a task with inputs: the lowest over its channels that are
// neither idle nor ended; when they all ended, MaxWatermark. It never goes back, and says
// nothing until a first watermark arrived (a job without event time sends none).
type channelClocks struct {
	chans []channelClock
	idle  int   // channels idle (not ended)
	ended int   // channels ended
	out   int64 // the task's watermark; NoTimestamp: none
	// idleOut: the task forwarded the idle marker and no channel is active since.
	idleOut bool
	seen    bool // a watermark or idle marker arrived on some channel
}

func newChannelClocks(n int, start int64) *channelClocks {
	c := &channelClocks{chans: make([]channelClock, n), out: start}
	for i := range c.chans {
		c.chans[i].wm = operator.NoTimestamp
	}
	return c
}

// channel returns channel ch's clock (a channel added later starts at none).
func (c *channelClocks) channel(ch int) *channelClock {
	for len(c.chans) <= ch {
		c.chans = append(c.chans, channelClock{wm: operator.NoTimestamp})
	}
	return &c.chans[ch]
}

// watermark takes channel ch's watermark record (a watermark, or the idle marker).
func (c *channelClocks) watermark(ch int, r operator.Record) (clockAction, int64) {
	c.seen = true
	s := c.channel(ch)
	if s.ended {
		return noAction, c.out
	}
	if r.Idle {
		if s.idle {
			return noAction, c.out
		}
		s.idle = true
		c.idle++
		return c.compute()
	}
	was, wasIdle := s.wm, s.idle
	if r.Time > s.wm {
		s.wm = r.Time
	}
	if wasIdle {
		s.idle = false
		c.idle--
		return c.compute()
	}
	if was > c.out && !c.idleOut {
		return noAction, c.out // another channel holds the task's watermark
	}
	return c.compute()
}

// data notes a data record on channel ch: an idle channel is active again.
func (c *channelClocks) data(ch int) (clockAction, int64) {
	s := c.channel(ch)
	if !s.idle {
		return noAction, c.out
	}
	s.idle = false
	c.idle--
	return c.compute()
}

// end notes that channel ch ended.
func (c *channelClocks) end(ch int) (clockAction, int64) {
	s := c.channel(ch)
	if s.ended {
		return noAction, c.out
	}
	if s.idle {
		s.idle = false
		c.idle--
	}
	s.ended = true
	c.ended++
	return c.compute()
}

// compute derives the task's watermark from its channels.
func (c *channelClocks) compute() (clockAction, int64) {
	if !c.seen {
		return noAction, c.out
	}
	low, active := int64(operator.MaxWatermark), 0
	for _, s := range c.chans {
		if s.idle || s.ended {
			continue
		}
		active++
		low = min(low, s.wm)
	}
	if active == 0 {
		if c.ended == len(c.chans) {
			if c.out < operator.MaxWatermark {
				c.out = operator.MaxWatermark
				return advanceTo, c.out
			}
			return noAction, c.out
		}
		if !c.idleOut {
			c.idleOut = true
			return forwardIdle, c.out
		}
		return noAction, c.out
	}
	again := c.idleOut
	c.idleOut = false
	switch {
	case low > c.out:
		c.out = low
		return advanceTo, c.out
	case again && c.out != operator.NoTimestamp:
		return forwardAgain, c.out
	}
	return noAction, c.out
}

// taskClock is a task's watermark at work: its channels' clocks, the operator it advances
// and the emit its watermarks go out through.
type taskClock struct {
	*channelClocks
	op   operator.Watermarker // nil: the operator keeps no event time (a sink)
	emit operator.Emit
}

// newTaskClock is the clock of a task of n input channels running op; a restored operator's
// watermark is where the task's starts (it never goes back).
func newTaskClock(t *task, n int, op operator.Operator, emit operator.Emit) *taskClock {
	start := int64(operator.NoTimestamp)
	w, _ := op.(operator.Watermarker)
	if w != nil {
		start = w.Watermark()
	}
	if start != operator.NoTimestamp {
		t.watermarkMs.Store(start)
	}
	return &taskClock{channelClocks: newChannelClocks(n, start), op: w, emit: emit}
}

// apply does what a change of the channels' clocks asks.
func (c *taskClock) apply(a clockAction, t int64) error {
	switch a {
	case advanceTo:
		if c.op != nil {
			if err := c.op.AdvanceWatermark(t, c.emit); err != nil {
				return fmt.Errorf("watermark %d: %w", t, err)
			}
		}
		return c.emit(operator.Record{Watermark: true, Time: t})
	case forwardAgain:
		return c.emit(operator.Record{Watermark: true, Time: t})
	case forwardIdle:
		return c.emit(operator.Record{Watermark: true, Idle: true, Time: operator.NoTimestamp})
	}
	return nil
}

// emitWatermark is the task's emit of a watermark or idle marker (from its source or its
// clock): broadcast to every output subpartition, not counted as a record, and the task's
// reported watermark.
func emitWatermark(t *task, r operator.Record, parts []*dataplane.Partition) error {
	if !r.Idle && r.Time != operator.NoTimestamp {
		t.watermarkMs.Store(r.Time)
	}
	for _, p := range parts {
		var err error
		if r.Idle {
			err = p.BroadcastIdle(t.ctx)
		} else {
			err = p.BroadcastWatermark(t.ctx, r.Time)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// pollBarriers makes a source that waits inject a triggered checkpoint's barrier at each tick
// of its wait (operator.Poller).
func pollBarriers(src operator.SourceOperator, inject func() error) {
	if p, ok := src.(operator.Poller); ok {
		p.SetPoll(inject)
	}
}
