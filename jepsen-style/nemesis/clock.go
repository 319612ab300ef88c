package nemesis

import (
	"math/rand"
	"strings"
	"time"
)

// clock-step-tm: one TaskManager's wall clock is stepped by +ClockStep or -ClockStep (drawn
// from the fault's pick) for the fault's length, through the failpoint clock-offset, which a
// running TM reads from its failpoints file (the way slow-disk reaches a running JM). Every
// wall-clock read of the TM that leaves the process goes through that clock; its timeouts run
// on Go's monotonic clock. The rule: event time, timeouts and checkpoints unaffected.

// ClockStep is the size of a clock-step-tm step.
const ClockStep = 30 * time.Second

// ClockOffsetTerm is the failpoint term that steps a process's wall clock by d.
func ClockOffsetTerm(d time.Duration) string { return "clock-offset=" + d.String() }

// resolveClockStep picks the TM and the sign of the step from the fault's pick.
func resolveClockStep(rng *rand.Rand, tms []string) map[string]string {
	tm := tms[rng.Intn(len(tms))]
	d := ClockStep
	if rng.Intn(2) == 0 {
		d = -ClockStep
	}
	return map[string]string{tm: ClockOffsetTerm(d)}
}

// ClockOffsets returns the clock steps an action makes: node -> offset, read back from its
// failpoint terms.
func ClockOffsets(a Action) map[string]time.Duration {
	out := map[string]time.Duration{}
	for n, spec := range a.Failpoints {
		for _, t := range strings.Split(spec, ",") {
			v, ok := strings.CutPrefix(strings.TrimSpace(t), "clock-offset=")
			if !ok {
				continue
			}
			if d, err := time.ParseDuration(v); err == nil {
				out[n] = d
			}
		}
	}
	return out
}
