package operator

import (
	"context"
	"time"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// maxBurst bounds how far behind its schedule a rate-limited source may fall before it forgets
// the debt: after a stall it catches up by at most this many seconds of records.
const maxBurst = time.Second

// sequenceSource emits value = start + i, key = value % keys, origin = subtask, seq = i, for
// i in [0, count) or forever when count is 0, paced to rate records per second.
type sequenceSource struct {
	start, count, keys int64
	rate               float64
	origin             int32
	next               int64 // the index of the next record (a restored source starts past 0)
}

func newSequenceSource(cfg *pb.SequenceSource, info Info) *sequenceSource {
	keys := cfg.GetKeys()
	if keys <= 0 {
		keys = 1
	}
	return &sequenceSource{
		start:  cfg.GetStart(),
		count:  cfg.GetCount(),
		keys:   keys,
		rate:   cfg.GetRatePerSecond(),
		origin: info.Subtask,
	}
}

// Run emits the sequence. Pacing is a token bucket: record i is due at begin + i/rate; records
// already due are emitted without sleeping, so coarse timers do not lower the rate.
func (s *sequenceSource) Run(ctx context.Context, out Emit) error {
	var interval time.Duration
	if s.rate > 0 {
		interval = time.Duration(float64(time.Second) / s.rate)
	}
	next := time.Now()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for i := s.next; s.count == 0 || i < s.count; i++ {
		s.next = i
		if interval > 0 {
			now := time.Now()
			if wait := next.Sub(now); wait > 0 {
				if timer == nil {
					timer = time.NewTimer(wait)
				} else {
					timer.Reset(wait)
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-timer.C:
				}
			} else if -wait > maxBurst {
				next = now.Add(-maxBurst)
			}
			next = next.Add(interval)
		} else if i&1023 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		v := s.start + i
		key := v % s.keys
		if key < 0 {
			key += s.keys
		}
		if err := out(Record{Key: key, Value: v, Origin: s.origin, Seq: i}); err != nil {
			return err
		}
	}
	s.next = s.count
	return nil
}
