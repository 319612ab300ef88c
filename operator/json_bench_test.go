package operator

import (
	"testing"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// BenchmarkJSONTransform: the cost of one generated event ({"user":"user-0042","amount":17,
// "ts":1700000000123}) through each JSON operator as a task runs it, emitting into a no-op;
// and of a record that is not JSON, which becomes a dead letter.
func BenchmarkJSONTransform(b *testing.B) {
	g := NewGenerator(&pb.EventGenerator{Seed: 1, Keys: 10000, StartMs: 1_700_000_000_000, StepMs: 1})
	events := make([]Record, 1024) // made before: the source's cost, not the transform's
	for i := range events {
		events[i] = g.Event(0, int64(i)).Record(0, int64(i))
	}
	numbers := make([]Record, 1024)
	for i := range numbers {
		numbers[i] = NumericRecord(int64(i), int64(i), 0, int64(i))
	}
	for _, c := range []struct {
		name string
		op   *pb.Operator
		in   []Record
	}{
		{"json_key_by", keyByOp("user"), events},
		{"json_filter", jsonFilterOp("amount", pb.CompareOp_COMPARE_OP_GREATER, "50"), events},
		{"json_filter_string", jsonFilterOp("user", pb.CompareOp_COMPARE_OP_LESS, `"user-0500"`), events},
		{"json_project", projectOp("user", "", "amount", "a", "ts", ""), events},
		{"json_key_by_dead_letter", keyByOp("user"), numbers},
	} {
		b.Run(c.name, func(b *testing.B) {
			o, err := New(c.op, Info{DeadLetters: func(r Record) error { return nil }})
			if err != nil {
				b.Fatal(err)
			}
			emit := func(Record) error { return nil }
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if err := o.Process(c.in[i&1023], emit); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
