package operator

import (
	"testing"

	"github.com/jmcluster/jmcluster/internal/failpoint"
)

// The planted bugs of the window's checkpoint (window-state-unchecked) and of a restored
// watermark (watermark-regress), each shown against the intact build: the same records, the
// same snapshot and restore, and what a checker of the output sees.

// windowAcrossRestore feeds a tumbling window of 10 ms: two records of window [0, 10), a
// snapshot, a restore from it, a third record of the window, the end of input; it returns
// the results after the restore.
func windowAcrossRestore(t *testing.T) string {
	t.Helper()
	h := newHarness(t, tumbling(10, 0, "v"), nil)
	h.process(ev("a", 1, 5), ev("a", 2, 7))
	h.advance(0)
	state := h.snapshot()
	r := newHarness(t, tumbling(10, 0, "v"), state)
	r.process(ev("a", 3, 1))
	r.finish()
	wantLines(t, "dead letters", r.reasons())
	return r.results()
}

// TestWindowStateUncheckedLosesOpenWindows: the intact window's snapshot holds its open
// windows, so the restored one counts all three records; with window-state-unchecked it
// counts only the record after the checkpoint: the result a table checker compares with the
// published totals is short by the records before it.
func TestWindowStateUncheckedLosesOpenWindows(t *testing.T) {
	wantLines(t, "intact build", windowAcrossRestore(t),
		`{"key":"a","start":0,"end":10,"count":3,"sum":13,"min":1,"max":7,"avg":4.333333333333333} @9`)

	failpoint.Set(t, failpoint.WindowStateUnchecked.Name())
	wantLines(t, "with window-state-unchecked", windowAcrossRestore(t),
		`{"key":"a","start":0,"end":10,"count":1,"sum":1,"min":1,"max":1,"avg":1} @9`)
	t.Log("caught: with window-state-unchecked the restored window [0, 10) has 1 of its 3 records")
}

// lateAcrossRestore: window [0, 10) fires at watermark 9; a record of it that comes later is
// late (a dead letter); a snapshot, a restore, and the same late record replayed before the
// restored task's first watermark; then the end of input. It returns the results and the
// dead letters after the restore.
func lateAcrossRestore(t *testing.T) (results, dead string) {
	t.Helper()
	h := newHarness(t, tumbling(10, 0, "v"), nil)
	h.process(ev("a", 1, 5), ev("a", 2, 7))
	h.advance(9)
	wantLines(t, "before the snapshot", h.results(), `{"key":"a","start":0,"end":10,"count":2,"sum":12,"min":5,"max":7,"avg":6} @9`)
	state := h.snapshot()
	h.process(ev("a", 4, 100))
	wantLines(t, "the late record before the restore", h.reasons(), `{"v":100}: late: window [0, 10) of a closed at watermark 9`)

	r := newHarness(t, tumbling(10, 0, "v"), state)
	r.process(ev("a", 4, 100)) // replayed: it came after the checkpoint
	r.advance(9)               // the inputs' first watermark after the restore (the sources' restored one)
	r.finish()
	return r.results(), r.reasons()
}

// TestWatermarkRegressFiresAWindowTwice: the intact window restores its watermark, so a late
// record replayed after the restore is dropped again; with watermark-regress the restored
// task has no watermark until its inputs send one, counts the late record in window [0, 10)
// again and fires it a second time: a second row of a window (with a count no one published).
func TestWatermarkRegressFiresAWindowTwice(t *testing.T) {
	res, dead := lateAcrossRestore(t)
	wantLines(t, "intact build: results after the restore", res)
	wantLines(t, "intact build: dead letters after the restore", dead, `{"v":100}: late: window [0, 10) of a closed at watermark 9`)

	failpoint.Set(t, failpoint.WatermarkRegress.Name())
	res, dead = lateAcrossRestore(t)
	wantLines(t, "with watermark-regress: results after the restore", res,
		`{"key":"a","start":0,"end":10,"count":1,"sum":100,"min":100,"max":100,"avg":100} @9`)
	wantLines(t, "with watermark-regress: dead letters after the restore", dead)
	t.Log("caught: with watermark-regress window [0, 10) fired a second time, from a late record the intact build drops")
}
