package taskmanager

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jmcluster/jmcluster/operator"
)

// clockStep is one input of a channelClocks test: "w<ch>:<t>" a watermark, "i<ch>" the idle
// marker, "d<ch>" a data record, "e<ch>" the end of the channel; want is what the task does:
// "adv <t>", "idle", "again <t>" or "-".
type clockStep struct{ in, want string }

func runClock(t *testing.T, c *channelClocks, steps []clockStep) {
	t.Helper()
	for i, s := range steps {
		var (
			ch int
			tm int64
			a  clockAction
			at int64
		)
		switch s.in[0] {
		case 'w':
			fmt.Sscanf(s.in[1:], "%d:%d", &ch, &tm)
			a, at = c.watermark(ch, operator.Record{Watermark: true, Time: tm})
		case 'i':
			fmt.Sscan(s.in[1:], &ch)
			a, at = c.watermark(ch, operator.Record{Watermark: true, Idle: true, Time: operator.NoTimestamp})
		case 'd':
			fmt.Sscan(s.in[1:], &ch)
			a, at = c.data(ch)
		case 'e':
			fmt.Sscan(s.in[1:], &ch)
			a, at = c.end(ch)
		}
		got := "-"
		switch a {
		case advanceTo:
			got = fmt.Sprintf("adv %d", at)
		case forwardIdle:
			got = "idle"
		case forwardAgain:
			got = fmt.Sprintf("again %d", at)
		}
		if got != s.want {
			t.Fatalf("step %d (%s): %s, want %s", i, s.in, got, s.want)
		}
	}
}

// TestChannelClocksMinimumIdleEnd: a task's watermark is the lowest over its channels that
// are neither idle nor ended, never back; every channel idle: the idle marker once; a channel
// active again (a record or a watermark) holds the watermark again and it is said again;
// every channel ended: MaxWatermark.
func TestChannelClocksMinimumIdleEnd(t *testing.T) {
	max := fmt.Sprint(int64(operator.MaxWatermark))
	runClock(t, newChannelClocks(3, operator.NoTimestamp), []clockStep{
		{"w0:10", "-"}, // channels 1 and 2 have said nothing
		{"w1:20", "-"},
		{"w2:5", "adv 5"},
		{"w2:30", "adv 10"},
		{"w1:25", "-"}, // channel 0 holds it
		{"w0:8", "-"},  // a channel's watermark never goes back
		{"w0:40", "adv 25"},
		{"i1", "adv 30"}, // idle: channel 1 no longer holds it
		{"i1", "-"},
		{"w1:26", "-"}, // active again, below the task's: holds it at 30
		{"w0:50", "-"},
		{"w2:60", "-"},
		{"w1:45", "adv 45"},
		{"i0", "-"},      // channel 1 holds it at 45
		{"i1", "adv 60"}, // channel 2 alone
		{"i2", "idle"},
		{"i2", "-"},
		{"d2", "again 60"}, // a record: channel 2 is active again
		{"e2", "idle"},     // ended: the rest are idle
		{"e0", "-"},
		{"e1", "adv " + max},
		{"w1:70", "-"},
	})
	// Without a watermark ever, nothing; not even at the end (a job without event time).
	runClock(t, newChannelClocks(2, operator.NoTimestamp), []clockStep{{"d0", "-"}, {"e0", "-"}, {"e1", "-"}})
	// A restored task starts at its operator's watermark: lower ones do not move it.
	runClock(t, newChannelClocks(2, 100), []clockStep{{"w0:50", "-"}, {"w1:150", "-"}, {"w0:120", "adv 120"}})
}

// wmOp is an operator.Watermarker that records the watermarks it is advanced to.
type wmOp struct {
	operator.Operator
	at  int64
	log *[]string
}

func (o *wmOp) Watermark() int64 { return o.at }
func (o *wmOp) AdvanceWatermark(t int64, _ operator.Emit) error {
	o.at = t
	*o.log = append(*o.log, fmt.Sprintf("adv%d", t))
	return nil
}

// newWMTrace is an alignTrace whose task has a clock: "adv<t>" when the operator advances,
// "out<t>" when a watermark goes downstream ("outidle" for the idle marker).
func newWMTrace(live int) *alignTrace {
	tr := newAlignTrace(live)
	op := &wmOp{at: operator.NoTimestamp, log: &tr.log}
	emit := func(r operator.Record) error {
		if r.Idle {
			tr.log = append(tr.log, "outidle")
		} else {
			tr.log = append(tr.log, fmt.Sprintf("out%d", r.Time))
		}
		return nil
	}
	tr.a.wm = &taskClock{channelClocks: newChannelClocks(live, operator.NoTimestamp), op: op, emit: emit}
	return tr
}

// deliverWM feeds channel ch as deliver does, with "w<t>" a watermark.
func (tr *alignTrace) deliverWM(t *testing.T, ch int, items ...string) {
	t.Helper()
	var rs []operator.Record
	for _, it := range items {
		var r operator.Record
		switch {
		case strings.HasPrefix(it, "|"):
			fmt.Sscan(it[1:], &r.Barrier)
		case strings.HasPrefix(it, "w"):
			r.Watermark = true
			fmt.Sscan(it[1:], &r.Time)
		default:
			r.Origin = int32(ch)
			fmt.Sscan(it, &r.Seq)
		}
		rs = append(rs, r)
	}
	if err := tr.a.feed(ch, rs); err != nil {
		t.Fatal(err)
	}
	if err := tr.a.drain(); err != nil {
		t.Fatal(err)
	}
}

// TestAlignmentDeliversWatermarksInOrder: a channel held back by an alignment delivers its
// watermarks when it is replayed, in order with its records; a channel that ends while held
// back counts as ended only after its held records.
func TestAlignmentDeliversWatermarksInOrder(t *testing.T) {
	tr := newWMTrace(2)
	tr.deliverWM(t, 0, "1", "w10")
	tr.deliverWM(t, 1, "w20", "1")
	tr.want(t, "p0:1", "adv10", "out10", "p1:1")
	tr.deliverWM(t, 0, "|1", "2", "w30") // held back
	tr.want(t)
	tr.deliverWM(t, 1, "w25") // channel 0 is held at 10 still
	tr.want(t)
	// Channel 0 ends while held: the end waits behind its held records.
	tr.live = 1
	if err := tr.a.ended(0); err != nil {
		t.Fatal(err)
	}
	if err := tr.a.drain(); err != nil {
		t.Fatal(err)
	}
	tr.want(t) // had the end counted now, channel 1 alone would raise the task to 25
	// The barrier of channel 1 completes the alignment: the held records replay (channel 0's
	// watermark 30 raises the task to 25), then its end counts.
	tr.deliverWM(t, 1, "|1")
	tr.want(t, "cp1", "p0:2", "adv25", "out25")
	tr.deliverWM(t, 1, "w40")
	tr.want(t, "adv40", "out40")
}
