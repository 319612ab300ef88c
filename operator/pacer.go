package operator

import (
	"time"
)

// maxBurst bounds how far behind its schedule a rate-limited source may fall before it forgets
// the debt: after a stall it catches up by at most this many seconds of records.
const maxBurst = time.Second

// pacer paces a source to rate records per second with a token bucket: record n is due at
// begin + n/rate; records already due go without waiting, so coarse timers do not lower the
// rate. It waits through SourceContext.Wait, so the task's watermarks and checkpoints go on
// while it waits. A rate of 0 does not pace (it only checks the context every 1024 records).
type pacer struct {
	interval time.Duration
	next     time.Time
}

func newPacer(rate float64) *pacer {
	p := &pacer{next: time.Now()}
	if rate > 0 {
		p.interval = time.Duration(float64(time.Second) / rate)
	}
	return p
}

// wait returns when record n is due, or the context's error.
func (p *pacer) wait(sc *SourceContext, n int64) error {
	if p.interval <= 0 {
		if n&1023 == 0 {
			return sc.Context().Err()
		}
		return nil
	}
	now := time.Now()
	if wait := p.next.Sub(now); wait > 0 {
		if err := sc.Wait(wait); err != nil {
			return err
		}
	} else if -wait > maxBurst {
		p.next = now.Add(-maxBurst)
	}
	p.next = p.next.Add(p.interval)
	return nil
}
