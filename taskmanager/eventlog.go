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
// registered with a leader (Leader, Epoch and Incarnation set; no task fields), "delivered"
// when the leader accepted an outbox message of an attempt (Seq and State set). A checker uses
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
	// DeployEpoch and FenceEpoch (start events): the epoch of the leader call that submitted
	// the task and the highest epoch this TM had seen when it accepted that call. Fencing
	// keeps DeployEpoch >= FenceEpoch.
	DeployEpoch uint64 `json:"deploy_epoch,omitempty"`
	FenceEpoch  uint64 `json:"fence_epoch,omitempty"`
	// Seq (delivered events): the outbox's sequence number of the accepted message.
	Seq uint64 `json:"seq,omitempty"`
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
	ev := Event{
		TS: time.Now().UTC(), TM: l.tm, Event: kind, Job: d.GetJobId(), Vertex: d.GetVertexId(),
		Subtask: d.GetSubtaskIndex(), AttemptID: d.GetAttemptId(), AttemptNumber: d.GetAttemptNumber(),
		Epoch: epoch, State: strings.TrimPrefix(state.String(), "EXECUTION_STATE_"),
	}
	if kind == "start" {
		ev.DeployEpoch, ev.FenceEpoch = t.deployEpoch, t.fenceEpoch
	}
	l.write(ev)
}

// delivered records that the leader accepted one outbox message: a state update (State set) or
// a consumers notification (State "CONSUMERS"), a checkpoint acknowledgement or decline
// ("CHECKPOINT_ACK", "CHECKPOINT_DECLINE"), with the sequence number the outbox gave it.
// One worker per attempt sends its queue in order, so an attempt's delivered sequence numbers
// only ever rise.
func (l *eventLog) delivered(m *outMsg) {
	if l.w == nil {
		return
	}
	ev := Event{TS: time.Now().UTC(), TM: l.tm, Event: "delivered", AttemptID: m.attempt, Seq: m.seq()}
	switch {
	case m.state != nil:
		ev.Job, ev.State = m.state.GetJobId(), strings.TrimPrefix(m.state.GetState().String(), "EXECUTION_STATE_")
	case m.ack != nil:
		ev.Job, ev.State = m.ack.GetJobId(), "CHECKPOINT_ACK"
	case m.decline != nil:
		ev.Job, ev.State = m.decline.GetJobId(), "CHECKPOINT_DECLINE"
	default:
		ev.Job, ev.State = m.consumers.GetJobId(), "CONSUMERS"
	}
	l.write(ev)
}

// registered records a registration with the leader at addr.
func (l *eventLog) registered(leader string, epoch uint64, incarnation string) {
	if l.w == nil {
		return
	}
	l.write(Event{TS: time.Now().UTC(), TM: l.tm, Event: "registered", Epoch: epoch, Leader: leader, Incarnation: incarnation})
}

// write appends one event as a line of JSON.
func (l *eventLog) write(ev Event) {
	b, err := json.Marshal(ev)
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.w.Write(append(b, '\n'))
}
