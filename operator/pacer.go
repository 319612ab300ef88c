package operator

import (
	"context"
	"time"
)

// maxBurst bounds how far behind its schedule a rate-limited source may fall before it forgets
// the debt: after a stall it catches up by at most this many seconds of records.
const maxBurst = time.Second

// pacer paces a source to rate records per second with a token bucket: record n is due at
// begin + n/rate; records already due go without sleeping, so coarse timers do not lower the
// rate. A rate of 0 does not pace (it only checks the context every 1024 records).
type pacer struct {
	interval time.Duration
	next     time.Time
	timer    *time.Timer
}

func newPacer(rate float64) *pacer {
	p := &pacer{next: time.Now()}
	if rate > 0 {
		p.interval = time.Duration(float64(time.Second) / rate)
	}
	return p
}

// wait returns when record n is due, or the context's error.
func (p *pacer) wait(ctx context.Context, n int64) error {
	if p.interval <= 0 {
		if n&1023 == 0 {
			return ctx.Err()
		}
		return nil
	}
	now := time.Now()
	if wait := p.next.Sub(now); wait > 0 {
		if p.timer == nil {
			p.timer = time.NewTimer(wait)
		} else {
			p.timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-p.timer.C:
		}
	} else if -wait > maxBurst {
		p.next = now.Add(-maxBurst)
	}
	p.next = p.next.Add(p.interval)
	return nil
}

func (p *pacer) stop() {
	if p.timer != nil {
		p.timer.Stop()
	}
}
