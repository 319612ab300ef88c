package checker

import (
	"fmt"
	"sort"
	"time"
)

// starved-leader-hands-over: a leader starved of CPU (throttle-leader) that stays starved hands
// leadership over (jobmaster/DESIGN.md, "A starved leader"). A leader's starvation meter logs
// when a starved stretch begins and how it ends (no longer starved, hand-over, term over); the
// harness reads those lines from every JM's log. Every stretch must end, or hand leadership
// over, within the bound: the meter hands over after three heartbeat intervals starved (in a
// term at least five old), so a stretch that lasts longer without a hand-over is a leader that
// kept leading while it could not keep up. The other half of the rule, no TaskManager fenced
// or declared lost because the leader was slow, is the restarts checker's (zero restarts when
// only JMs were touched).

// StarveMark is one line of a leader's starvation meter.
type StarveMark struct {
	Node string
	Time time.Time
	// Kind: "starved" (a stretch begins), "recovered", "term-ended" (it ends) or "hand-over"
	// (the leader starts handing leadership over).
	Kind string
}

// The kinds of StarveMark.
const (
	StarveBegins    = "starved"
	StarveRecovered = "recovered"
	StarveTermEnded = "term-ended"
	StarveHandOver  = "hand-over"
)

// HandOverBound is how long a leader may stay starved without handing leadership over: the
// meter's three heartbeat intervals (jobmaster starveRuleFor), one more for a young term, one
// for the scheduling of the hand-over itself under the quota.
const HandOverBound = 5 * time.Second

// StarvedLeaderHandsOver checks every starved stretch: it ended or handed leadership over
// within bound of its start. runEnd closes a stretch the log leaves open.
func StarvedLeaderHandsOver(marks []StarveMark, runEnd time.Time, bound time.Duration) Result {
	r := newResult("starved-leader-hands-over")
	byNode := map[string][]StarveMark{}
	for _, m := range marks {
		byNode[m.Node] = append(byNode[m.Node], m)
	}
	var longest time.Duration
	for _, node := range sortedStrings(byNode) {
		list := byNode[node]
		sort.SliceStable(list, func(i, j int) bool { return list[i].Time.Before(list[j].Time) })
		var begin time.Time
		handed := false
		closeStretch := func(end time.Time, how string) {
			if begin.IsZero() {
				return
			}
			d := end.Sub(begin)
			longest = max(longest, d)
			r.Counts["stretches"]++
			switch {
			case handed:
				r.Counts["handed-over"]++
			case d > bound:
				r.problem("%s was starved from %s for %s (%s) and did not hand leadership over (bound %s)", node, clock(begin), d.Round(time.Millisecond), how, bound)
			default:
				r.Counts["ended-in-time"]++
			}
			begin, handed = time.Time{}, false
		}
		for _, m := range list {
			switch m.Kind {
			case StarveBegins:
				closeStretch(m.Time, "a new stretch began")
				begin = m.Time
			case StarveHandOver:
				if !begin.IsZero() && !handed && m.Time.Sub(begin) <= bound {
					handed = true
				}
			case StarveRecovered:
				closeStretch(m.Time, "then recovered")
			case StarveTermEnded:
				closeStretch(m.Time, "then its term ended")
			}
		}
		closeStretch(runEnd, "to the end of the run")
	}
	if r.Counts["stretches"] == 0 {
		return r.skip("no leader was starved")
	}
	r.Summary = fmt.Sprintf("%d starved stretches: %d handed leadership over, %d ended within %s by themselves (the longest %s)",
		r.Counts["stretches"], r.Counts["handed-over"], r.Counts["ended-in-time"], bound, longest.Round(time.Millisecond))
	return *r
}
