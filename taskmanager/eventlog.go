package taskmanager

import (
	"encoding/json"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// Event is one line of the task lifecycle log: "start" when a task begins running its
// operator, "stop" when it reached a terminal state, "registered" when this TM process
// registered with a leader (Leader, Epoch and Incarnation set; no task fields). A checker uses
// it to prove two attempts of one subtask never ran at once; a test measures from the
// registration how soon a restarted TM holds tasks again.
type Event struct {
	TS            time.Time `json:"ts"`
	TM            string    `json:"tm"`
	Event         string    `json:"event"`
	Job           string    `json:"job"`
	Vertex        string    `json:"vertex"`
	Subtask       int32     `json:"subtask"`
	AttemptID     string    `json:"attempt_id"`
	AttemptNumber int32     `json:"attempt_number"`
	Epoch         uint64    `json:"epoch"`
	State         string    `json:"state"`
	Leader        string    `json:"leader,omitempty"`
	Incarnation   string    `json:"incarnation,omitempty"`
}

type eventLog struct {
	mu sync.Mutex
	w  io.Writer
	tm string
}

func newEventLog(w io.Writer, tm string) *eventLog { return &eventLog{w: w, tm: tm} }

func (l *eventLog) log(kind string, t *task, epoch uint64, state pb.ExecutionState) {
	if l.w == nil {
		return
	}
	d := t.tdd
	b, err := json.Marshal(Event{
		TS: time.Now().UTC(), TM: l.tm, Event: kind, Job: d.GetJobId(), Vertex: d.GetVertexId(),
		Subtask: d.GetSubtaskIndex(), AttemptID: d.GetAttemptId(), AttemptNumber: d.GetAttemptNumber(),
		Epoch: epoch, State: strings.TrimPrefix(state.String(), "EXECUTION_STATE_"),
	})
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.w.Write(append(b, '\n'))
}

// registered records a registration with the leader at addr.
func (l *eventLog) registered(leader string, epoch uint64, incarnation string) {
	if l.w == nil {
		return
	}
	b, err := json.Marshal(Event{TS: time.Now().UTC(), TM: l.tm, Event: "registered", Epoch: epoch, Leader: leader, Incarnation: incarnation})
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.w.Write(append(b, '\n'))
}
