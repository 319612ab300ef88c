package nemesis

import (
	"math/rand"
	"time"
)

// ScheduleConfig shapes a generated schedule.
type ScheduleConfig struct {
	Kinds    []Kind
	Seed     int64
	Duration time.Duration // faults start and end inside [Warmup, Duration]
	Warmup   time.Duration // no fault before this
	MinFault time.Duration // 0 means 3s
	MaxFault time.Duration // 0 means 8s
	MinGap   time.Duration // 0 means 3s
	MaxGap   time.Duration // 0 means 8s
}

func (c ScheduleConfig) withDefaults() ScheduleConfig {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.MinFault, 3*time.Second)
	def(&c.MaxFault, 8*time.Second)
	def(&c.MinGap, 3*time.Second)
	def(&c.MaxGap, 8*time.Second)
	if c.MaxFault < c.MinFault {
		c.MaxFault = c.MinFault
	}
	if c.MaxGap < c.MinGap {
		c.MaxGap = c.MinGap
	}
	return c
}

// Generate returns the faults of a run: one at a time, each followed by a healthy gap, every
// choice drawn from a math/rand source seeded with cfg.Seed. The same config always yields the
// same schedule. The last fault ends no later than cfg.Duration.
func Generate(cfg ScheduleConfig) []Fault {
	cfg = cfg.withDefaults()
	if len(cfg.Kinds) == 0 {
		return nil
	}
	rng := rand.New(rand.NewSource(cfg.Seed))
	between := func(lo, hi time.Duration) time.Duration {
		if hi <= lo {
			return lo
		}
		return lo + time.Duration(rng.Int63n(int64(hi-lo)))
	}
	var out []Fault
	stalls := 0
	for at := cfg.Warmup; ; {
		kind := cfg.Kinds[rng.Intn(len(cfg.Kinds))]
		minF, maxF, minG, maxG := cfg.MinFault, cfg.MaxFault, cfg.MinGap, cfg.MaxGap
		if t, ok := KindTiming(kind); ok {
			minF, maxF = or(t.MinFault, minF), or(t.MaxFault, maxF)
			minG, maxG = or(t.MinGap, minG), or(t.MaxGap, maxG)
		}
		length := between(minF, maxF)
		if l, ok := FixedLength(kind); ok {
			length = l
		}
		if kind == StallLeader {
			length = StallLengths[stalls%len(StallLengths)]
			stalls++
		}
		pick := rng.Int63()
		if at+length > cfg.Duration {
			break
		}
		out = append(out, Fault{Index: len(out), Kind: kind, At: at, Length: length, Pick: pick})
		at += length + between(minG, maxG)
	}
	return out
}

func or(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
