package operator

import (
	"testing"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// BenchmarkTransform: the cost of one record through a built-in transform as a task runs it
// (its Context around it), emitting into a no-op.
func BenchmarkTransform(b *testing.B) {
	for _, c := range []struct {
		name string
		op   *pb.Operator
	}{
		{"map", &pb.Operator{Kind: &pb.Operator_Map{Map: &pb.MapOperator{Multiply: 2, Add: 1}}}},
		{"key_by_sum", &pb.Operator{Kind: &pb.Operator_KeyBySum{KeyBySum: &pb.KeyBySumOperator{}}}},
		{"flat_map", &pb.Operator{Kind: &pb.Operator_FlatMap{FlatMap: &pb.FlatMapOperator{}}}},
	} {
		b.Run(c.name, func(b *testing.B) {
			o, err := New(c.op, Info{})
			if err != nil {
				b.Fatal(err)
			}
			emit := func(Record) error { return nil }
			in := make([]Record, 1024) // made before: the source's cost, not the transform's
			for i := range in {
				in[i] = NumericRecord(int64(i), int64(i)*7919, 0, int64(i))
			}
			b.ReportAllocs()
			i := int64(0)
			for b.Loop() {
				if err := o.Process(in[i&1023], emit); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkEventGenerator: the cost of one generated event as its source emits it (hash,
// user, JSON record), uniform and skewed.
func BenchmarkEventGenerator(b *testing.B) {
	for _, c := range []struct {
		name string
		skew float64
	}{{"uniform", 0}, {"zipf", 1.1}} {
		b.Run(c.name, func(b *testing.B) {
			g := NewGenerator(&pb.EventGenerator{Seed: 1, Keys: 10000, KeySkew: c.skew, StartMs: 1_700_000_000_000, StepMs: 1, MaxDisorderMs: 100})
			b.ReportAllocs()
			i := int64(0)
			for b.Loop() {
				if r := g.Event(0, i).Record(0, i); len(r.Value) == 0 {
					b.Fatal("empty record")
				}
				i++
			}
		})
	}
}
