package checker

import (
	"fmt"
	"sort"
	"time"
)

// Interval is the time an attempt ran on one TM.
type Interval struct {
	TM        string
	Job       string
	Vertex    string
	Subtask   int32
	AttemptID string
	Epoch     uint64
	Start     time.Time
	End       time.Time
	Closed    string // "stop", "exit" (the TM process ended) or "end" (the run ended)
}

// Intervals turns start and stop events into running intervals. An attempt without a stop
// ends when its TM process ended (lifetimes per TM) or, failing that, at runEnd.
func Intervals(events []TaskEvent, lifetimes map[string][]Window, runEnd time.Time) []Interval {
	type key struct{ tm, attempt string }
	sorted := append([]TaskEvent(nil), events...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].TS.Before(sorted[j].TS) })
	open := map[key]*Interval{}
	var out []*Interval
	for _, ev := range sorted {
		k := key{ev.TM, ev.AttemptID}
		switch ev.Event {
		case "start":
			if prev, ok := open[k]; ok && prev.Closed == "" {
				continue // a repeated start of a running attempt
			}
			iv := &Interval{TM: ev.TM, Job: ev.Job, Vertex: ev.Vertex, Subtask: ev.Subtask,
				AttemptID: ev.AttemptID, Epoch: ev.Epoch, Start: ev.TS}
			open[k] = iv
			out = append(out, iv)
		case "stop":
			if iv, ok := open[k]; ok && iv.Closed == "" {
				iv.End, iv.Closed = ev.TS, "stop"
			}
		}
	}
	res := make([]Interval, 0, len(out))
	for _, iv := range out {
		if iv.Closed == "" {
			if w, ok := windowOf(lifetimes[iv.TM], iv.Start); ok && !w.End.IsZero() {
				iv.End, iv.Closed = w.End, "exit"
			} else {
				iv.End, iv.Closed = runEnd, "end"
			}
		}
		res = append(res, *iv)
	}
	return res
}

// NoConcurrentAttempts checks that no two attempts of one (job, vertex, subtask) ran at the
// same time, and that no TM process started a task for a leader epoch lower than one it had
// already started a task for (a fencing failure). All timestamps come from one machine.
func NoConcurrentAttempts(events []TaskEvent, lifetimes map[string][]Window, runEnd time.Time) Result {
	r := newResult("no-concurrent-attempts")
	ivs := Intervals(events, lifetimes, runEnd)
	r.Counts["attempts"] = len(ivs)
	byVertex := map[string][]Interval{}
	for _, iv := range ivs {
		k := fmt.Sprintf("%s/%s/%d", iv.Job, iv.Vertex, iv.Subtask)
		byVertex[k] = append(byVertex[k], iv)
	}
	r.Counts["execution-vertices"] = len(byVertex)
	for _, k := range sortedStrings(byVertex) {
		list := byVertex[k]
		sort.Slice(list, func(i, j int) bool { return list[i].Start.Before(list[j].Start) })
		for i := range list {
			for j := i + 1; j < len(list); j++ {
				a, b := list[i], list[j]
				if a.AttemptID == b.AttemptID && a.TM == b.TM {
					continue
				}
				if b.Start.Before(a.End) && a.Start.Before(b.End) {
					r.Counts["overlaps"]++
					r.problem("%s: attempt %s on %s (epoch %d) [%s, %s %s] overlaps attempt %s on %s (epoch %d) from %s",
						k, short(a.AttemptID), a.TM, a.Epoch, clock(a.Start), clock(a.End), a.Closed,
						short(b.AttemptID), b.TM, b.Epoch, clock(b.Start))
				}
			}
		}
	}
	staleEpochStarts(events, lifetimes, r)
	r.Summary = fmt.Sprintf("%d attempts of %d execution vertices, %d overlaps, %d stale-epoch starts",
		r.Counts["attempts"], r.Counts["execution-vertices"], r.Counts["overlaps"], r.Counts["stale-epoch-starts"])
	return *r
}

// staleEpochStarts flags a start whose epoch is below the highest epoch of an earlier start in
// the same TM process lifetime, and a task a TM accepted from a deposed leader: its submitting
// call's epoch (DeployEpoch) below the highest epoch the TM had seen when it accepted the call
// (FenceEpoch). The TM adopts a new leader's epoch on the leader's first call (RequestReport,
// before it registers with that leader), so after that only a call that passed fencing with a
// stale epoch shows the difference. (A start later than a registration with a higher epoch is
// not by itself stale: the call may have been accepted before the new leader's first call.)
func staleEpochStarts(events []TaskEvent, lifetimes map[string][]Window, r *Result) {
	byTM := map[string][]TaskEvent{}
	for _, ev := range events {
		if ev.Event != "start" {
			continue
		}
		if ev.DeployEpoch > 0 && ev.DeployEpoch < ev.FenceEpoch {
			r.Counts["stale-epoch-starts"]++
			r.Counts["stale-deploys"]++
			r.problem("%s accepted attempt %s of %s/%d from a deposed leader: deployed with epoch %d, the TM had seen epoch %d",
				ev.TM, short(ev.AttemptID), ev.Vertex, ev.Subtask, ev.DeployEpoch, ev.FenceEpoch)
		}
		if ev.Epoch > 0 {
			byTM[ev.TM] = append(byTM[ev.TM], ev)
		}
	}
	for _, tm := range sortedStrings(byTM) {
		list := byTM[tm]
		sort.SliceStable(list, func(i, j int) bool { return list[i].TS.Before(list[j].TS) })
		var max uint64
		var life Window
		for _, ev := range list {
			if w, ok := windowOf(lifetimes[tm], ev.TS); ok && !w.Start.Equal(life.Start) {
				life, max = w, 0
			}
			if ev.Epoch < max {
				r.Counts["stale-epoch-starts"]++
				r.problem("%s started attempt %s of %s/%d with epoch %d after epoch %d", tm, short(ev.AttemptID), ev.Vertex, ev.Subtask, ev.Epoch, max)
			}
			if ev.Epoch > max {
				max = ev.Epoch
			}
		}
	}
}

func clock(t time.Time) string { return t.Format("15:04:05.000") }
