package checker

import (
	"fmt"
	"sort"
	"time"
)

// RestartDetected checks that the leader takes a restarted TaskManager for a new process: when
// a TM process registers with an incarnation other than the one before it, every attempt the
// earlier process started and never logged stopped (it died with the process) must be terminal
// in the graph by the new registration plus bound. The leader fails them in the registration
// itself; bound (half a TM heartbeat interval) leaves room for nothing else: a leader that
// took the new process for the old one would learn of the lost attempts only from the new
// process's deployment reports, two heartbeats later. Attempts the graph ended before the
// registration (the leader proved the process dead first) pass; attempts of jobs the final
// read did not find are left to no-lost-submissions.
func RestartDetected(events []TaskEvent, final map[string]FinalRead, bound time.Duration) Result {
	r := newResult("restart-detected")
	type run struct {
		incarnation string
		live        map[string]TaskEvent // attempt -> its start, until a stop
	}
	current := map[string]*run{} // TM -> its process now
	type orphan struct {
		start      TaskEvent
		registered time.Time // the next process's first registration
	}
	var orphans []orphan
	var latest time.Duration // the latest an attempt ended after the registration, of those in time
	sorted := append([]TaskEvent(nil), events...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].TS.Before(sorted[j].TS) })
	for _, ev := range sorted {
		p := current[ev.TM]
		switch ev.Event {
		case "registered":
			if p != nil && p.incarnation != "" && ev.Incarnation != "" && ev.Incarnation != p.incarnation {
				for _, st := range p.live {
					orphans = append(orphans, orphan{start: st, registered: ev.TS})
				}
				r.Counts["restarts"]++
				p = nil
			}
			if p == nil {
				p = &run{incarnation: ev.Incarnation, live: map[string]TaskEvent{}}
				current[ev.TM] = p
			}
		case "start":
			if p == nil {
				p = &run{live: map[string]TaskEvent{}}
				current[ev.TM] = p
			}
			p.live[ev.AttemptID] = ev
		case "stop":
			if p != nil {
				delete(p.live, ev.AttemptID)
			}
		}
	}
	sort.Slice(orphans, func(i, j int) bool { return orphans[i].start.AttemptID < orphans[j].start.AttemptID })
	for _, o := range orphans {
		fr, ok := final[o.start.Job]
		if !ok || !fr.Found || fr.Err != "" {
			continue
		}
		r.Counts["checked"]++
		ended, done := fr.Ended[o.start.AttemptID]
		switch {
		case !done:
			if _, held := fr.Attempts[o.start.AttemptID]; !held {
				r.Counts["not-in-graph"]++
				continue
			}
			r.problem("%s %s/%d attempt %s of %s's dead process never ended in the graph (%s at the final read)",
				o.start.Job, o.start.Vertex, o.start.Subtask, o.start.AttemptID, o.start.TM, fr.Attempts[o.start.AttemptID])
		case ended.After(o.registered.Add(bound)):
			r.problem("%s %s/%d attempt %s of %s's dead process ended %s after the new process registered (bound %s): the leader took the new process for the old one",
				o.start.Job, o.start.Vertex, o.start.Subtask, o.start.AttemptID, o.start.TM, ended.Sub(o.registered).Round(time.Millisecond), bound)
		default:
			r.Counts["in-time"]++
			latest = max(latest, ended.Sub(o.registered))
		}
	}
	r.Summary = fmt.Sprintf("%d TM restarts, %d attempts of dead processes checked: %d ended in time (the latest %s after the registration, bound %s), %d not in the graph",
		r.Counts["restarts"], r.Counts["checked"], r.Counts["in-time"], latest.Round(time.Millisecond), bound, r.Counts["not-in-graph"])
	return *r
}
