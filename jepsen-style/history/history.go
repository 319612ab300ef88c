// Package history records the client operations of a run as JSON lines, in the manner of
// Jepsen: every operation is an invoke followed by exactly one completion (ok, fail or info)
// from the same process.
package history

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
)

// Type is the kind of a history entry.
type Type string

// The entry types. Info marks an indeterminate outcome: the operation may or may not have
// taken effect (UNAVAILABLE, deadline exceeded, connection lost).
const (
	Invoke Type = "invoke"
	OK     Type = "ok"
	Fail   Type = "fail"
	Info   Type = "info"
)

// F is the operation's function.
type F string

// The operations clients perform.
const (
	Submit F = "submit"
	Cancel F = "cancel"
	Read   F = "read"
)

// Value is what a completed operation observed.
type Value struct {
	// Found: a read saw the job (false: NOT_FOUND).
	Found bool `json:"found,omitempty"`
	// Status is the job status a read or a cancel returned (JobStatus name).
	Status string `json:"status,omitempty"`
	// Code is the gRPC code of a failed or indeterminate operation, Reason its ErrorInfo reason.
	Code   string `json:"code,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// Op is one history entry.
type Op struct {
	Process int    `json:"process"`
	Type    Type   `json:"type"`
	F       F      `json:"f"`
	JobID   string `json:"job_id"`
	Value   *Value `json:"value,omitempty"`
	Time    int64  `json:"time"` // unix nanoseconds, from this machine's clock
	Error   string `json:"error,omitempty"`
}

// ErrUnpaired is returned by Pair for a completion without an invoke or an invoke left open.
var ErrUnpaired = errors.New("history: unpaired operation")

// Recorder appends entries to a JSON-lines writer and keeps them in memory. Safe for
// concurrent use.
type Recorder struct {
	mu   sync.Mutex
	w    io.Writer
	ops  []Op
	err  error
	open map[int]bool // processes with an invoke not yet completed
}

// NewRecorder returns a recorder writing to w (nil: memory only).
func NewRecorder(w io.Writer) *Recorder { return &Recorder{w: w} }

// Add records one entry.
func (r *Recorder) Add(op Op) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, op)
	if r.open == nil {
		r.open = map[int]bool{}
	}
	if op.Type == Invoke {
		r.open[op.Process] = true
	} else {
		delete(r.open, op.Process)
	}
	if r.w == nil || r.err != nil {
		return
	}
	b, err := json.Marshal(op)
	if err == nil {
		b = append(b, '\n')
		_, err = r.w.Write(b)
	}
	r.err = err
}

// Ops returns a copy of the recorded entries, in recording order.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Op(nil), r.ops...)
}

// Open returns how many operations are waiting: invoked and not yet completed.
func (r *Recorder) Open() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.open)
}

// Err returns the first write error.
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Decode parses a JSON-lines history.
func Decode(rd io.Reader) ([]Op, error) {
	var ops []Op
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for line := 1; sc.Scan(); line++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var op Op
		if err := json.Unmarshal(sc.Bytes(), &op); err != nil {
			return nil, fmt.Errorf("history: line %d: %w", line, err)
		}
		ops = append(ops, op)
	}
	return ops, sc.Err()
}

// DecodeFile parses a JSON-lines history file.
func DecodeFile(path string) ([]Op, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Decode(f)
}

// Call is an invoke paired with its completion. An invoke without a completion (the run ended
// first) is returned as an Info completion at the end of the history.
type Call struct {
	Process  int
	F        F
	JobID    string
	Invoke   int64
	Complete int64
	Type     Type // OK, Fail or Info
	Value    *Value
	Error    string
}

// Pair matches every invoke with the next completion of the same process.
func Pair(ops []Op) ([]Call, error) {
	open := map[int]Op{}
	var calls []Call
	var last int64
	for _, op := range ops {
		if op.Time > last {
			last = op.Time
		}
		if op.Type == Invoke {
			if _, busy := open[op.Process]; busy {
				return nil, fmt.Errorf("%w: process %d invoked twice", ErrUnpaired, op.Process)
			}
			open[op.Process] = op
			continue
		}
		inv, ok := open[op.Process]
		if !ok {
			return nil, fmt.Errorf("%w: process %d completed %s without an invoke", ErrUnpaired, op.Process, op.F)
		}
		delete(open, op.Process)
		calls = append(calls, Call{Process: op.Process, F: inv.F, JobID: inv.JobID, Invoke: inv.Time,
			Complete: op.Time, Type: op.Type, Value: op.Value, Error: op.Error})
	}
	procs := make([]int, 0, len(open))
	for p := range open {
		procs = append(procs, p)
	}
	sort.Ints(procs)
	for _, p := range procs {
		inv := open[p]
		calls = append(calls, Call{Process: p, F: inv.F, JobID: inv.JobID, Invoke: inv.Time, Complete: last, Type: Info})
	}
	return calls, nil
}
