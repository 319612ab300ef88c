package operator

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/testkit/operatorcases"
	"github.com/jmcluster/jmcluster/transport/pb"
)

func collect(t *testing.T, op Operator, in []Record) []Record {
	t.Helper()
	var out []Record
	emit := func(r Record) error { out = append(out, r); return nil }
	if err := op.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, r := range in {
		if err := op.Process(r, emit); err != nil {
			t.Fatal(err)
		}
	}
	if err := op.Finish(emit); err != nil {
		t.Fatal(err)
	}
	if err := op.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestTransforms(t *testing.T) {
	in := []Record{NumericRecord(1, 1, 0, 0), NumericRecord(2, 2, 0, 0), NumericRecord(1, 3, 0, 0), NumericRecord(2, 4, 0, 0)}
	cases := []struct {
		name string
		op   *pb.Operator
		want []int64 // values out
	}{
		{"map", &pb.Operator{Kind: &pb.Operator_Map{Map: &pb.MapOperator{Multiply: 10, Add: 1}}}, []int64{11, 21, 31, 41}},
		{"map multiply 0 means 1", &pb.Operator{Kind: &pb.Operator_Map{Map: &pb.MapOperator{Add: 5}}}, []int64{6, 7, 8, 9}},
		{"filter", &pb.Operator{Kind: &pb.Operator_Filter{Filter: &pb.FilterOperator{Modulus: 2, Remainder: 1}}}, []int64{1, 3}},
		{"key_by_sum", &pb.Operator{Kind: &pb.Operator_KeyBySum{KeyBySum: &pb.KeyBySumOperator{}}}, []int64{1, 2, 4, 6}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			op, err := New(c.op, Info{})
			if err != nil {
				t.Fatal(err)
			}
			out := collect(t, op, in)
			if len(out) != len(c.want) {
				t.Fatalf("got %v", out)
			}
			for i, r := range out {
				if num(r.Value) != c.want[i] {
					t.Fatalf("got %v, want values %v", out, c.want)
				}
			}
		})
	}
}

func TestValidate(t *testing.T) {
	unknown := []*pb.Operator{nil, {}}
	for i, op := range unknown {
		if err := Validate(op, Info{}); !errors.Is(err, ErrUnknownOperator) {
			t.Errorf("unknown case %d: %v, want ErrUnknownOperator", i, err)
		}
	}
	bad := []*pb.Operator{
		{Kind: &pb.Operator_Filter{Filter: &pb.FilterOperator{}}},
		{Kind: &pb.Operator_FileSink{FileSink: &pb.FileSink{}}},
		{Kind: &pb.Operator_ChecksumSink{ChecksumSink: &pb.ChecksumSink{}}},
		{Kind: &pb.Operator_FileSink{FileSink: &pb.FileSink{Path: "/some/absolute/path-{subtask}.txt"}}},
		{Kind: &pb.Operator_FileSink{FileSink: &pb.FileSink{Path: "../../escaped-{subtask}.txt"}}},
		{Kind: &pb.Operator_ChecksumSink{ChecksumSink: &pb.ChecksumSink{Path: "a/./b.json"}}},
		{Kind: &pb.Operator_SequenceSource{SequenceSource: &pb.SequenceSource{Count: -1}}},
	}
	for i, op := range bad {
		if err := Validate(op, Info{}); !errors.Is(err, ErrBadConfig) {
			t.Errorf("bad case %d: %v, want ErrBadConfig", i, err)
		}
	}
}

// TestEveryKindHasARuntime: every kind of the catalogue (graph.OperatorKinds) has a runtime
// of its role's shape, and every runtime belongs to a kind.
func TestEveryKindHasARuntime(t *testing.T) {
	for _, k := range graph.OperatorKinds() {
		rt, ok := runtimes[k.Name]
		n := 0
		for _, set := range []bool{rt.source != nil, rt.transform != nil, rt.sink != nil} {
			if set {
				n++
			}
		}
		switch {
		case !ok:
			t.Errorf("kind %q has no runtime", k.Name)
		case n != 1:
			t.Errorf("kind %q has %d constructors, want one", k.Name, n)
		case k.Role == graph.RoleSource && rt.source == nil:
			t.Errorf("source kind %q needs a source constructor", k.Name)
		case k.Role == graph.RoleTransform && rt.transform == nil:
			t.Errorf("transform kind %q needs a transform constructor", k.Name)
		case k.Role == graph.RoleSink && rt.sink == nil:
			t.Errorf("sink kind %q needs a sink constructor", k.Name)
		case rt.keyed && k.Role != graph.RoleTransform:
			t.Errorf("%s kind %q is keyed; only a transform's state is keyed", k.Role, k.Name)
		}
		if _, writes := k.SinkTemplate(&pb.Operator{}); writes != (rt.files != nil) {
			t.Errorf("kind %q: writes a file %v, runtime lists its files %v", k.Name, writes, rt.files != nil)
		}
	}
	for name := range runtimes {
		if _, ok := graph.LookupOperatorKind(name); !ok {
			t.Errorf("runtime %q has no kind in the catalogue", name)
		}
	}
}

// TestEveryGoodCaseBuilds: every configuration the catalogue's table accepts
// (testkit/operatorcases) gets its runtime from NewSource or New.
func TestEveryGoodCaseBuilds(t *testing.T) {
	for _, c := range operatorcases.All() {
		if !c.Good() {
			continue
		}
		d := c.Descriptor(strings.Repeat("a", 32), 0)
		info := Info{Job: d.JobId, Vertex: d.VertexId, AttemptID: d.AttemptId, JobType: d.JobType, WorkDir: t.TempDir()}
		var err error
		if k, _ := graph.OperatorKindOf(c.Op); k.Role == graph.RoleSource {
			_, err = NewSource(c.Op, info)
		} else {
			_, err = New(c.Op, info)
		}
		if err != nil {
			t.Errorf("%s: %v", c.Name, err)
		}
	}
}

func TestSequenceSource(t *testing.T) {
	src, err := NewSource(&pb.Operator{Kind: &pb.Operator_SequenceSource{SequenceSource: &pb.SequenceSource{Start: 5, Count: 7, Keys: 3, RatePerSecond: 1000}}}, Info{Subtask: 2})
	if err != nil {
		t.Fatal(err)
	}
	var out []Record
	if err := src.Run(context.Background(), func(r Record) error { out = append(out, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(out) != 7 {
		t.Fatalf("%d records", len(out))
	}
	for i, r := range out {
		v := int64(5 + i)
		if want := NumericRecord(v%3, v, 2, int64(i)); !reflect.DeepEqual(r, want) {
			t.Fatalf("record %d: %+v", i, r)
		}
	}
	// Unbounded: stops on cancel.
	src, _ = NewSource(&pb.Operator{Kind: &pb.Operator_SequenceSource{SequenceSource: &pb.SequenceSource{}}}, Info{})
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	err = src.Run(ctx, func(Record) error {
		if n++; n == 5000 {
			cancel()
		}
		return nil
	})
	if err == nil || n < 5000 {
		t.Fatalf("unbounded source: n=%d err=%v", n, err)
	}
}

func TestChecksumSink(t *testing.T) {
	dir := t.TempDir()
	op := &pb.Operator{Kind: &pb.Operator_ChecksumSink{ChecksumSink: &pb.ChecksumSink{Path: "{job}-{subtask}.json"}}}
	info := Info{Job: "j", Vertex: "v", Subtask: 1, AttemptID: "a1", WorkDir: dir}
	s, err := New(op, info)
	if err != nil {
		t.Fatal(err)
	}
	// seq 0,1,3 (a gap), 3 (a duplicate) from origin 0; 0 from origin 1.
	collect(t, s, []Record{NumericRecord(1, 10, 0, 0), NumericRecord(2, 20, 0, 1), NumericRecord(1, 30, 0, 3), NumericRecord(1, 30, 0, 3), NumericRecord(2, 5, 1, 0)})
	path := filepath.Join(dir, "j-1.json")
	c, err := ReadChecksum(path)
	if err != nil {
		t.Fatal(err)
	}
	o := c.Origins["0"]
	if c.Count != 5 || c.Sum != 95 || !c.Finished || c.Keys["1"] != (KeyStat{3, 70}) || c.Keys["2"] != (KeyStat{2, 25}) ||
		o != (OriginStat{Count: 4, FirstSeq: 0, LastSeq: 3, Gaps: 1, Duplicates: 1}) || c.Origins["1"].Count != 1 {
		t.Fatalf("checksum: %+v", c)
	}
	// A restarted attempt continues the file: a source restarting at seq 0 shows as duplicates.
	info.AttemptID = "a2"
	s, _ = New(op, info)
	collect(t, s, []Record{NumericRecord(1, 10, 0, 0)})
	c, _ = ReadChecksum(path)
	if c.Count != 6 || c.Origins["0"].Duplicates != 2 || c.AttemptID != "a2" || strings.Join(c.Attempts, ",") != "a1,a2" {
		t.Fatalf("restarted checksum: %+v", c)
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Fatalf("temp file left behind: %v", err)
	}
}

func TestFileSink(t *testing.T) {
	dir := t.TempDir()
	op := &pb.Operator{Kind: &pb.Operator_FileSink{FileSink: &pb.FileSink{Path: "out/{subtask}-{attempt}.txt"}}}
	s, err := New(op, Info{Subtask: 3, AttemptID: "x", WorkDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	collect(t, s, []Record{NumericRecord(1, 2, 0, 0), NumericRecord(3, 4, 0, 0)})
	b, err := os.ReadFile(filepath.Join(dir, "out", "3-x.txt"))
	if err != nil || string(b) != "1 2\n3 4\n" {
		t.Fatalf("file sink wrote %q (%v)", b, err)
	}
}

// TestSinksStayInsideTheWorkDir: a sink never writes outside its work directory, whether the
// path escapes lexically (refused by New, before anything is opened) or through a symlink in
// the work directory that leads out (refused by the os.Root the sink opens through).
func TestSinksStayInsideTheWorkDir(t *testing.T) {
	base := t.TempDir()
	work, outside := filepath.Join(base, "work"), filepath.Join(base, "outside")
	for _, d := range []string{work, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(work, "abs-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../outside", filepath.Join(work, "rel-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "victim.txt"), []byte("keep\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../outside/victim.txt", filepath.Join(work, "victim.txt")); err != nil {
		t.Fatal(err)
	}
	fileOp := func(p string) *pb.Operator {
		return &pb.Operator{Kind: &pb.Operator_FileSink{FileSink: &pb.FileSink{Path: p}}}
	}
	sumOp := func(p string) *pb.Operator {
		return &pb.Operator{Kind: &pb.Operator_ChecksumSink{ChecksumSink: &pb.ChecksumSink{Path: p}}}
	}
	info := Info{Job: "j", Vertex: "v", Subtask: 0, AttemptID: "a", WorkDir: work}

	// Refused by New: nothing is opened.
	for _, op := range []*pb.Operator{fileOp("/some/absolute/path-{subtask}.txt"), fileOp("../../escaped-{subtask}.txt"), sumOp("../x.json")} {
		if _, err := New(op, info); !errors.Is(err, ErrBadConfig) {
			t.Errorf("New(%v) = %v, want ErrBadConfig", op, err)
		}
	}
	// A vertex or attempt id that makes the expansion escape is refused too.
	esc := info
	esc.Vertex = ".."
	if _, err := New(fileOp("{vertex}/x.txt"), esc); !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), `expands to "../x.txt"`) {
		t.Errorf("escaping expansion: %v", err)
	}
	// Accepted by New (a clean relative path), refused by Open: a symlink leads out.
	for _, op := range []*pb.Operator{fileOp("abs-link/x-{subtask}.txt"), fileOp("rel-link/x-{subtask}.txt"), fileOp("victim.txt"),
		sumOp("abs-link/x-{subtask}.json"), sumOp("rel-link/sub/x.json")} {
		s, err := New(op, info)
		if err != nil {
			t.Fatalf("New(%v): %v", op, err)
		}
		if err := s.Open(context.Background()); err == nil {
			t.Errorf("Open(%v) through a symlink that leads out succeeded", op)
		}
		_ = s.Close()
	}
	ents, err := os.ReadDir(outside)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != "victim.txt" {
		t.Fatalf("written outside the work dir: %v", ents)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "victim.txt")); string(b) != "keep\n" {
		t.Fatalf("victim file changed: %q", b)
	}
}
