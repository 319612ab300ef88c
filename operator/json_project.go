package operator

import (
	"encoding/json"

	"github.com/tidwall/gjson"

	"github.com/jmcluster/jmcluster/transport/pb"
)

func init() {
	register("json_project", runtime{transform: func(op *pb.Operator, _ Info) Transform {
		fs := op.GetJsonProject().GetFields()
		p := &jsonProject{paths: make([]jsonPath, len(fs)), heads: make([][]byte, len(fs)), found: make([]gjson.Result, len(fs))}
		for i, f := range fs {
			p.paths[i] = newJSONPath(f.GetPath())
			name := f.GetName()
			if name == "" {
				name = f.GetPath()
			}
			q, _ := json.Marshal(name) // a string: cannot fail; once per task, not per record
			sep := byte(',')
			if i == 0 {
				sep = '{'
			}
			p.heads[i] = append(append([]byte{sep}, q...), ':')
		}
		return p
	}})
}

// jsonProject turns each record's JSON value into the object of the listed fields, in their
// order, each the field's JSON text as the value holds it (a number is not re-encoded). Key,
// event time and lineage stay. A value that is not valid JSON, or lacks one of the fields, is
// a dead letter (the reason names the first field missing).
type jsonProject struct {
	paths []jsonPath
	heads [][]byte // per field `{"name":` (the first) or `,"name":`
	found []gjson.Result
}

func (p *jsonProject) Process(ctx *Context, r Record) error {
	doc, ok := jsonDoc(r.Value)
	if !ok {
		return ctx.DeadLetter(r, reasonNotJSON)
	}
	n := 1 // the closing brace
	for i := range p.paths {
		res, ok := p.paths[i].get(doc)
		if !ok {
			return ctx.DeadLetter(r, p.paths[i].missing)
		}
		p.found[i] = res
		n += len(p.heads[i]) + len(res.Raw)
	}
	out := make([]byte, 0, n)
	for i, res := range p.found {
		out = append(append(out, p.heads[i]...), res.Raw...)
	}
	r.Value = append(out, '}')
	clear(p.found) // hold no view of the value past the record
	return ctx.Emit(r)
}
