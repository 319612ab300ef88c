package operator

import (
	"fmt"
	"testing"

	"github.com/jmcluster/jmcluster/testkit/natstest"
)

// TestNatsSourceEndsAtStopAtSequence: with stop_at_sequence a source emits its split's
// messages up to that stream sequence and ends (Run returns nil, as a bounded source does);
// one restored from a state past the end ends at once, emitting nothing.
func TestNatsSourceEndsAtStopAtSequence(t *testing.T) {
	s := natstest.Start(t)
	s.CreateStream(t, "ORDERS", "orders.>")
	for i := range 20 {
		s.Publish(t, "orders.new", []byte(fmt.Sprintf(`{"i":%d}`, i)), nil)
	}
	op := natsOp(s.URL, "ORDERS", "")
	op.GetNatsSource().StopAtSequence = 12
	for sub := range int32(2) {
		out, _, err := runNatsErr(op, sub, 2, nil, 1000, false)
		if err != nil {
			t.Fatalf("subtask %d: %v after %d records", sub, err, len(out))
		}
		if len(out) != 6 {
			t.Fatalf("subtask %d emitted %d records, want 6 (stream sequences %d, %d, ... up to 12)", sub, len(out), sub+1, sub+3)
		}
		for k, r := range out {
			if want := fmt.Sprintf(`{"i":%d}`, int(sub)+2*k); string(r.Value) != want {
				t.Fatalf("subtask %d record %d is %s, want %s", sub, k, r.Value, want)
			}
		}
	}
	// Restored in front of its last message, subtask 1 emits it (stream sequence 12) and ends.
	_, state, err := runNatsErr(op, 1, 2, nil, 5, true)
	if err != nil || state == nil {
		t.Fatalf("subtask 1, 5 records and a snapshot: state %s, %v", state, err)
	}
	out, _, err := runNatsErr(op, 1, 2, state, 1000, false)
	if err != nil || len(out) != 1 || string(out[0].Value) != `{"i":11}` {
		t.Fatalf("subtask 1 restored in front of its last message: %d records (%v), %v; want {\"i\":11} and its end", len(out), out, err)
	}
	// Restored past the end (its split's next sequence 13), it ends at once with nothing.
	out, _, err = runNatsErr(op, 1, 2, []byte(`{"next":13}`), 1000, false)
	if err != nil || len(out) != 0 {
		t.Fatalf("subtask 1 restored past its end: %d records, %v; want none and its end", len(out), err)
	}
}
