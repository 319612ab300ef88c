package checker

import (
	"strings"
	"testing"
	"time"
)

// TestStaleDeploys: a task whose submitting call carried an epoch below the one its TM had
// already seen was let through by a TM without fencing.
func TestStaleDeploys(t *testing.T) {
	end := at(100)
	ok := start("tm1", "map", 0, "a1", 0, 2, 1)
	ok.DeployEpoch, ok.FenceEpoch = 2, 2
	if r := NoConcurrentAttempts([]TaskEvent{ok}, nil, end); r.Verdict != Pass {
		t.Fatalf("a deploy at the TM's own epoch was flagged: %+v", r)
	}
	stale := start("tm1", "map", 1, "b1", 0, 2, 2)
	stale.DeployEpoch, stale.FenceEpoch = 1, 2
	r := NoConcurrentAttempts([]TaskEvent{ok, stale}, nil, end)
	if r.Verdict != Fail || r.Counts["stale-deploys"] != 1 || r.Counts["stale-epoch-starts"] != 1 {
		t.Fatalf("a deploy from a deposed leader was not caught: %+v", r)
	}
	// Events without the fields (an older event log) are judged as before.
	old := start("tm1", "map", 1, "c1", 0, 2, 3)
	if r := NoConcurrentAttempts([]TaskEvent{ok, old}, nil, end); r.Verdict != Pass {
		t.Fatalf("an event without deploy epochs was flagged: %+v", r)
	}
}

func stopped(tm, job, attempt, state string, sec float64) TaskEvent {
	return TaskEvent{TS: at(sec), TM: tm, Event: "stop", Job: job, Vertex: "sink", AttemptID: attempt, State: state}
}

func TestStoppedTasksEnded(t *testing.T) {
	read := FinalRead{Found: true, Status: "JOB_STATUS_RUNNING", At: at(60),
		Attempts: map[string]string{"a": "FINISHED", "b": "RUNNING", "c": "FAILED", "d": "RUNNING"}}
	final := map[string]FinalRead{"j": read, "gone": {Found: false}, "err": {Err: "deadline"}}
	events := []TaskEvent{
		stopped("tm1", "j", "a", "FINISHED", 10), // ended in the graph
		stopped("tm1", "j", "b", "FINISHED", 20), // the graph lost it
		stopped("tm2", "j", "c", "FINISHED", 20), // ended otherwise: counted, not a failure
		stopped("tm2", "j", "d", "CANCELED", 58), // too recent to judge
		stopped("tm2", "j", "e", "FINISHED", 10), // not in the graph
		stopped("tm3", "gone", "f", "FINISHED", 10),
		stopped("tm3", "err", "g", "FINISHED", 10),
		start("tm1", "sink", 0, "b", 0, 1, 5),
	}
	r := StoppedTasksEnded(events, final, 5*time.Second)
	if r.Verdict != Fail || r.Counts["still-live"] != 1 || len(r.Problems) != 1 {
		t.Fatalf("the lost terminal state was not caught exactly once: %+v", r)
	}
	if r.Counts["checked"] != 4 || r.Counts["ended"] != 2 || r.Counts["ended-otherwise"] != 1 || r.Counts["not-in-graph"] != 1 || r.Counts["too-recent"] != 1 {
		t.Fatalf("counts: %+v", r.Counts)
	}
	read.Attempts["b"] = "FINISHED"
	if r := StoppedTasksEnded(events, final, 5*time.Second); r.Verdict != Pass {
		t.Fatalf("a graph that ended every stopped attempt failed: %+v", r)
	}
}

func delivered(tm, attempt string, seq uint64, state string, sec float64) TaskEvent {
	return TaskEvent{TS: at(sec), TM: tm, Event: "delivered", Job: "j", AttemptID: attempt, Seq: seq, State: state}
}

func TestUpdatesInOrder(t *testing.T) {
	good := []TaskEvent{
		delivered("tm1", "a", 1, "RUNNING", 1), delivered("tm1", "a", 2, "CONSUMERS", 2), delivered("tm1", "a", 5, "FINISHED", 3),
		delivered("tm2", "a", 1, "RUNNING", 1), // another TM's sequence
	}
	if r := UpdatesInOrder(good, nil); r.Verdict != Pass || r.Counts["delivered"] != 4 {
		t.Fatalf("rising sequences failed: %+v", r)
	}
	dup := append(append([]TaskEvent(nil), good...), delivered("tm1", "a", 5, "FINISHED", 4))
	if r := UpdatesInOrder(dup, nil); r.Verdict != Fail || r.Counts["duplicates"] != 1 {
		t.Fatalf("a duplicate delivery was not caught: %+v", r)
	}
	late := append(append([]TaskEvent(nil), good...), delivered("tm1", "a", 2, "CONSUMERS", 4))
	if r := UpdatesInOrder(late, nil); r.Verdict != Fail || r.Counts["out-of-order"] != 1 {
		t.Fatalf("an older message delivered again was not caught: %+v", r)
	}
	reorder := []TaskEvent{delivered("tm1", "b", 3, "FINISHED", 1), delivered("tm1", "b", 2, "RUNNING", 2)}
	if r := UpdatesInOrder(reorder, nil); r.Verdict != Fail || r.Counts["out-of-order"] != 1 {
		t.Fatalf("an out-of-order delivery was not caught: %+v", r)
	}
	// A restarted TM numbers its messages afresh.
	life := map[string][]Window{"tm1": {{Start: at(0), End: at(10)}, {Start: at(11)}}}
	again := []TaskEvent{delivered("tm1", "c", 7, "RUNNING", 5), delivered("tm1", "c", 1, "RUNNING", 12)}
	if r := UpdatesInOrder(again, life); r.Verdict != Pass {
		t.Fatalf("sequences of two TM lifetimes were compared: %+v", r)
	}
}

// TestRestartDetected: a TM process registers with a new incarnation; the attempts its dead
// predecessor started and never stopped must be terminal in the graph within the bound of the
// registration. Ended in the registration or before (proven dead first) passes; ended two
// heartbeats later (the leader took the new process for the old) and never ended fail; a
// re-registration of the same process with a new leader is no restart.
func TestRestartDetected(t *testing.T) {
	reg := func(tm, inc string, sec float64) TaskEvent {
		return TaskEvent{TS: at(sec), TM: tm, Event: "registered", Incarnation: inc}
	}
	events := []TaskEvent{
		reg("tm1", "i1", 0), start("tm1", "v", 0, "a", 1, 1, 1), start("tm1", "v", 1, "b", 1, 1, 1), start("tm1", "v", 2, "c", 1, 1, 1),
		stop("tm1", "v", 2, "c", 2),
		reg("tm1", "i1", 5), // a new leader: the same process
		reg("tm1", "i2", 10),
	}
	final := func(aEnded, bEnded time.Time) map[string]FinalRead {
		fr := FinalRead{Found: true, At: at(30), Attempts: map[string]string{"a": "FAILED", "b": "FAILED", "c": "FINISHED"},
			Ended: map[string]time.Time{"c": at(2)}}
		for id, e := range map[string]time.Time{"a": aEnded, "b": bEnded} {
			if e.IsZero() {
				fr.Attempts[id] = "RUNNING"
			} else {
				fr.Ended[id] = e
			}
		}
		return map[string]FinalRead{"j": fr}
	}
	bound := 500 * time.Millisecond
	if r := RestartDetected(events, final(at(10), at(3)), bound); r.Verdict != Pass || r.Counts["checked"] != 2 || r.Counts["restarts"] != 1 {
		t.Fatalf("failed in the registration and proven dead before: %v %s %v", r.Verdict, r.Summary, r.Problems)
	}
	if r := RestartDetected(events, final(at(12), at(10)), bound); r.Verdict != Fail || !strings.Contains(r.Problems[0], "after the new process registered") {
		t.Fatalf("failed two heartbeats after the registration: %v %v", r.Verdict, r.Problems)
	}
	if r := RestartDetected(events, final(time.Time{}, at(10)), bound); r.Verdict != Fail || !strings.Contains(r.Problems[0], "never ended") {
		t.Fatalf("never failed: %v %v", r.Verdict, r.Problems)
	}
}
