package pipelinecheck

import (
	"reflect"
	"strings"
	"testing"
)

func TestWindowStart(t *testing.T) {
	for _, c := range []struct{ ts, size, want int64 }{
		{0, 2000, 0}, {1999, 2000, 0}, {2000, 2000, 2000}, {-1, 2000, -2000}, {1796515200123, 60000, 1796515200000},
	} {
		if got := WindowStart(c.ts, c.size); got != c.want {
			t.Errorf("WindowStart(%d, %d) = %d, want %d", c.ts, c.size, got, c.want)
		}
	}
}

func TestTotalsAndCompare(t *testing.T) {
	clicks := []Click{{User: "a", Amount: 3, TS: 10}, {User: "a", Amount: 4, TS: 1999}, {User: "b", Amount: 5, TS: 2000}, {User: "a", Amount: 1, TS: 2001}}
	want := map[WindowKey]Total{{"a", 0}: {2, 7}, {"b", 2000}: {1, 5}, {"a", 2000}: {1, 1}}
	got := Totals(clicks, 2000)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Totals = %v, want %v", got, want)
	}
	if c, a := Sums(got); c != 4 || a != 13 {
		t.Errorf("Sums = %d, %d; want 4, 13", c, a)
	}
	same := map[WindowKey][]Total{{"a", 0}: {{2, 7}}, {"b", 2000}: {{1, 5}}, {"a", 2000}: {{1, 1}}}
	if p := CompareTotals(want, same); len(p) != 0 {
		t.Errorf("equal totals: %v", p)
	}
	bad := map[WindowKey][]Total{{"a", 0}: {{2, 7}, {2, 7}}, {"b", 2000}: {{1, 6}}, {"c", 0}: {{1, 1}}}
	p := strings.Join(CompareTotals(want, bad), "\n")
	for _, w := range []string{"a 0 written 2 times", "b 2000: 1 clicks, amount 6; want 1, 5", "missing a 2000", "unexpected window c 0"} {
		if !strings.Contains(p, w) {
			t.Errorf("problems %q lack %q", p, w)
		}
	}
}

// TestStreamLineage: the rule of nats_source's splits, from the run kill-tm seed 1 (two
// subtasks): stream sequence 699 is subtask 0's record 349, 720 subtask 1's record 359.
func TestStreamLineage(t *testing.T) {
	for _, c := range []struct {
		seq  uint64
		p    int
		want Lineage
	}{{1, 2, Lineage{0, 0}}, {2, 2, Lineage{1, 0}}, {699, 2, Lineage{0, 349}}, {720, 2, Lineage{1, 359}}, {5, 1, Lineage{0, 4}}, {5, 0, Lineage{0, 4}}} {
		if got := StreamLineage(c.seq, c.p); got != c.want {
			t.Errorf("StreamLineage(%d, %d) = %+v, want %+v", c.seq, c.p, got, c.want)
		}
	}
}
