package history

import (
	"bytes"
	"errors"
	"testing"
)

func TestRecordDecodePair(t *testing.T) {
	var buf bytes.Buffer
	r := NewRecorder(&buf)
	r.Add(Op{Process: 0, Type: Invoke, F: Submit, JobID: "a", Time: 1})
	r.Add(Op{Process: 1, Type: Invoke, F: Read, JobID: "a", Time: 2})
	r.Add(Op{Process: 0, Type: OK, F: Submit, JobID: "a", Time: 3})
	r.Add(Op{Process: 1, Type: OK, F: Read, JobID: "a", Value: &Value{Found: true, Status: "JOB_STATUS_RUNNING"}, Time: 4})
	r.Add(Op{Process: 2, Type: Invoke, F: Cancel, JobID: "a", Time: 5})
	ops, err := Decode(&buf)
	if err != nil || len(ops) != 5 || r.Err() != nil {
		t.Fatalf("decode: %v %d", err, len(ops))
	}
	calls, err := Pair(ops)
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 3 || calls[1].Value.Status != "JOB_STATUS_RUNNING" || calls[2].Type != Info || calls[2].Complete != 5 {
		t.Fatalf("calls = %+v", calls)
	}
	if _, err := Pair([]Op{{Process: 0, Type: OK, F: Read}}); !errors.Is(err, ErrUnpaired) {
		t.Fatalf("unpaired completion: %v", err)
	}
}
