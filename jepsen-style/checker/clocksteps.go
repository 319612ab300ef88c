package checker

import "time"

// A stepped TaskManager clock (clock-step-tm) and committed-exactly-once.
//
// The check that a sink document was committed no earlier than its checkpoint completed
// compares two wall clocks of the one host: the leader's completion stamp and the TM's commit
// stamp. A TM whose clock the nemesis stepped (the failpoint clock-offset, on its wall clock
// only) stamps its documents with the step: 30 s ahead, which the check cannot mind, or 30 s
// behind, which reads as a commit 30 s before the completion. The harness knows every step it
// made: the TM, the offset and when it was set and cleared. A stamp earlier than the
// completion is excused only when taking the offset off makes it no earlier than the
// completion and puts it inside the window the TM ran with that offset; it is never used to
// accuse. Why not compare something else: the stamp is what catches a sink that commits at
// the barrier (commit-before-complete writes 6-13 ms early); reading the TM's clock from
// elsewhere would need the TM's word, and the leader's completion stamp is on the leader's
// clock. So outside a step, and on every other TM, the check is as strict as before.

// ClockStep is one TM's stepped wall clock: Offset in force from From to To (the harness's
// clock, that of every other process).
type ClockStep struct {
	TM       string
	Offset   time.Duration
	From, To time.Time
}

// clockStepSlack covers the TM taking the offset up and dropping it: it reads its failpoints
// file every 100 ms.
const clockStepSlack = 250 * time.Millisecond

// steppedAfter reports whether a stamp of tm earlier than endMs is explained by a step: with
// the step's offset taken off, the stamp is at or after endMs and inside the step's window.
func steppedAfter(steps []ClockStep, tm string, stampMs, endMs int64) bool {
	for _, s := range steps {
		if s.TM != tm {
			continue
		}
		at := stampMs - s.Offset.Milliseconds()
		if at >= endMs && at >= s.From.UnixMilli() && at <= s.To.Add(clockStepSlack).UnixMilli() {
			return true
		}
	}
	return false
}
