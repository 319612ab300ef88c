package checker

import (
	"time"

	"github.com/jmcluster/jmcluster/jepsen-style/history"
)

var t0 = time.Unix(1_700_000_000, 0)

func at(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }

// call builds a completed operation from invoke to complete seconds.
func call(p int, f history.F, id string, from, to float64, typ history.Type, v *history.Value) history.Call {
	return history.Call{Process: p, F: f, JobID: id, Invoke: at(from).UnixNano(), Complete: at(to).UnixNano(), Type: typ, Value: v}
}

func found(status string) *history.Value { return &history.Value{Found: true, Status: status} }

var notFound = &history.Value{Found: false}

func start(tm, vertex string, sub int32, attempt string, num int32, epoch uint64, sec float64) TaskEvent {
	return TaskEvent{TS: at(sec), TM: tm, Event: "start", Job: "j", Vertex: vertex, Subtask: sub, AttemptID: attempt, AttemptNumber: num, Epoch: epoch}
}

func stop(tm, vertex string, sub int32, attempt string, sec float64) TaskEvent {
	return TaskEvent{TS: at(sec), TM: tm, Event: "stop", Job: "j", Vertex: vertex, Subtask: sub, AttemptID: attempt}
}
