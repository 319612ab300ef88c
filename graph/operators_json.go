package graph

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// The JSON operators' bounds.
const (
	// MaxJSONPathLen bounds a field path (json_key_by.path, json_filter.path, a
	// json_project field's path and name), in bytes.
	MaxJSONPathLen = 256
	// MaxJSONLiteralLen bounds json_filter.value, in bytes.
	MaxJSONLiteralLen = 1024
	// MaxProjectFields bounds the fields of json_project.
	MaxProjectFields = 64
)

func validateJSONKeyBy(op *pb.Operator, _ OperatorEnv, add addFunc) {
	checkJSONPath(add, "json_key_by.path", op.GetJsonKeyBy().GetPath())
}

func validateJSONFilter(op *pb.Operator, _ OperatorEnv, add addFunc) {
	f := op.GetJsonFilter()
	checkJSONPath(add, "json_filter.path", f.GetPath())
	switch o := f.GetOp(); {
	case o == pb.CompareOp_COMPARE_OP_UNSPECIFIED:
		add("json_filter.op", "is unspecified (%s)", compareOps())
	case pb.CompareOp_name[int32(o)] == "":
		add("json_filter.op", "%d is not a CompareOp (%s)", int32(o), compareOps())
	}
	lit, ok := checkJSONLiteral(add, "json_filter.value", f.GetValue())
	if !ok {
		return
	}
	switch f.GetOp() {
	case pb.CompareOp_COMPARE_OP_LESS, pb.CompareOp_COMPARE_OP_LESS_OR_EQUAL,
		pb.CompareOp_COMPARE_OP_GREATER, pb.CompareOp_COMPARE_OP_GREATER_OR_EQUAL:
		if lit.Type != gjson.Number && lit.Type != gjson.String {
			add("json_filter.value", "%s is not a number or a string: %s compares numbers or strings only (EQUAL and NOT_EQUAL compare any literal)",
				f.GetValue(), f.GetOp())
		}
	}
}

func validateJSONProject(op *pb.Operator, _ OperatorEnv, add addFunc) {
	fs := op.GetJsonProject().GetFields()
	switch {
	case len(fs) == 0:
		add("json_project.fields", "is empty: list the fields to keep")
		return
	case len(fs) > MaxProjectFields:
		add("json_project.fields", "%d fields, over MaxProjectFields %d", len(fs), MaxProjectFields)
		return
	}
	names := make(map[string]int, len(fs))
	for i, pf := range fs {
		f := fmt.Sprintf("json_project.fields[%d]", i)
		if pf == nil {
			add(f, "is missing")
			continue
		}
		checkJSONPath(add, f+".path", pf.GetPath())
		name, field := pf.GetName(), f+".name"
		switch {
		case name == "":
			name = pf.GetPath() // its problems are the path's
		case len(name) > MaxJSONPathLen:
			add(field, "is %d bytes long, over MaxJSONPathLen %d", len(name), MaxJSONPathLen)
			continue
		case !utf8.ValidString(name):
			add(field, "%q is not valid UTF-8", name)
			continue
		}
		if j, dup := names[name]; dup {
			add(field, "the output name %q is also fields[%d]'s (a name of the output object is used once; an empty name is the path)", name, j)
			continue
		}
		names[name] = i
	}
}

// checkJSONPath refuses a field path that is empty, over MaxJSONPathLen, not valid UTF-8,
// holds a control character, or has an empty field name ("a..b", ".a", "a.").
func checkJSONPath(add addFunc, field, p string) {
	const syntax = `a path is field names separated by single dots, an array element by its index: "user.id", "items.0"`
	switch {
	case p == "":
		add(field, "is empty (%s)", syntax)
	case len(p) > MaxJSONPathLen:
		add(field, "is %d bytes long, over MaxJSONPathLen %d", len(p), MaxJSONPathLen)
	case !utf8.ValidString(p):
		add(field, "%q is not valid UTF-8", p)
	case strings.ContainsFunc(p, func(r rune) bool { return r < ' ' || r == 0x7f }):
		add(field, "%q holds a control character", p)
	case strings.HasPrefix(p, ".") || strings.HasSuffix(p, ".") || strings.Contains(p, ".."):
		add(field, "%q has an empty field name (%s)", p, syntax)
	}
}

// checkJSONLiteral refuses a literal that is not the JSON text of a number, a string, true,
// false or null (or is over MaxJSONLiteralLen), and returns it parsed.
func checkJSONLiteral(add addFunc, field, v string) (gjson.Result, bool) {
	const want = `a JSON number (100), string ("\"gold\""), true, false or null`
	switch {
	case v == "":
		add(field, "is empty: %s", want)
		return gjson.Result{}, false
	case len(v) > MaxJSONLiteralLen:
		add(field, "is %d bytes long, over MaxJSONLiteralLen %d", len(v), MaxJSONLiteralLen)
		return gjson.Result{}, false
	case strings.TrimSpace(v) != v || !gjson.Valid(v):
		add(field, "%s is not a JSON literal: %s", v, want)
		return gjson.Result{}, false
	}
	lit := gjson.Parse(v)
	if lit.Type == gjson.JSON {
		add(field, "%s is an object or array: %s", v, want)
		return gjson.Result{}, false
	}
	return lit, true
}

// compareOps lists the CompareOp values a json_filter takes.
func compareOps() string {
	var names []string
	for i := int32(1); pb.CompareOp_name[i] != ""; i++ {
		names = append(names, pb.CompareOp_name[i])
	}
	return strings.Join(names, ", ")
}
