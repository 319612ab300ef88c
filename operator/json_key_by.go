package operator

import (
	"github.com/tidwall/gjson"

	"github.com/jmcluster/jmcluster/transport/pb"
)

func init() {
	register("json_key_by", runtime{transform: func(op *pb.Operator, _ Info) Transform {
		return &jsonKeyBy{path: newJSONPath(op.GetJsonKeyBy().GetPath())}
	}})
}

// jsonKeyBy sets each record's key to a field of its JSON value: a string's characters,
// another value's JSON text ("42", "true", "{\"a\":1}"). The value, event time and lineage
// stay. A value that is not valid JSON, or lacks the field, is a dead letter.
type jsonKeyBy struct {
	path jsonPath
}

func (k *jsonKeyBy) Process(ctx *Context, r Record) error {
	doc, ok := jsonDoc(r.Value)
	if !ok {
		return ctx.DeadLetter(r, reasonNotJSON)
	}
	res, ok := k.path.get(doc)
	if !ok {
		return ctx.DeadLetter(r, k.path.missing)
	}
	if res.Type == gjson.String {
		r.Key = stringBytes(r.Value, res)
	} else {
		r.Key = rawBytes(r.Value, res)
	}
	return ctx.Emit(r)
}
