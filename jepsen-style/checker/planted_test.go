package checker

import (
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
