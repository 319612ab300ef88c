package operator

import (
	"bytes"
	"fmt"
	"math"
	"testing"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestFlatMapSplitsDigits: one record per decimal digit, most significant first, with the
// record's key, origin and seq; 0 is one digit; a negative value's digits are negated.
func TestFlatMapSplitsDigits(t *testing.T) {
	op := &pb.Operator{Kind: &pb.Operator_FlatMap{FlatMap: &pb.FlatMapOperator{}}}
	cases := []struct {
		in   int64
		want string
	}{
		{0, "[0]"},
		{7, "[7]"},
		{305, "[3 0 5]"},
		{-305, "[-3 0 -5]"},
		{-1, "[-1]"},
		{math.MaxInt64, "[9 2 2 3 3 7 2 0 3 6 8 5 4 7 7 5 8 0 7]"},
		{math.MinInt64, "[-9 -2 -2 -3 -3 -7 -2 0 -3 -6 -8 -5 -4 -7 -7 -5 -8 0 -8]"},
	}
	for _, c := range cases {
		h := newHarness(t, op, nil)
		in := NumericRecord(4, c.in, 2, 9)
		h.process(in)
		h.finish()
		var vals []int64
		for _, r := range h.out {
			if !bytes.Equal(r.Key, in.Key) || r.Origin != in.Origin || r.Seq != in.Seq {
				t.Fatalf("%d: %+v does not keep the key, origin and seq of %+v", c.in, r, in)
			}
			vals = append(vals, num(r.Value))
		}
		if got := fmt.Sprint(vals); got != c.want {
			t.Errorf("flat_map of %d: %s, want %s", c.in, got, c.want)
		}
		if st := h.snapshot(); st != nil {
			t.Errorf("flat_map keeps state: %s", st)
		}
	}
}
