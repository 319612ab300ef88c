package operator

import (
	"context"
	"testing"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// BenchmarkGeneratorSource: the cost of one generated event through its source task's
// SourceContext, without event time, with the generator's own times (the watermark
// generator's cost: an atomic flag per record, the clock per tick) and with the time read
// from the JSON value at time_path.
func BenchmarkGeneratorSource(b *testing.B) {
	for _, c := range []struct {
		name string
		et   *pb.EventTime
	}{{"no_event_time", nil}, {"event_time", &pb.EventTime{MaxOutOfOrdernessMs: 100}}, {"time_path", &pb.EventTime{TimePath: "ts", MaxOutOfOrdernessMs: 100}}} {
		b.Run(c.name, func(b *testing.B) {
			op := generatorOp(&pb.EventGenerator{Seed: 1, Count: int64(b.N), Keys: 10000, StartMs: 1_700_000_000_000, StepMs: 1, MaxDisorderMs: 100})
			op.EventTime = c.et
			src, err := NewSource(op, Info{})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			n := 0
			if err := src.Run(context.Background(), func(r Record) error { n++; return nil }); err != nil {
				b.Fatal(err)
			}
			if n < b.N {
				b.Fatalf("%d records of %d", n, b.N)
			}
		})
	}
}
