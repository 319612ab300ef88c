package taskmanager

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/operator"
)

// alignTrace runs an aligner over a script of channel deliveries and records what the task
// did, in order: "p<ch>:<seq>" for a processed record, "cp<id>" for a snapshot, "decline<id>".
type alignTrace struct {
	a    *aligner
	live int
	log  []string
	took []time.Duration // what reached was told, per checkpoint
}

func newAlignTrace(live int) *alignTrace {
	tr := &alignTrace{live: live}
	tr.a = &aligner{
		live: func() int { return tr.live },
		process: func(r operator.Record) error {
			tr.log = append(tr.log, fmt.Sprintf("p%d:%d", r.Origin, r.Seq))
			return nil
		},
		reached: func(id uint64, took time.Duration) error {
			tr.log = append(tr.log, fmt.Sprintf("cp%d", id))
			tr.took = append(tr.took, took)
			return nil
		},
		declined: func(id uint64, cause string) { tr.log = append(tr.log, fmt.Sprintf("decline%d", id)) },
	}
	return tr
}

// deliver feeds channel ch: "5" is a record of seq 5 (origin ch), "|3" the barrier of 3.
func (tr *alignTrace) deliver(t *testing.T, ch int, items ...string) {
	t.Helper()
	var rs []operator.Record
	for _, it := range items {
		var r operator.Record
		if strings.HasPrefix(it, "|") {
			fmt.Sscan(it[1:], &r.Barrier)
		} else {
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

func (tr *alignTrace) want(t *testing.T, want ...string) {
	t.Helper()
	if !slices.Equal(tr.log, want) {
		t.Fatalf("the task did\n  %v\nwant\n  %v", tr.log, want)
	}
	tr.log = nil
}

// TestAlignerHoldsBackAChannelUntilEveryBarrier: records behind a channel's barrier wait until
// every channel delivered it; the snapshot comes between the two sides; the held records
// follow it, in order.
func TestAlignerHoldsBackAChannelUntilEveryBarrier(t *testing.T) {
	tr := newAlignTrace(3)
	tr.deliver(t, 0, "1", "|1", "2", "3")
	tr.want(t, "p0:1")
	tr.deliver(t, 1, "1", "2")
	tr.want(t, "p1:1", "p1:2")
	tr.deliver(t, 1, "|1", "3")
	tr.deliver(t, 0, "4")
	tr.want(t)
	tr.deliver(t, 2, "1", "|1", "2")
	// The channel that completed the alignment goes on first; then the held ones, in order.
	tr.want(t, "p2:1", "cp1", "p2:2", "p0:2", "p0:3", "p0:4", "p1:3")
	// The next checkpoint aligns the same way, and a barrier of a done one is ignored.
	tr.deliver(t, 2, "|1", "|2", "5")
	tr.deliver(t, 0, "|2")
	tr.deliver(t, 1, "|2")
	tr.want(t, "cp2", "p2:5")
}

// TestAlignerTimesTheAlignment: reached (and the acknowledgement with it) is told how long the
// alignment took, from the first barrier to the last, on the aligner's clock; a task with one
// channel aligns at once.
func TestAlignerTimesTheAlignment(t *testing.T) {
	tr := newAlignTrace(2)
	now := time.Unix(1000, 0)
	tr.a.now = func() time.Time { return now }
	var observed []time.Duration
	tr.a.aligned = func(d time.Duration) { observed = append(observed, d) }
	tr.deliver(t, 0, "|1")
	now = now.Add(7 * time.Millisecond)
	tr.deliver(t, 1, "|1")
	tr.want(t, "cp1")
	tr.live = 1
	tr.deliver(t, 0, "|2")
	tr.want(t, "cp2")
	if want := []time.Duration{7 * time.Millisecond, 0}; !slices.Equal(tr.took, want) || !slices.Equal(observed, want) {
		t.Fatalf("alignments told to reached %v and to the metric %v, want %v", tr.took, observed, want)
	}
}

// TestAlignerEndedChannelNeedsNoBarrier: a channel that ends while the others align counts as
// aligned; one that ends while held back keeps its held records.
func TestAlignerEndedChannelNeedsNoBarrier(t *testing.T) {
	tr := newAlignTrace(2)
	tr.deliver(t, 0, "|1", "7")
	tr.live = 1 // channel 1 ends without a barrier
	if err := tr.a.ended(1); err != nil {
		t.Fatal(err)
	}
	if err := tr.a.drain(); err != nil {
		t.Fatal(err)
	}
	tr.want(t, "cp1", "p0:7")
}

// TestAlignerNewerBarrierOvertakes: a newer checkpoint's barrier gives up the one being
// aligned (declined) and aligns the newer one.
func TestAlignerNewerBarrierOvertakes(t *testing.T) {
	tr := newAlignTrace(2)
	tr.deliver(t, 0, "|1", "1")
	tr.deliver(t, 1, "|2", "1")
	tr.want(t, "decline1", "p0:1")
	tr.deliver(t, 0, "|2")
	tr.want(t, "cp2", "p1:1")
}

// TestAlignerDeclinesPastItsLimit: holding back more than the limit declines the checkpoint
// and lets the channel flow, in order.
func TestAlignerDeclinesPastItsLimit(t *testing.T) {
	tr := newAlignTrace(2)
	tr.a.maxHeld = 3
	tr.deliver(t, 0, "|1", "1", "2")
	tr.deliver(t, 0, "3", "4")
	tr.want(t, "decline1", "p0:1", "p0:2", "p0:3", "p0:4")
	tr.deliver(t, 1, "|1", "1") // the late barrier of the declined checkpoint
	tr.want(t, "p1:1")
}

// TestAlignerTellsEachAlignmentsDuration: each completed alignment is observed once, spanning
// at least the time between its first barrier and its last; a declined one is not observed.
func TestAlignerTellsEachAlignmentsDuration(t *testing.T) {
	tr := newAlignTrace(2)
	var took []time.Duration
	tr.a.aligned = func(d time.Duration) { took = append(took, d) }
	tr.deliver(t, 0, "|1", "1")
	afterFirst := time.Now()
	tr.want(t)
	if len(took) != 0 {
		t.Fatalf("observed %v before the alignment completed", took)
	}
	beforeLast := time.Now()
	tr.deliver(t, 1, "|1")
	tr.want(t, "cp1", "p0:1")
	if len(took) != 1 || took[0] < beforeLast.Sub(afterFirst) {
		t.Fatalf("observed %v, want one alignment of at least %s", took, beforeLast.Sub(afterFirst))
	}
	tr.deliver(t, 0, "|2")
	tr.deliver(t, 1, "|3") // overtakes 2: declined, not observed
	tr.deliver(t, 0, "|3")
	tr.want(t, "decline2", "cp3")
	if len(took) != 2 {
		t.Fatalf("observed %d alignments, want 2 (1 and 3; 2 was declined)", len(took))
	}
}
