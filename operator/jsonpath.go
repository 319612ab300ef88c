package operator

import (
	"cmp"
	"strconv"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"
)

// The JSON operators' field paths and lookups (json_key_by, json_filter, json_project). A path
// is field names separated by dots; a field name of digits also selects an array's element by
// its index ("items.0.sku"). graph.ValidateOperator has checked every path a constructor gets
// (graph/operators_json.go). Lookups read the record's value in place: no decoding into Go
// values, no copy of the value.

// The dead-letter reasons of the JSON operators.
const (
	reasonNotJSON    = "not valid JSON"
	reasonLacksField = "lacks the field "
)

// jsonPath is a validated field path and its gjson form.
type jsonPath struct {
	text    string // the path as the job spec wrote it
	gj      string // in gjson's syntax: each field name escaped
	missing string // the dead-letter reason of a record that lacks the field
}

// newJSONPath translates path to gjson's syntax. Each field name is escaped (gjson.Escape puts
// a backslash before every character but letters, digits, '_', '-' and ':'), so a name never
// acts as one of gjson's wildcards ('*', '?'), queries or counts ('#'), modifiers ('@'), pipes
// ('|'), literals ('!') or subselectors ('[', '{'): "a*b" finds the field "a*b" only.
func newJSONPath(path string) jsonPath {
	names := strings.Split(path, ".")
	for i, n := range names {
		names[i] = gjson.Escape(n)
	}
	return jsonPath{text: path, gj: strings.Join(names, "."), missing: reasonLacksField + path}
}

// jsonDoc views a record's value as a string for gjson, without copying it (a record's value
// is never changed once emitted); ok false when the value is not valid JSON.
func jsonDoc(value []byte) (doc string, ok bool) {
	if len(value) == 0 || !gjson.ValidBytes(value) {
		return "", false
	}
	return unsafe.String(unsafe.SliceData(value), len(value)), true
}

// get finds p in doc (jsonDoc); ok false when doc lacks it.
func (p *jsonPath) get(doc string) (gjson.Result, bool) {
	res := gjson.Get(doc, p.gj)
	return res, res.Exists()
}

// rawBytes returns the JSON text of res, a result found in value (through jsonDoc): a slice
// of value when gjson's text is value's own bytes (no copy), else a copy.
func rawBytes(value []byte, res gjson.Result) []byte {
	if i := res.Index; i > 0 && i+len(res.Raw) <= len(value) && unsafe.StringData(res.Raw) == &value[i] {
		return value[i : i+len(res.Raw) : i+len(res.Raw)]
	}
	return []byte(res.Raw)
}

// stringBytes returns the characters of res, a JSON string found in value: a slice of value
// when the string has no escape sequence, else the unescaped copy.
func stringBytes(value []byte, res gjson.Result) []byte {
	raw := rawBytes(value, res)
	if len(raw) >= 2 && strings.IndexByte(res.Raw, '\\') < 0 {
		return raw[1 : len(raw)-1 : len(raw)-1]
	}
	return []byte(res.Str)
}

// jsonType names the JSON type of res, as the dead-letter reasons say it.
func jsonType(res gjson.Result) string {
	switch res.Type {
	case gjson.Null:
		return "null"
	case gjson.True, gjson.False:
		return "a boolean"
	case gjson.Number:
		return "a number"
	case gjson.String:
		return "a string"
	}
	if strings.HasPrefix(res.Raw, "[") {
		return "an array"
	}
	return "an object"
}

// sameJSONType reports whether a and b are of one JSON type (true and false are both
// booleans).
func sameJSONType(a, b gjson.Result) bool {
	switch a.Type {
	case gjson.True, gjson.False:
		return b.Type == gjson.True || b.Type == gjson.False
	case gjson.JSON:
		return false // never compared: a literal is a scalar
	}
	return a.Type == b.Type
}

// compareJSON compares two results of the same scalar type (sameJSONType): -1, 0 or 1.
// Numbers that are both integers within int64 compare exactly; others as float64. Strings
// compare their characters byte by byte; booleans and null only for equality (false and
// true are unequal: 1).
func compareJSON(a, b gjson.Result) int {
	switch a.Type {
	case gjson.Number:
		if x, err := strconv.ParseInt(a.Raw, 10, 64); err == nil {
			if y, err := strconv.ParseInt(b.Raw, 10, 64); err == nil {
				return cmp.Compare(x, y)
			}
		}
		return cmp.Compare(a.Num, b.Num)
	case gjson.String:
		return strings.Compare(a.Str, b.Str)
	case gjson.True, gjson.False:
		if a.Type == b.Type {
			return 0
		}
		return 1
	}
	return 0 // null
}
