package operator

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// Event time at a source (docs/task-runtime.md, "Event time and watermarks"): a source whose
// operator has event_time gives each record its event time (timeReader) and emits watermarks
// with a bounded out-of-orderness (sourceClock), driven by a ticker: the record path only
// reads an atomic flag the ticker sets, the clock is read once per tick.

const (
	// DefaultWatermarkInterval is how often a source emits its watermark when it advanced,
	// when event_time.watermark_interval_ms is 0. A source that waits (SourceContext.Wait)
	// without event time ticks at this interval too, to inject a triggered checkpoint's
	// barrier.
	DefaultWatermarkInterval = 200 * time.Millisecond
	// MaxWatermark is the watermark of the end of the input (Flink's MAX_WATERMARK): a
	// bounded source emits it once every split ended, and every timer fires at it.
	MaxWatermark = math.MaxInt64
)

// timeReader reads a record's event time as event_time says: the JSON value at path in
// format, or the time the source set when path is empty.
type timeReader struct {
	path   string // the event_time.time_path as written ("ts", "event.time")
	gpath  string // path with each segment escaped for gjson
	format pb.TimeFormat
}

func newTimeReader(et *pb.EventTime) timeReader {
	tr := timeReader{path: et.GetTimePath(), format: et.GetTimeFormat()}
	if tr.format == pb.TimeFormat_TIME_FORMAT_UNSPECIFIED {
		tr.format = pb.TimeFormat_TIME_FORMAT_UNIX_MS
	}
	if tr.path != "" {
		segs := strings.Split(tr.path, ".")
		for i, s := range segs {
			segs[i] = gjson.Escape(s)
		}
		tr.gpath = strings.Join(segs, ".")
	}
	return tr
}

// maxShown bounds the bytes of a field's JSON a dead letter's reason quotes.
const maxShown = 64

// read returns r's event time, or why it has none ("lacks the field ts", "field ts is
// "abc", not a number of ms").
func (tr timeReader) read(r Record) (int64, string) {
	if tr.path == "" {
		if r.Time == NoTimestamp {
			return 0, "has no event time: the source sets none and event_time.time_path is empty"
		}
		return r.Time, ""
	}
	res := gjson.GetBytes(r.Value, tr.gpath)
	if !res.Exists() {
		if !gjson.ValidBytes(r.Value) {
			return 0, "not valid JSON"
		}
		return 0, "lacks the field " + tr.path
	}
	var (
		t    int64
		ok   bool
		want string
	)
	switch tr.format {
	case pb.TimeFormat_TIME_FORMAT_UNIX_SECONDS:
		want = "not a number of seconds"
		if res.Type == gjson.Number {
			t, ok = secondsToMs(res.Raw)
		}
	case pb.TimeFormat_TIME_FORMAT_RFC3339:
		want = "not an RFC 3339 time"
		if res.Type == gjson.String {
			if tm, err := time.Parse(time.RFC3339Nano, res.Str); err == nil {
				t, ok = tm.UnixMilli(), true
			}
		}
	default:
		want = "not a number of ms"
		if res.Type == gjson.Number {
			t, ok = numberToMs(res.Raw)
		}
	}
	if !ok || t == NoTimestamp {
		raw := res.Raw
		if len(raw) > maxShown {
			raw = raw[:maxShown] + "..."
		}
		return 0, fmt.Sprintf("field %s is %s, %s", tr.path, raw, want)
	}
	return t, ""
}

// numberToMs reads a JSON number of ms: an integer, or a finite number in range (its
// fraction dropped).
func numberToMs(raw string) (int64, bool) {
	if n, err := strconv.ParseInt(raw, 10, 64); err == nil {
		return n, true
	}
	f, err := strconv.ParseFloat(raw, 64)
	if err != nil || !(f > math.MinInt64 && f < math.MaxInt64) {
		return 0, false
	}
	return int64(math.Floor(f)), true
}

// secondsToMs reads a JSON number of seconds to the ms: "1700000000.25" is 1700000000250
// exactly (the digits after the third of the fraction are dropped); a number with an exponent
// goes through a float.
func secondsToMs(raw string) (int64, bool) {
	if !strings.ContainsAny(raw, "eE") {
		whole, frac, _ := strings.Cut(raw, ".")
		neg := strings.HasPrefix(whole, "-")
		s, err := strconv.ParseInt(whole, 10, 64)
		if err != nil || s > math.MaxInt64/1000 || s < math.MinInt64/1000+1 {
			return 0, false
		}
		frac = (frac + "000")[:3]
		ms, err := strconv.ParseInt(frac, 10, 64)
		if err != nil {
			return 0, false
		}
		if neg {
			return s*1000 - ms, true
		}
		return s*1000 + ms, true
	}
	f, err := strconv.ParseFloat(raw, 64)
	if err != nil {
		return 0, false
	}
	return numberToMs(strconv.FormatFloat(f*1000, 'f', -1, 64))
}

// sourceClock is the watermark generator of a source task (Flink's bounded out-of-orderness
// generator, per split, with idleness): each split's watermark is the highest event time it
// emitted minus the out-of-orderness minus 1; the task's is the lowest over its splits that
// are neither idle nor ended. It is pure: the caller tells it each record and each tick's
// time (tick), and emits what tick returns.
type sourceClock struct {
	outOfOrder int64
	idleAfter  time.Duration // 0: a split is never idle
	splits     []splitClock
	emitted    int64 // the watermark emitted last; NoTimestamp: none
	idleSent   bool  // the task said it is idle, and no record came since
	resend     bool  // emit the watermark at the next tick even if it did not advance
}

// splitClock is one split's part of a sourceClock.
type splitClock struct {
	high  int64     // the highest event time the split emitted; NoTimestamp: none
	seen  bool      // the split emitted a record since the last tick
	last  time.Time // the last tick that found a record of the split (or the start)
	idle  bool
	ended bool
}

func newSourceClock(et *pb.EventTime, splits int, now time.Time) *sourceClock {
	c := &sourceClock{outOfOrder: et.GetMaxOutOfOrdernessMs(), idleAfter: time.Duration(et.GetIdleTimeoutMs()) * time.Millisecond,
		splits: make([]splitClock, splits), emitted: NoTimestamp}
	for i := range c.splits {
		c.splits[i] = splitClock{high: NoTimestamp, last: now}
	}
	return c
}

// record notes that split i emitted a record of event time t.
func (c *sourceClock) record(i int, t int64) {
	s := &c.splits[i]
	s.seen = true
	if t > s.high {
		s.high = t
	}
}

// end notes that split i has no more records.
func (c *sourceClock) end(i int) { c.splits[i].ended = true }

// splitWatermark is the watermark of a split whose highest event time is high.
func (c *sourceClock) splitWatermark(high int64) int64 {
	if high == NoTimestamp || high < NoTimestamp+c.outOfOrder+1 {
		return NoTimestamp
	}
	return high - c.outOfOrder - 1
}

// tick updates the splits' idleness at now and returns the control record to emit, if any:
// the task's watermark when it advanced (or must be said again), or the idle marker once
// when every split that has not ended is idle.
func (c *sourceClock) tick(now time.Time) (Record, bool) {
	wm, active, idle := int64(MaxWatermark), 0, 0
	for i := range c.splits {
		s := &c.splits[i]
		switch {
		case s.ended:
			continue
		case s.seen:
			s.seen, s.last, s.idle = false, now, false
		case c.idleAfter > 0 && now.Sub(s.last) >= c.idleAfter:
			s.idle = true
		}
		if s.idle {
			idle++
			continue
		}
		active++
		wm = min(wm, c.splitWatermark(s.high))
	}
	if active == 0 {
		if idle > 0 && !c.idleSent {
			c.idleSent = true
			return Record{Watermark: true, Idle: true, Time: NoTimestamp}, true
		}
		return Record{}, false
	}
	if c.idleSent {
		c.idleSent, c.resend = false, true
	}
	switch {
	case wm > c.emitted:
		c.emitted, c.resend = wm, false
	case c.resend && c.emitted != NoTimestamp:
		c.resend = false
	default:
		return Record{}, false
	}
	return Record{Watermark: true, Time: c.emitted}, true
}

// Poller is a SourceOperator that calls poll while its source waits (SourceContext.Wait), at
// every tick: the TaskManager injects a triggered checkpoint's barrier there, so a source
// with nothing to emit still takes part in checkpoints.
type Poller interface {
	SetPoll(poll func() error)
}
