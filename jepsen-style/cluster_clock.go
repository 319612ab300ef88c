package jepsen

import (
	"sort"

	"github.com/jmcluster/jmcluster/jepsen-style/checker"
	"github.com/jmcluster/jmcluster/jepsen-style/nemesis"
)

// clockSteps lists the TM clocks the run's faults stepped (clock-step-tm: the failpoint
// clock-offset written into the TM's failpoints file at the fault's start, removed at its
// heal), with when each was in force, for committed-exactly-once (checker/clocksteps.go).
func (r *run) clockSteps() []checker.ClockStep {
	var out []checker.ClockStep
	for _, a := range r.actions {
		offsets := nemesis.ClockOffsets(a)
		if len(offsets) == 0 {
			continue
		}
		for _, f := range r.rep.Faults {
			if f.Index != a.Fault.Index {
				continue
			}
			end := f.End
			if end.IsZero() { // not healed before the run ended: heal-all cleared it
				end = r.rep.HealAt
			}
			for tm, d := range offsets {
				out = append(out, checker.ClockStep{TM: tm, Offset: d, From: f.Start, To: end})
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].From.Before(out[j].From) })
	return out
}
