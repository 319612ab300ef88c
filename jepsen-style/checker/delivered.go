package checker

import (
	"fmt"
	"sort"
)

// UpdatesInOrder checks the TaskManagers' outbox: every message a TM sends the leader for an
// attempt (its state updates and consumer notifications) gets a sequence number when it is
// queued, and one sender per attempt delivers them in that order, each until the leader
// accepts it. So within one TM process the sequence numbers the leader accepted for an attempt
// ("delivered" events) strictly rise: one accepted twice is a duplicate delivery, one below an
// accepted one arrived out of order (the leader may have applied an older state over a newer
// one). A retry whose earlier send was applied but unanswered is accepted only once from the
// TM's side, so it is not counted.
func UpdatesInOrder(events []TaskEvent, lifetimes map[string][]Window) Result {
	r := newResult("updates-in-order")
	type key struct {
		tm, attempt string
		life        Window
	}
	byKey := map[key][]TaskEvent{}
	for _, ev := range events {
		if ev.Event != "delivered" {
			continue
		}
		w, _ := windowOf(lifetimes[ev.TM], ev.TS)
		k := key{ev.TM, ev.AttemptID, w}
		byKey[k] = append(byKey[k], ev)
		r.Counts["delivered"]++
	}
	keys := make([]key, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].tm != keys[j].tm {
			return keys[i].tm < keys[j].tm
		}
		if keys[i].attempt != keys[j].attempt {
			return keys[i].attempt < keys[j].attempt
		}
		return keys[i].life.Start.Before(keys[j].life.Start)
	})
	r.Counts["attempts"] = len(keys)
	for _, k := range keys {
		list := byKey[k]
		sort.SliceStable(list, func(i, j int) bool { return list[i].TS.Before(list[j].TS) })
		var last TaskEvent
		for i, ev := range list {
			if i > 0 {
				switch {
				case ev.Seq == last.Seq:
					r.Counts["duplicates"]++
					r.problem("%s: attempt %s of job %s: message %d (%s) delivered twice, at %s and %s",
						k.tm, short(k.attempt), short(ev.Job), ev.Seq, ev.State, clock(last.TS), clock(ev.TS))
				case ev.Seq < last.Seq:
					r.Counts["out-of-order"]++
					r.problem("%s: attempt %s of job %s: message %d (%s) delivered at %s after message %d (%s)",
						k.tm, short(k.attempt), short(ev.Job), ev.Seq, ev.State, clock(ev.TS), last.Seq, last.State)
				}
			}
			if i == 0 || ev.Seq > last.Seq {
				last = ev
			}
		}
	}
	r.Summary = fmt.Sprintf("%d messages of %d attempts delivered, %d duplicates, %d out of order",
		r.Counts["delivered"], r.Counts["attempts"], r.Counts["duplicates"], r.Counts["out-of-order"])
	return *r
}
