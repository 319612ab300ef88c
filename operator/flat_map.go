package operator

import "github.com/jmcluster/jmcluster/transport/pb"

func init() {
	register("flat_map", runtime{transform: func(*pb.Operator, Info) Transform { return flatMap{} }})
}

// flatMap emits one record per decimal digit of the value, most significant first, with the
// record's key, origin and seq, of a numeric value (8 bytes, big endian): 0 gives one 0; a negative value gives the negated digits of
// its absolute value (-305 gives -3, 0, -5), math.MinInt64 included.
type flatMap struct{}

// maxDigits is the number of decimal digits of the largest absolute value, 2^63.
const maxDigits = 19

func (flatMap) Process(ctx *Context, r Record) error {
	v, err := numericValue("flat_map", &r)
	if err != nil {
		return err
	}
	u, sign := uint64(v), int64(1)
	if v < 0 {
		u, sign = -u, -1 // two's complement: right for math.MinInt64 as well
	}
	var digits [maxDigits]int64
	n := 0
	for {
		digits[n] = int64(u % 10)
		n++
		if u /= 10; u == 0 {
			break
		}
	}
	for i := n - 1; i >= 0; i-- {
		r.Value = ctx.Int64Bytes(sign * digits[i])
		if err := ctx.Emit(r); err != nil {
			return err
		}
	}
	return nil
}
