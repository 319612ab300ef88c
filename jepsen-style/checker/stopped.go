package checker

import (
	"fmt"
	"sort"
	"time"
)

// StoppedSettle is how long before a final read a TM's stop event must lie for the read to
// have to show the attempt ended: the TM's outbox delivers the terminal state within
// milliseconds once a leader serves it, so a few seconds covers a pause hook and a retry.
const StoppedSettle = 5 * time.Second

// terminalStates are the execution states an attempt never leaves.
var terminalStates = map[string]bool{"FINISHED": true, "CANCELED": true, "FAILED": true}

// StoppedTasksEnded checks that the graph does not keep alive what the TaskManagers stopped:
// for every attempt a TM logged stopped (FINISHED, CANCELED or FAILED) at least settle before
// the final consistent read of its job, the graph must hold the attempt in a terminal state
// (or not at all: an attempt the graph never owned, or whose history it dropped). An attempt
// the graph still calls DEPLOYING, RUNNING or RECONCILING although its task ended long ago
// is a lost update: the TM delivered the terminal state and the leader lost it (overwrote it,
// or the message was never sent), so the job never finishes. Reads that failed, and jobs the
// final read did not find, are left to no-lost-submissions.
func StoppedTasksEnded(events []TaskEvent, final map[string]FinalRead, settle time.Duration) Result {
	r := newResult("stopped-tasks-ended")
	last := map[string]TaskEvent{} // attempt -> its last stop event
	for _, ev := range events {
		if ev.Event != "stop" || !terminalStates[ev.State] {
			continue
		}
		if prev, ok := last[ev.AttemptID]; !ok || ev.TS.After(prev.TS) {
			last[ev.AttemptID] = ev
		}
	}
	ids := make([]string, 0, len(last))
	for id := range last {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		ev := last[id]
		fr, ok := final[ev.Job]
		if !ok || !fr.Found || fr.Err != "" || fr.At.IsZero() {
			continue
		}
		if ev.TS.After(fr.At.Add(-settle)) {
			r.Counts["too-recent"]++
			continue
		}
		r.Counts["checked"]++
		state, held := fr.Attempts[id]
		switch {
		case !held:
			r.Counts["not-in-graph"]++
		case terminalStates[state]:
			r.Counts["ended"]++
			if state != ev.State {
				r.Counts["ended-otherwise"]++
			}
		default:
			r.Counts["still-live"]++
			r.problem("job %s: attempt %s of %s/%d stopped %s on %s at %s, the graph still holds it %s at %s",
				ev.Job, short(id), ev.Vertex, ev.Subtask, ev.State, ev.TM, clock(ev.TS), state, clock(fr.At))
		}
	}
	r.Summary = fmt.Sprintf("%d stopped attempts checked: %d ended in the graph (%d in another terminal state), %d not in it, %d still live",
		r.Counts["checked"], r.Counts["ended"], r.Counts["ended-otherwise"], r.Counts["not-in-graph"], r.Counts["still-live"])
	return *r
}
