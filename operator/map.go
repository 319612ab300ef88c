package operator

import "github.com/jmcluster/jmcluster/transport/pb"

func init() {
	register("map", runtime{transform: func(op *pb.Operator, _ Info) Transform {
		m := op.GetMap().GetMultiply()
		if m == 0 {
			m = 1
		}
		return &mapOp{multiply: m, add: op.GetMap().GetAdd()}
	}})
}

// mapOp: value = value*multiply + add, of a numeric value (8 bytes, big endian).
type mapOp struct {
	multiply, add int64
}

func (m *mapOp) Process(ctx *Context, r Record) error {
	v, err := numericValue("map", &r)
	if err != nil {
		return err
	}
	r.Value = ctx.Int64Bytes(v*m.multiply + m.add)
	return ctx.Emit(r)
}
