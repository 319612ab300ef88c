package operator

import "github.com/jmcluster/jmcluster/transport/pb"

func init() {
	register("filter", runtime{transform: func(op *pb.Operator, _ Info) Transform {
		return &filterOp{modulus: op.GetFilter().GetModulus(), remainder: op.GetFilter().GetRemainder()}
	}})
}

// filterOp keeps records with value % modulus == remainder, of a numeric value (8 bytes, big
// endian).
type filterOp struct {
	modulus, remainder int64
}

func (f *filterOp) Process(ctx *Context, r Record) error {
	v, err := numericValue("filter", &r)
	if err != nil {
		return err
	}
	if v%f.modulus != f.remainder {
		return nil
	}
	return ctx.Emit(r)
}
