package operator

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// ErrNoDeadLetterOutput: an operator has a dead letter to send but the task has no
// dead-letter output.
var ErrNoDeadLetterOutput = fmt.Errorf("the job has no dead-letter output (dead_letters in the job spec)")

// DeadLetter is the value of a dead-letter record: what went wrong, where, and the record. It
// is a JSON object, one per line in a file sink.
type DeadLetter struct {
	// Reason says why the record could not be handled ("not valid JSON", "lacks the field
	// user.id", "late: window [0, 60000) of user-0042 closed at watermark 70000").
	Reason  string `json:"reason"`
	Vertex  string `json:"vertex"`
	Subtask int32  `json:"subtask"`
	// Key and Value are the record's bytes as a string when they are valid UTF-8; otherwise
	// KeyBase64 and ValueBase64 hold them.
	Key         string `json:"key,omitempty"`
	KeyBase64   []byte `json:"key_base64,omitempty"`
	Value       string `json:"value,omitempty"`
	ValueBase64 []byte `json:"value_base64,omitempty"`
	// Time is the record's event time (ms since the Unix epoch), absent when it has none.
	Time   *int64 `json:"time,omitempty"`
	Origin int32  `json:"origin"`
	Seq    int64  `json:"seq"`
}

// DeadLetterRecord is the dead letter of r sent by the task info describes: key r's key, value
// the DeadLetter JSON object, r's event time and lineage (the checkers count a dead letter as
// its record's one delivery).
func DeadLetterRecord(info Info, r Record, reason string) Record {
	d := DeadLetter{Reason: reason, Vertex: info.Vertex, Subtask: info.Subtask, Origin: r.Origin, Seq: r.Seq}
	if utf8.Valid(r.Key) {
		d.Key = string(r.Key)
	} else {
		d.KeyBase64 = r.Key
	}
	if utf8.Valid(r.Value) {
		d.Value = string(r.Value)
	} else {
		d.ValueBase64 = r.Value
	}
	if r.Time != NoTimestamp {
		t := r.Time
		d.Time = &t
	}
	v, err := json.Marshal(d)
	if err != nil { // strings and numbers only: cannot fail
		panic(err)
	}
	return Record{Key: r.Key, Value: v, Time: r.Time, Origin: r.Origin, Seq: r.Seq}
}

// sendDeadLetter hands r's dead letter to the task's dead-letter output.
func sendDeadLetter(info Info, r Record, reason string) error {
	if info.DeadLetters == nil {
		return fmt.Errorf("%s subtask %d: %w; the record %d/%d: %s", info.Vertex, info.Subtask, ErrNoDeadLetterOutput, r.Origin, r.Seq, reason)
	}
	return info.DeadLetters(DeadLetterRecord(info, r, reason))
}
