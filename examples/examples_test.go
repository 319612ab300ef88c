package examples

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// wasmModules are the modules the examples name by path, relative to the spec (`jmnode job
// submit` uploads each and puts its sha256 in the spec), each built by the Makefile's
// wasm-examples target into bin/.
var wasmModules = map[string]string{
	"../bin/wordsplit.wasm": "examples/wasm/wordsplit",
	"../bin/fraud.wasm":     "examples/wasm/fraud",
}

// resolveArtifacts does what `jmnode job submit` does with a wasm operator's artifact given as
// a path: the path becomes a sha256 (here a placeholder: the module need not be built for
// the spec to validate). A path must be one the Makefile builds.
func resolveArtifacts(t *testing.T, name string, jg *pb.JobGraph) {
	for _, v := range jg.Vertices {
		w := v.GetOperator().GetWasm()
		if w == nil {
			continue
		}
		if _, ok := wasmModules[w.Artifact]; !ok {
			t.Errorf("%s: vertex %s: artifact %q is not a module the Makefile builds (%v)", name, v.Id, w.Artifact, wasmModules)
		}
		w.Artifact = strings.Repeat("ab", 32)
	}
}

// TestExamplesValidate: every example spec decodes and passes JobGraph validation (a wasm
// artifact given as a path resolved as `jmnode job submit` does), except invalid.json, which
// is refused.
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
			resolveArtifacts(t, name, &jg)
			jg.JobId = "0123456789abcdef0123456789abcdef"
			err = graph.Validate(&jg, graph.DefaultLimits())
		}
		if want := name != "invalid.json"; want != (err == nil) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestExamplesMeetTheRecordRules: the rules graph.proto's comments give the records operators
// hold for each example, whatever graph.Validate checks of them yet: a job with a vertex that
// can send dead letters has a dead-letter sink; JSON paths are not empty; a window has a kind
// and the lengths its kind uses (size_ms a multiple of slide_ms); and in a STREAMING job with
// a window every source has event_time, so that windows fire before the input ends.
func TestExamplesMeetTheRecordRules(t *testing.T) {
	names, err := fs.Glob(Specs, "*.json")
	if err != nil {
		t.Fatal(err)
	}
	windows := 0
	for _, name := range names {
		if name == "invalid.json" {
			continue
		}
		b, err := Specs.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		var jg pb.JobGraph
		if err := protojson.Unmarshal(b, &jg); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		hasWindow, sourcesWithoutTime := false, []string{}
		for _, v := range jg.Vertices {
			op := v.Operator
			k, _ := graph.OperatorKindOf(op)
			if k.DeadLetters(op) && jg.DeadLetters == nil {
				t.Errorf("%s: vertex %s (%s) can send dead letters: the job needs dead_letters", name, v.Id, k.Name)
			}
			if k.Role == graph.RoleSource && op.GetEventTime() == nil {
				sourcesWithoutTime = append(sourcesWithoutTime, v.Id)
			}
			paths := map[string]string{"json_key_by": op.GetJsonKeyBy().GetPath(), "json_filter": op.GetJsonFilter().GetPath()}
			if p, ok := paths[k.Name]; ok && p == "" {
				t.Errorf("%s: vertex %s: %s.path is empty", name, v.Id, k.Name)
			}
			for i, f := range op.GetJsonProject().GetFields() {
				if f.GetPath() == "" {
					t.Errorf("%s: vertex %s: json_project.fields[%d].path is empty", name, v.Id, i)
				}
			}
			w := op.GetWindow()
			if w == nil {
				continue
			}
			hasWindow = true
			switch w.Kind {
			case pb.WindowKind_WINDOW_KIND_TUMBLING:
				if w.SizeMs <= 0 {
					t.Errorf("%s: vertex %s: a TUMBLING window needs size_ms > 0, got %d", name, v.Id, w.SizeMs)
				}
			case pb.WindowKind_WINDOW_KIND_SLIDING:
				if w.SizeMs <= 0 || w.SlideMs <= 0 || w.SizeMs%w.SlideMs != 0 {
					t.Errorf("%s: vertex %s: a SLIDING window needs size_ms a multiple of slide_ms > 0, got %d and %d", name, v.Id, w.SizeMs, w.SlideMs)
				}
			case pb.WindowKind_WINDOW_KIND_SESSION:
				if w.GapMs <= 0 {
					t.Errorf("%s: vertex %s: a SESSION window needs gap_ms > 0, got %d", name, v.Id, w.GapMs)
				}
			default:
				t.Errorf("%s: vertex %s: window.kind %v", name, v.Id, w.Kind)
			}
		}
		if jg.DeadLetters != nil {
			if k, ok := graph.OperatorKindOf(jg.DeadLetters.Operator); !ok || k.Role != graph.RoleSink {
				t.Errorf("%s: dead_letters.operator is not a sink", name)
			}
		}
		if hasWindow {
			windows++
			if jg.Type == pb.JobType_JOB_TYPE_STREAMING && len(sourcesWithoutTime) > 0 {
				t.Errorf("%s: a STREAMING job with a window, and sources without event_time: %v", name, sourcesWithoutTime)
			}
		}
	}
	if windows == 0 {
		t.Errorf("no example has a window")
	}
}

// TestWasmExamplesAreBuilt: every module an example names is a package of examples/wasm, and
// the Makefile's wasm-examples target builds it to that path.
func TestWasmExamplesAreBuilt(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join("..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	for out, pkg := range wasmModules {
		if _, err := os.Stat(filepath.Join("..", pkg, "main.go")); err != nil {
			t.Errorf("%s: %v", pkg, err)
		}
		if !strings.Contains(string(mk), strings.TrimPrefix(out, "../")) || !strings.Contains(string(mk), "./"+pkg) {
			t.Errorf("the Makefile does not build %s from ./%s", out, pkg)
		}
	}
}
