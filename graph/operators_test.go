package graph

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jmcluster/jmcluster/testkit/operatorcases"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestOperatorCatalogueMatchesTheProto: the catalogue has one entry per field of the Operator
// oneof, in field-number order, with the field's name; so a kind added to graph.proto without
// a catalogue entry fails here (and is refused by validation until it has one).
func TestOperatorCatalogueMatchesTheProto(t *testing.T) {
	fields := operatorOneof.Fields()
	kinds := OperatorKinds()
	if fields.Len() != len(kinds) {
		t.Fatalf("Operator.kind has %d fields, the catalogue %d kinds", fields.Len(), len(kinds))
	}
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if string(fd.Name()) != kinds[i].Name {
			t.Errorf("kind %d: proto field %q (number %d), catalogue %q", i, fd.Name(), fd.Number(), kinds[i].Name)
		}
		if i > 0 && fields.Get(i-1).Number() >= fd.Number() {
			t.Errorf("proto fields out of number order at %q", fd.Name())
		}
		switch kinds[i].Role {
		case RoleSource, RoleTransform, RoleSink:
		default:
			t.Errorf("kind %q has no role", kinds[i].Name)
		}
		_, writes := kinds[i].SinkTemplate(&pb.Operator{})
		if writes && kinds[i].Role != RoleSink {
			t.Errorf("kind %q writes a file but is a %s", kinds[i].Name, kinds[i].Role)
		}
	}
}

// TestEveryOperatorKind is the operator catalogue's table test: every kind with good and bad
// configurations and wirings (testkit/operatorcases), each tried as a vertex of a JobGraph.
// A good case passes Validate; a bad one gets exactly one problem, on that vertex, naming the
// field and the value. The TaskManager runs the same table (taskmanager's
// TestTMRefusesExactlyWhatTheJobGraphRefuses).
func TestEveryOperatorKind(t *testing.T) {
	good, bad := map[string]int{}, map[string]int{}
	for _, c := range operatorcases.All() {
		if c.Kind != "" {
			if _, ok := LookupOperatorKind(c.Kind); !ok {
				t.Errorf("%s: kind %q is not in the catalogue", c.Name, c.Kind)
			}
		}
		if c.Good() {
			good[c.Kind]++
		} else {
			bad[c.Kind]++
		}
		t.Run(c.Name, func(t *testing.T) {
			err := Validate(c.JobGraph(), DefaultLimits())
			got := vertexProblems(t, err, operatorcases.VertexIndex)
			if c.Good() {
				if err != nil {
					t.Fatalf("refused a good case: %v", err)
				}
				return
			}
			if len(got) != 1 || got[0].Field != c.Field || !strings.Contains(got[0].Message, c.Msg) {
				t.Fatalf("problems %q, want exactly one like %q", got, c.Want())
			}
		})
	}
	for _, k := range OperatorKinds() {
		if good[k.Name] == 0 || bad[k.Name] == 0 {
			t.Errorf("kind %q has %d good and %d bad cases; it needs both", k.Name, good[k.Name], bad[k.Name])
		}
	}
}

// vertexProblems returns the problems of err with their fields relative to vertices[i] (""
// for the vertex itself), and fails on a problem anywhere else.
func vertexProblems(t *testing.T, err error, i int) []Problem {
	t.Helper()
	if err == nil {
		return nil
	}
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Validate = %v, want *ValidationError", err)
	}
	prefix := fmt.Sprintf("vertices[%d]", i)
	var out []Problem
	for _, p := range ve.Problems {
		rel, ok := strings.CutPrefix(p.Field, prefix)
		if !ok || (rel != "" && !strings.HasPrefix(rel, ".")) {
			t.Fatalf("problem outside the case's vertex: %s", p)
		}
		out = append(out, Problem{Field: strings.TrimPrefix(rel, "."), Message: p.Message})
	}
	return out
}

// TestWiringProblems: the role rules JobGraph validation and the TaskManager share.
func TestWiringProblems(t *testing.T) {
	cases := []struct {
		role            OperatorRole
		inputs, outputs int
		want            []string
	}{
		{RoleSource, 0, 0, nil},
		{RoleSource, 0, 2, nil},
		{RoleSource, 1, 1, []string{`source vertex "v" must have no inputs`}},
		{RoleTransform, 1, 0, nil},
		{RoleTransform, 2, 3, nil},
		{RoleTransform, 0, 1, []string{`vertex "v" has no inputs`}},
		{RoleSink, 1, 0, nil},
		{RoleSink, 0, 0, []string{`vertex "v" has no inputs`}},
		{RoleSink, 1, 1, []string{`sink vertex "v" must have no outgoing edges`}},
		{RoleSink, 0, 1, []string{`vertex "v" has no inputs`, `sink vertex "v" must have no outgoing edges`}},
		{0, 0, 1, nil},
	}
	for _, c := range cases {
		got := WiringProblems("v", c.role, c.inputs, c.outputs)
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s with %d inputs and %d outputs: %q, want %q", c.role, c.inputs, c.outputs, got, c.want)
		}
	}
}
