package operator

import (
	"github.com/tidwall/gjson"

	"github.com/jmcluster/jmcluster/transport/pb"
)

func init() {
	register("json_filter", runtime{transform: func(op *pb.Operator, _ Info) Transform {
		f := op.GetJsonFilter()
		lit := gjson.Parse(f.GetValue())
		return &jsonFilter{path: newJSONPath(f.GetPath()), op: f.GetOp(), lit: lit,
			literal: "; the literal " + lit.Raw + " is " + jsonType(lit)}
	}})
}

// jsonFilter keeps the records whose JSON field at path compares as op asks with the literal
// lit. A value that is not valid JSON, lacks the field, or holds it as another JSON type than
// the literal's is a dead letter (the reason names the field, its type and the literal's).
type jsonFilter struct {
	path jsonPath
	op   pb.CompareOp
	lit  gjson.Result
	// literal ends the reason of a field of another type: "; the literal 100 is a number".
	literal string
}

func (f *jsonFilter) Process(ctx *Context, r Record) error {
	doc, ok := jsonDoc(r.Value)
	if !ok {
		return ctx.DeadLetter(r, reasonNotJSON)
	}
	res, ok := f.path.get(doc)
	if !ok {
		return ctx.DeadLetter(r, f.path.missing)
	}
	if !sameJSONType(res, f.lit) {
		return ctx.DeadLetter(r, "the field "+f.path.text+" is "+jsonType(res)+f.literal)
	}
	if f.keeps(compareJSON(res, f.lit)) {
		return ctx.Emit(r)
	}
	return nil
}

// keeps reports whether a field that compares c (-1, 0, 1) with the literal passes.
func (f *jsonFilter) keeps(c int) bool {
	switch f.op {
	case pb.CompareOp_COMPARE_OP_EQUAL:
		return c == 0
	case pb.CompareOp_COMPARE_OP_NOT_EQUAL:
		return c != 0
	case pb.CompareOp_COMPARE_OP_LESS:
		return c < 0
	case pb.CompareOp_COMPARE_OP_LESS_OR_EQUAL:
		return c <= 0
	case pb.CompareOp_COMPARE_OP_GREATER:
		return c > 0
	case pb.CompareOp_COMPARE_OP_GREATER_OR_EQUAL:
		return c >= 0
	}
	return false // graph.ValidateOperator refuses any other op
}
