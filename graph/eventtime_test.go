package graph

import (
	"strings"
	"testing"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestEventTimePaths: event_time.time_path is field names separated by dots, each non-empty,
// at most MaxTimePathBytes; a refusal names the field, the path and the rule.
func TestEventTimePaths(t *testing.T) {
	for _, c := range []struct {
		path, want string
	}{
		{"ts", ""},
		{"event.time", ""},
		{"items.0.ts", ""},
		{"", ""},
		{".ts", `".ts": field 0 is empty`},
		{"event..time", `"event..time": field 1 is empty`},
		{"ts.", `"ts.": field 1 is empty`},
		{"a\x00b", "holds a NUL byte"},
		{strings.Repeat("a", MaxTimePathBytes+1), "is 257 bytes, over MaxTimePathBytes 256"},
	} {
		op := &pb.Operator{Kind: &pb.Operator_EventGenerator{EventGenerator: &pb.EventGenerator{}}, EventTime: &pb.EventTime{TimePath: c.path}}
		ps := ValidateOperator(op, OperatorEnv{})
		if c.want == "" {
			if len(ps) != 0 {
				t.Errorf("path %q refused: %v", c.path, ps)
			}
			continue
		}
		if len(ps) != 1 || ps[0].Field != "event_time.time_path" || !strings.Contains(ps[0].Message, c.want) {
			t.Errorf("path %q: %v, want one problem of event_time.time_path like %q", c.path, ps, c.want)
		}
	}
}
