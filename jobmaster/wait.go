package jobmaster

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jmcluster/jmcluster/internal/logsum"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// Why a job waits. A job whose restart or deployment cannot proceed says so in its view
// (Waiting: jmnode job status, the REST job view, the web UI) and counts in the metric of jobs
// waiting by reason (WaitingJobs), whose label is one of these kinds, never free text.
type WaitKind string

const (
	// WaitSlots: a deployment waits for free slots on usable TaskManagers (none registered,
	// too few slots, or usable TMs still confirming a new pool version).
	WaitSlots WaitKind = "slots"
	// WaitTaskManager: a region's restart waits for a silent TaskManager the isolation rule
	// does not let this leader redeploy from yet (docs/reconciliation.md).
	WaitTaskManager WaitKind = "taskmanager"
	// WaitRestartDelay: a region waits for its restart strategy's fixed delay.
	WaitRestartDelay WaitKind = "restart_delay"
	// WaitDeployFailed: a deployment's write-ahead commit failed; the next pass tries again.
	WaitDeployFailed WaitKind = "deploy_failed"
)

// WaitKinds lists every kind, in a fixed order (the metric reports each, zeros included).
var WaitKinds = []WaitKind{WaitSlots, WaitTaskManager, WaitRestartDelay, WaitDeployFailed}

// jobWait is why a job waits now, and since when it has waited for that kind of reason.
type jobWait struct {
	kind   WaitKind
	reason string
	since  time.Time
}

// summariseHolds writes the plan's held regions as one bounded text, grouped by the TM they
// wait for ("regions 1, 2, 3, 4, 5 and 95 more (100 in all) wait for TaskManager tm1: why"),
// and a key that changes only when the TMs or their region counts do (the reason's countdown
// does not re-log the line).
func summariseHolds(holds []action) (text, key string) {
	if len(holds) == 0 {
		return "", ""
	}
	var order []string
	regions := map[string][]int{}
	why := map[string]string{}
	for _, h := range holds {
		if _, ok := regions[h.heldTM]; !ok {
			order = append(order, h.heldTM)
			why[h.heldTM] = h.heldWhy
		}
		regions[h.heldTM] = append(regions[h.heldTM], h.region)
	}
	parts := make([]string, len(order))
	keys := make([]string, len(order))
	for i, tm := range order {
		r := regions[tm]
		verb := "waits"
		if len(r) > 1 {
			verb = "wait"
		}
		parts[i] = fmt.Sprintf("%s %s for TaskManager %s: %s", regionsName(r), verb, tm, why[tm])
		keys[i] = fmt.Sprintf("%s:%d", tm, len(r))
	}
	return logsum.Joined(parts, "; "), strings.Join(keys, ",")
}

// noteJobWait records why jobID waits after a pass of the scheduler (held: the summary of its
// held regions), for Waiting and WaitingJobs: a held restart, a deployment that waits (deploy.go,
// waits), an armed restart delay. A job that is not running or restarting waits for nothing.
func (t *term) noteJobWait(jobID string, status pb.JobStatus, held string) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if status != jobRunning && status != jobRestarting && status != jobCreated {
		delete(t.jobWaits, jobID)
		return
	}
	var kind WaitKind
	var parts []string
	add := func(k WaitKind, text string) {
		if kind == "" {
			kind = k
		}
		parts = append(parts, text)
	}
	if held != "" {
		add(WaitTaskManager, "restart waits: "+held)
	}
	if w, ok := t.waits[jobID]; ok {
		k := WaitDeployFailed
		if w.slots {
			k = WaitSlots
		}
		add(k, "deployment waits: "+strings.TrimPrefix(w.reason, "jobmaster: "))
	}
	if armed := t.restartAt[jobID]; len(armed) > 0 {
		ids := make([]int, 0, len(armed))
		var first time.Time
		for id, at := range armed {
			ids = append(ids, id)
			if first.IsZero() || at.Before(first) {
				first = at
			}
		}
		slices.Sort(ids)
		add(WaitRestartDelay, fmt.Sprintf("restart delay: %s restart in %v", regionsName(ids), max(first.Sub(now), 0).Round(time.Millisecond)))
	}
	if kind == "" {
		delete(t.jobWaits, jobID)
		return
	}
	w := t.jobWaits[jobID]
	if w.kind != kind {
		w.since = now
	}
	if kind == WaitSlots {
		if d, ok := t.waits[jobID]; ok && d.slots {
			w.since = d.since // the slot timeout counts from there
		}
	}
	w.kind, w.reason = kind, logsum.Text(strings.Join(parts, "; "))
	t.jobWaits[jobID] = w
}

// Waiting says why the job waits on this leader and since when ("" when it does not), for job
// views: a restart held by the isolation rule, a deployment waiting for slots or after a failed
// commit, a restart delay (several at once are joined, the first one's kind counts).
func (jm *JobMaster) Waiting(jobID string) (reason string, since time.Time) {
	t, err := jm.currentTerm()
	if err != nil {
		return "", time.Time{}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	w, ok := t.jobWaits[jobID]
	if !ok {
		return "", time.Time{}
	}
	return w.reason, w.since
}

// WaitingJobs counts the jobs that wait on this leader by kind (every kind, zeros included);
// nil on a node that does not lead.
func (jm *JobMaster) WaitingJobs() map[WaitKind]int {
	t, err := jm.currentTerm()
	if err != nil {
		return nil
	}
	out := make(map[WaitKind]int, len(WaitKinds))
	for _, k := range WaitKinds {
		out[k] = 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, w := range t.jobWaits {
		out[w.kind]++
	}
	return out
}
