package jobmaster

import (
	"testing"
	"time"
)

// TestJudgeStarvation is the starvation decision's table: every rule a named case.
func TestJudgeStarvation(t *testing.T) {
	r := starveRuleFor(time.Second) // tick 10ms, window 1s, share 0.5, hand over after 3s, min term 5s
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	// free: a wake-up every tick, on time, over the window before now.
	free := func(now time.Duration) []tickSeen {
		var out []tickSeen
		for d := now - time.Second; d <= now; d += 10 * time.Millisecond {
			out = append(out, tickSeen{At: at(d)})
		}
		return out
	}
	// quota: one wake-up per 100 ms period, late by lateMs (a CPU quota of a few percent).
	quota := func(now time.Duration, lateMs int) []tickSeen {
		var out []tickSeen
		for d := now - time.Second + 100*time.Millisecond; d <= now; d += 100 * time.Millisecond {
			out = append(out, tickSeen{At: at(d), Late: time.Duration(lateMs) * time.Millisecond})
		}
		return out
	}
	// every: a wake-up every gap, each late by late, over the window before now.
	every := func(now, gap, late time.Duration) []tickSeen {
		var out []tickSeen
		for d := now - time.Second + gap; d <= now; d += gap {
			out = append(out, tickSeen{At: at(d), Late: late})
		}
		return out
	}
	cases := []struct {
		name     string
		in       starveInput
		starved  bool
		handOver bool
		since    time.Time
	}{
		{name: "a process that runs freely is not starved",
			in: starveInput{Ticks: free(20 * time.Second), Now: at(20 * time.Second)}},
		{name: "a quota of 5 percent (90 ms late every 100 ms) is starved; the stretch starts now",
			in: starveInput{Ticks: quota(20*time.Second, 90), Now: at(20 * time.Second)}, starved: true, since: at(20 * time.Second)},
		{name: "a quota of 10 percent (80 ms late every 100 ms) is starved",
			in: starveInput{Ticks: quota(20*time.Second, 80), Now: at(20 * time.Second)}, starved: true, since: at(20 * time.Second)},
		{name: "wake-ups 30 ms late every 100 ms (a loaded machine) are not starved",
			in: starveInput{Ticks: quota(20*time.Second, 30), Now: at(20 * time.Second)}},
		{name: "every wake-up 15 ms late (an oversubscribed host's jitter) counts for nothing",
			in: starveInput{Ticks: every(20*time.Second, 25*time.Millisecond, 15*time.Millisecond), Now: at(20 * time.Second)}},
		{name: "every wake-up 15 ms late counts for nothing inside a stretch either",
			in: starveInput{Ticks: every(20*time.Second, 25*time.Millisecond, 15*time.Millisecond), Now: at(20 * time.Second), Since: at(19 * time.Second)}},
		{name: "one GC-sized pause of 200 ms in the window is not starved",
			in: starveInput{Ticks: append(free(20*time.Second), tickSeen{At: at(20*time.Second + 200*time.Millisecond), Late: 190 * time.Millisecond}), Now: at(20*time.Second + 200*time.Millisecond)}},
		{name: "lateness before the window does not count",
			in: starveInput{Ticks: append([]tickSeen{{At: at(18 * time.Second), Late: 900 * time.Millisecond}}, free(20*time.Second)...), Now: at(20 * time.Second)}},
		{name: "a late wake-up counts only for the part inside the window",
			in: starveInput{Ticks: []tickSeen{{At: at(19*time.Second + 400*time.Millisecond), Late: 5 * time.Second}, {At: at(20 * time.Second)}}, Now: at(20 * time.Second)}},
		{name: "a meter that has not woken for most of the window is starved (the wait so far counts)",
			in: starveInput{Ticks: []tickSeen{{At: at(19*time.Second + 300*time.Millisecond)}}, Now: at(20 * time.Second)}, starved: true, since: at(20 * time.Second)},
		{name: "a term younger than the window is not judged",
			in: starveInput{Ticks: quota(20*time.Second, 90), Now: at(20 * time.Second), TermStart: at(19*time.Second + 500*time.Millisecond)}},
		{name: "starved for less than the hand-over bound: no hand-over yet, the stretch keeps its start",
			in: starveInput{Ticks: quota(20*time.Second, 90), Now: at(20 * time.Second), Since: at(18 * time.Second)}, starved: true, since: at(18 * time.Second)},
		{name: "starved for the hand-over bound in an old enough term: hand over",
			in: starveInput{Ticks: quota(20*time.Second, 90), Now: at(20 * time.Second), Since: at(17 * time.Second)}, starved: true, handOver: true, since: at(17 * time.Second)},
		{name: "a term younger than MinTerm does not hand over",
			in: starveInput{Ticks: quota(20*time.Second, 90), Now: at(20 * time.Second), TermStart: at(16 * time.Second), Since: at(17 * time.Second)}, starved: true, since: at(17 * time.Second)},
		{name: "an attempt made less than the bound ago is not repeated",
			in: starveInput{Ticks: quota(20*time.Second, 90), Now: at(20 * time.Second), Since: at(10 * time.Second), LastTry: at(18 * time.Second)}, starved: true, since: at(10 * time.Second)},
		{name: "an attempt made the bound ago is repeated while still starved",
			in: starveInput{Ticks: quota(20*time.Second, 90), Now: at(20 * time.Second), Since: at(10 * time.Second), LastTry: at(17 * time.Second)}, starved: true, handOver: true, since: at(10 * time.Second)},
		{name: "inside a stretch, lateness of 30 percent (above the exit share) keeps it starved",
			in: starveInput{Ticks: quota(20*time.Second, 30), Now: at(20 * time.Second), Since: at(19 * time.Second)}, starved: true, since: at(19 * time.Second)},
		{name: "inside a stretch, lateness of 20 percent (below the exit share) ends it",
			in: starveInput{Ticks: quota(20*time.Second, 20), Now: at(20 * time.Second), Since: at(19 * time.Second)}},
		{name: "no longer starved: the stretch ends, whatever it was",
			in: starveInput{Ticks: free(20 * time.Second), Now: at(20 * time.Second), Since: at(10 * time.Second), LastTry: at(17 * time.Second)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.in.TermStart.IsZero() {
				c.in.TermStart = t0
			}
			v := judgeStarvation(c.in, r)
			if v.Starved != c.starved || v.HandOver != c.handOver || !v.Since.Equal(c.since) {
				t.Fatalf("got starved=%v handOver=%v since=%v share=%.2f, want starved=%v handOver=%v since=%v",
					v.Starved, v.HandOver, v.Since, v.Share, c.starved, c.handOver, c.since)
			}
		})
	}
}

// TestStarvationMeterPrunesToTheWindow: the meter keeps only the window's wake-ups, and always
// the latest one.
func TestStarvationMeterPrunesToTheWindow(t *testing.T) {
	m := &starveMeter{rule: starveRuleFor(time.Second)}
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	for i := 0; i < 500; i++ {
		m.ticks = append(m.ticks, tickSeen{At: t0.Add(time.Duration(i) * 10 * time.Millisecond)})
	}
	now := t0.Add(4990 * time.Millisecond)
	m.prune(now)
	if len(m.ticks) != 100 || !m.ticks[len(m.ticks)-1].At.Equal(now) {
		t.Fatalf("kept %d ticks (last %v), want the 100 of the last second ending at %v", len(m.ticks), m.ticks[len(m.ticks)-1].At, now)
	}
	m.ticks = []tickSeen{{At: t0}}
	m.prune(t0.Add(time.Hour))
	if len(m.ticks) != 1 {
		t.Fatalf("the latest wake-up was dropped: %v", m.ticks)
	}
}

// TestStarvationRuleHasFloors: a fast heartbeat (the tests' 200 ms) does not make the meter
// finer: its bounds stay those of a second.
func TestStarvationRuleHasFloors(t *testing.T) {
	fast, suite := starveRuleFor(200*time.Millisecond), starveRuleFor(time.Second)
	if fast != suite {
		t.Fatalf("rule for 200ms %+v, for 1s %+v: want the same", fast, suite)
	}
	if slow := starveRuleFor(2 * time.Second); slow.Window != 2*time.Second || slow.HandOverAfter != 6*time.Second || slow.MinTerm != 10*time.Second {
		t.Fatalf("rule for 2s: %+v", slow)
	}
}
