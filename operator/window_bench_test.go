package operator

import (
	"testing"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// passThrough emits every record as it is.
type passThrough struct{}

func (passThrough) Process(ctx *Context, r Record) error { return ctx.Emit(r) }

// BenchmarkWindow: the cost of one generated event (1,000 users, up to 200 ms of disorder)
// through a tumbling window of 60 s summing "amount", as a task runs it (its Context around
// it; the watermark advanced every 1,024 records, so windows fire and are dropped in the
// measured time), against the same records through a transform that passes them on.
func BenchmarkWindow(b *testing.B) {
	const ring = 1 << 16 // events made before: the source's cost, not the transform's
	g := NewGenerator(&pb.EventGenerator{Seed: 5, Keys: 1000, StartMs: 1_700_000_000_000, StepMs: 1, MaxDisorderMs: 200})
	in := make([]Record, ring)
	for i := range in {
		in[i] = g.Event(0, int64(i)).Record(0, int64(i))
	}
	for _, c := range []struct {
		name string
		op   func(b *testing.B) *transformOperator
	}{
		{"pass_through", func(b *testing.B) *transformOperator {
			o, err := newTransformOperator("pass", passThrough{}, false, Info{})
			if err != nil {
				b.Fatal(err)
			}
			return o
		}},
		{"tumbling_60s", func(b *testing.B) *transformOperator {
			o, err := New(windowSpec(&pb.WindowOperator{Kind: pb.WindowKind_WINDOW_KIND_TUMBLING, SizeMs: 60_000, Field: "amount"}), Info{})
			if err != nil {
				b.Fatal(err)
			}
			return o.(*transformOperator)
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			o := c.op(b)
			outputs := 0
			emit := func(Record) error { outputs++; return nil }
			o.ctx.out = emit
			h, _ := o.t.(TimerHandler)
			b.ReportAllocs()
			i := int64(0)
			for b.Loop() {
				r := in[i%ring]
				r.Time += i / ring * ring // each lap of the ring later in time
				if err := o.Process(r, emit); err != nil {
					b.Fatal(err)
				}
				if i%1024 == 1023 {
					if err := o.ctx.advance(r.Time-200-1, h); err != nil {
						b.Fatal(err)
					}
				}
				i++
			}
			b.ReportMetric(float64(outputs)/float64(b.N), "outputs/op")
		})
	}
}
