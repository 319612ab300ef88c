package examples

import (
	"io/fs"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestExamplesValidate: every example spec decodes and passes JobGraph validation, except
// invalid.json, which is refused.
func TestExamplesValidate(t *testing.T) {
	names, err := fs.Glob(Specs, "*.json")
	if err != nil || len(names) == 0 {
		t.Fatalf("no example specs: %v", err)
	}
	for _, name := range names {
		b, err := Specs.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		var jg pb.JobGraph
		err = protojson.Unmarshal(b, &jg)
		if err == nil {
			jg.JobId = "0123456789abcdef0123456789abcdef"
			err = graph.Validate(&jg, graph.DefaultLimits())
		}
		if want := name != "invalid.json"; want != (err == nil) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
