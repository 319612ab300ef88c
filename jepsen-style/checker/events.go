package checker

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// TaskEvent is one line of a TM's event log: a task attempt started or stopped, the TM
// registered with a leader, or the leader accepted one of an attempt's outbox messages
// ("delivered").
type TaskEvent struct {
	TS            time.Time `json:"-"`
	RawTS         any       `json:"ts"`
	TM            string    `json:"tm"`
	Event         string    `json:"event"` // "start" or "stop"
	Job           string    `json:"job"`
	Vertex        string    `json:"vertex"`
	Subtask       int32     `json:"subtask"`
	AttemptID     string    `json:"attempt_id"`
	AttemptNumber int32     `json:"attempt_number"`
	Epoch         uint64    `json:"epoch"`
	State         string    `json:"state"`
	// DeployEpoch and FenceEpoch (start events): the epoch of the leader call that submitted
	// the task, and the highest epoch the TM had seen when it accepted that call.
	DeployEpoch uint64 `json:"deploy_epoch"`
	FenceEpoch  uint64 `json:"fence_epoch"`
	// Seq (delivered events): the TM outbox's sequence number of a message the leader accepted.
	Seq uint64 `json:"seq"`
	// Incarnation (registered events): the TM process that registered.
	Incarnation string `json:"incarnation"`
}

// ParseEvents reads a JSON-lines event log. Timestamps may be RFC 3339 strings or unix
// seconds, milliseconds, microseconds or nanoseconds (told apart by magnitude).
func ParseEvents(rd io.Reader) ([]TaskEvent, error) {
	var out []TaskEvent
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for line := 1; sc.Scan(); line++ {
		b := sc.Bytes()
		if len(strings.TrimSpace(string(b))) == 0 {
			continue
		}
		var ev TaskEvent
		if err := json.Unmarshal(b, &ev); err != nil {
			// A line cut short by kill -9 is the last of its process; skip it.
			continue
		}
		ts, err := parseTS(ev.RawTS)
		if err != nil {
			return nil, fmt.Errorf("event log line %d: %w", line, err)
		}
		ev.TS = ts
		out = append(out, ev)
	}
	return out, sc.Err()
}

func parseTS(v any) (time.Time, error) {
	switch t := v.(type) {
	case string:
		if ts, err := time.Parse(time.RFC3339Nano, t); err == nil {
			return ts, nil
		}
		n, err := strconv.ParseFloat(t, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("bad ts %q", t)
		}
		return fromNumber(n), nil
	case float64:
		return fromNumber(t), nil
	}
	return time.Time{}, fmt.Errorf("bad ts %v", v)
}

func fromNumber(n float64) time.Time {
	switch {
	case n > 1e17:
		return time.Unix(0, int64(n))
	case n > 1e14:
		return time.UnixMicro(int64(n))
	case n > 1e11:
		return time.UnixMilli(int64(n))
	default:
		sec := int64(n)
		return time.Unix(sec, int64((n-float64(sec))*1e9))
	}
}

// Window is one lifetime of a node's process, from start to exit (End zero: still running at
// the end of the run).
type Window struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}

func windowOf(ws []Window, t time.Time) (Window, bool) {
	for _, w := range ws {
		if !t.Before(w.Start) && (w.End.IsZero() || !t.After(w.End)) {
			return w, true
		}
	}
	return Window{}, false
}
