package operator

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// jsonHarness opens op's runtime in a task of vertex "v" with a dead-letter output it
// collects.
func jsonHarness(t *testing.T, op *pb.Operator) (*harness, *[]Record) {
	t.Helper()
	var dead []Record
	o, err := New(op, Info{Vertex: "v", Subtask: 1, DeadLetters: func(r Record) error { dead = append(dead, r); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	return (&harness{t: t}).open(o.(*transformOperator)), &dead
}

func jsonRecord(value string, seq int64) Record {
	return Record{Key: []byte("k"), Value: []byte(value), Time: 1000 + seq, Origin: 3, Seq: seq}
}

func keyByOp(path string) *pb.Operator {
	return &pb.Operator{Kind: &pb.Operator_JsonKeyBy{JsonKeyBy: &pb.JsonKeyBy{Path: path}}}
}

func jsonFilterOp(path string, op pb.CompareOp, value string) *pb.Operator {
	return &pb.Operator{Kind: &pb.Operator_JsonFilter{JsonFilter: &pb.JsonFilter{Path: path, Op: op, Value: value}}}
}

func projectOp(fields ...string) *pb.Operator {
	p := &pb.JsonProject{}
	for i := 0; i < len(fields); i += 2 {
		p.Fields = append(p.Fields, &pb.ProjectField{Path: fields[i], Name: fields[i+1]})
	}
	return &pb.Operator{Kind: &pb.Operator_JsonProject{JsonProject: p}}
}

// deadLetters decodes the dead letters as "seq:reason".
func deadLetters(t *testing.T, rs []Record) []string {
	t.Helper()
	out := make([]string, len(rs))
	for i, r := range rs {
		var d DeadLetter
		if err := json.Unmarshal(r.Value, &d); err != nil {
			t.Fatalf("dead letter %q: %v", r.Value, err)
		}
		if d.Vertex != "v" || d.Subtask != 1 || d.Origin != r.Origin || d.Seq != r.Seq {
			t.Fatalf("dead letter %+v of record %d/%d", d, r.Origin, r.Seq)
		}
		out[i] = fmt.Sprintf("%d:%s", d.Seq, d.Reason)
	}
	return out
}

// TestJSONKeyBy: the key becomes the field (a string's characters, another value's JSON
// text), the value, time and lineage stay; a value that is not JSON or lacks the field is a
// dead letter with its reason, and the operator goes on.
func TestJSONKeyBy(t *testing.T) {
	h, dead := jsonHarness(t, keyByOp("user.id"))
	in := []string{
		`{"user":{"id":"user-0042"},"amount":1}`,
		`{"user":{"id":42}}`,
		`{"user":{"id":{"a": [1, 2]}}}`,
		`{"user":{"id":"tab\there \"q\" \u00e9"}}`,
		`{"user":{"id":true}}`,
		`{"user":{"id":null}}`,
		"\x00\x00\x00\x00\x00\x00\x00\x07", // a numeric record: not JSON
		`{"user":{"name":"x"}}`,
		`{"user":"id"}`,
		`{"user":{"id":1}`, // truncated
		``,
	}
	for i, v := range in {
		h.process(jsonRecord(v, int64(i)))
	}
	want := []string{`user-0042`, `42`, `{"a": [1, 2]}`, "tab\there \"q\" é", `true`, `null`}
	if len(h.out) != len(want) {
		t.Fatalf("emitted %d records, want %d", len(h.out), len(want))
	}
	for i, r := range h.out {
		if string(r.Key) != want[i] || string(r.Value) != in[i] || r.Time != 1000+int64(i) || r.Origin != 3 || r.Seq != int64(i) {
			t.Errorf("record %d: key %q value %q time %d lineage %d/%d, want key %q and the rest kept", i, r.Key, r.Value, r.Time, r.Origin, r.Seq, want[i])
		}
	}
	got := strings.Join(deadLetters(t, *dead), "|")
	if w := "6:not valid JSON|7:lacks the field user.id|8:lacks the field user.id|9:not valid JSON|10:not valid JSON"; got != w {
		t.Fatalf("dead letters %s, want %s", got, w)
	}
	// A dead letter keeps the record's key, time and lineage; its value says it all.
	var d DeadLetter
	_ = json.Unmarshal((*dead)[1].Value, &d)
	if r := (*dead)[1]; string(r.Key) != "k" || r.Time != 1007 || d.Value != in[7] || d.Key != "k" || d.Time == nil || *d.Time != 1007 {
		t.Fatalf("dead letter %+v (%q)", r, r.Value)
	}
}

// TestJSONPathsAreFieldNames: a path is field names and array indexes only: gjson's wildcards,
// counts, queries, modifiers, pipes and literals in a field name are that name's characters.
func TestJSONPathsAreFieldNames(t *testing.T) {
	doc := `{"ab":"ab","a*":"star","a?":"question","items":[{"sku":"s0"},{"sku":"s1"}],"#":"hash","@this":"at",` +
		`"a|b":"pipe","back\\slash":"backslash","!true":"bang","[x]":"bracket","{y}":"brace","k=v":"eq","0":"zero","a":{"b":"dot"}}`
	for _, c := range []struct{ path, want string }{
		{"a*", "star"}, {"a?", "question"}, {"items.1.sku", "s1"}, {"items.0", `{"sku":"s0"}`},
		{"#", "hash"}, {"@this", "at"}, {"a|b", "pipe"}, {`back\slash`, "backslash"}, {"!true", "bang"},
		{"[x]", "bracket"}, {"{y}", "brace"}, {"k=v", "eq"}, {"0", "zero"}, {"a.b", "dot"},
		{"items.#", ""}, {"items.#.sku", ""}, {"a*b", ""}, {"@reverse", ""}, {"a.b|@this", ""}, {"items.2", ""}, {"ab.*", ""},
	} {
		h, dead := jsonHarness(t, keyByOp(c.path))
		h.process(jsonRecord(doc, 0))
		switch {
		case c.want == "" && (len(h.out) != 0 || len(*dead) != 1):
			t.Errorf("path %q found %q, want a dead letter", c.path, keyValuesRaw(h.out))
		case c.want != "" && (len(h.out) != 1 || string(h.out[0].Key) != c.want):
			t.Errorf("path %q found %q (dead letters %d), want %q", c.path, keyValuesRaw(h.out), len(*dead), c.want)
		}
	}
}

func keyValuesRaw(rs []Record) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = string(r.Key)
	}
	return out
}

// TestJSONFilter: each comparison on numbers (integers exactly, beyond 2^53), strings,
// booleans and null; a field of another type than the literal is a dead letter naming the
// field, its type and the literal's.
func TestJSONFilter(t *testing.T) {
	const (
		eq = pb.CompareOp_COMPARE_OP_EQUAL
		ne = pb.CompareOp_COMPARE_OP_NOT_EQUAL
		lt = pb.CompareOp_COMPARE_OP_LESS
		le = pb.CompareOp_COMPARE_OP_LESS_OR_EQUAL
		gt = pb.CompareOp_COMPARE_OP_GREATER
		ge = pb.CompareOp_COMPARE_OP_GREATER_OR_EQUAL
	)
	values := []string{`1`, `17`, `17.0`, `1.7e1`, `-3.5`, `9007199254740993`, `9007199254740992`, `"gold"`, `"silver"`, `"gol"`, `true`, `false`, `null`, `{"x":1}`, `[17]`}
	for _, c := range []struct {
		op    pb.CompareOp
		lit   string
		keeps string // the kept values' indexes
	}{
		{eq, `17`, "1 2 3"},
		{ne, `17`, "0 4 5 6"},
		{lt, `17`, "0 4"},
		{le, `17`, "0 1 2 3 4"},
		{gt, `17`, "5 6"},
		{ge, `17`, "1 2 3 5 6"},
		{gt, `9007199254740992`, "5"},
		{eq, `9007199254740993`, "5"},
		{eq, `"gold"`, "7"},
		{lt, `"gold"`, "9"},
		{ge, `"gold"`, "7 8"},
		{ne, `"gold"`, "8 9"},
		{eq, `true`, "10"},
		{ne, `true`, "11"},
		{eq, `false`, "11"},
		{eq, `null`, "12"},
		{ne, `null`, ""},
	} {
		h, dead := jsonHarness(t, jsonFilterOp("f", c.op, c.lit))
		for i, v := range values {
			h.process(jsonRecord(`{"f":`+v+`}`, int64(i)))
		}
		var kept []string
		for _, r := range h.out {
			kept = append(kept, fmt.Sprint(r.Seq))
		}
		if got := strings.Join(kept, " "); got != c.keeps {
			t.Errorf("%s %s kept %q, want %q", c.op, c.lit, got, c.keeps)
		}
		// The values of another type than the literal's are dead letters: 7 numbers, 3
		// strings, 2 booleans, a null, an object and an array.
		others := map[byte]int{'"': 12, 't': 13, 'f': 13, 'n': 14}[c.lit[0]]
		if others == 0 {
			others = 8
		}
		if len(*dead) != others {
			t.Errorf("%s %s: %d dead letters, want %d (the values of another type)", c.op, c.lit, len(*dead), others)
		}
	}
	h, dead := jsonHarness(t, jsonFilterOp("order.amount", gt, `100`))
	for i, v := range []string{`{"order":{"amount":"150"}}`, `{"order":{"amount":{"v":1}}}`, `{"order":{"amount":[1]}}`, `{"order":{"amount":true}}`, `{"order":{"amount":null}}`, `{"order":{}}`, `nope`, `{"order":{"amount":150}}`} {
		h.process(jsonRecord(v, int64(i)))
	}
	got := strings.Join(deadLetters(t, *dead), "\n")
	want := strings.Join([]string{
		"0:the field order.amount is a string; the literal 100 is a number",
		"1:the field order.amount is an object; the literal 100 is a number",
		"2:the field order.amount is an array; the literal 100 is a number",
		"3:the field order.amount is a boolean; the literal 100 is a number",
		"4:the field order.amount is null; the literal 100 is a number",
		"5:lacks the field order.amount",
		"6:not valid JSON",
	}, "\n")
	if got != want || len(h.out) != 1 || h.out[0].Seq != 7 {
		t.Fatalf("dead letters\n%s\nwant\n%s\n(kept %d)", got, want, len(h.out))
	}
}

// TestJSONProject: the listed fields, in their order, under their names (the path when
// empty), each as the value held its JSON text; key, time and lineage stay.
func TestJSONProject(t *testing.T) {
	h, dead := jsonHarness(t, projectOp("amount", "", "user.id", "uid", "tags.1", "second tag", "geo", `quote"d`))
	in := `{"user":{"id":"u\u0041","name":"x"},"amount":1.50e2,"tags":["a","b"],"geo":{"lat": 1.0, "lon":[2]}}`
	h.process(jsonRecord(in, 0), jsonRecord(`{"amount":1}`, 1), jsonRecord(`[]`, 2))
	if len(h.out) != 1 {
		t.Fatalf("emitted %d", len(h.out))
	}
	r := h.out[0]
	want := `{"amount":1.50e2,"uid":"u\u0041","second tag":"b","quote\"d":{"lat": 1.0, "lon":[2]}}`
	if string(r.Value) != want || string(r.Key) != "k" || r.Time != 1000 || r.Origin != 3 {
		t.Fatalf("projected %q (key %q time %d), want %q", r.Value, r.Key, r.Time, want)
	}
	if !json.Valid(r.Value) {
		t.Fatalf("%q is not JSON", r.Value)
	}
	if got := strings.Join(deadLetters(t, *dead), "|"); got != "1:lacks the field user.id|2:lacks the field amount" {
		t.Fatalf("dead letters %s", got)
	}
}

// TestJSONOperatorWithoutDeadLetterOutput: a task with no dead-letter output fails on a dead
// letter, naming the record and the reason (the JobGraph's validation requires the output).
func TestJSONOperatorWithoutDeadLetterOutput(t *testing.T) {
	o, err := New(keyByOp("user"), Info{Vertex: "v"}) // no DeadLetters
	if err != nil {
		t.Fatal(err)
	}
	h := (&harness{t: t}).open(o.(*transformOperator))
	err = h.op.Process(jsonRecord("nope", 5), h.emit)
	if !errors.Is(err, ErrNoDeadLetterOutput) || !strings.Contains(err.Error(), "the record 3/5: not valid JSON") {
		t.Fatalf("Process = %v", err)
	}
}
