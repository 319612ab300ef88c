package windowcheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jmcluster/jmcluster/operator"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// oneUser is 5 events per split of the one user "user-0000", at 0, 1000, ..., 4000 ms, each of
// amount 1.
var oneUser = &pb.EventGenerator{Seed: 1, Count: 5, Keys: 1, StepMs: 1000, MaxAmount: 1}

func results(t *testing.T, got []Result, want ...string) {
	t.Helper()
	var g []string
	for _, r := range got {
		g = append(g, r.String())
	}
	if strings.Join(g, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(g, "\n"), strings.Join(want, "\n"))
	}
}

// TestExpectedByHand: the reference's windows over events whose results are known by hand
// (two splits of the same five events).
func TestExpectedByHand(t *testing.T) {
	results(t, Expected(oneUser, 2, &pb.WindowOperator{Kind: pb.WindowKind_WINDOW_KIND_TUMBLING, SizeMs: 2000, Field: "amount"}),
		`{"key":"user-0000","start":0,"end":2000,"count":4,"sum":4,"min":1,"max":1,"avg":1}`,
		`{"key":"user-0000","start":2000,"end":4000,"count":4,"sum":4,"min":1,"max":1,"avg":1}`,
		`{"key":"user-0000","start":4000,"end":6000,"count":2,"sum":2,"min":1,"max":1,"avg":1}`)
	results(t, Expected(oneUser, 2, &pb.WindowOperator{Kind: pb.WindowKind_WINDOW_KIND_SLIDING, SizeMs: 2000, SlideMs: 1000, Field: "ts"}),
		`{"key":"user-0000","start":-1000,"end":1000,"count":2}`, // sum, min, max and avg 0
		`{"key":"user-0000","start":0,"end":2000,"count":4,"sum":2000,"max":1000,"avg":500}`,
		`{"key":"user-0000","start":1000,"end":3000,"count":4,"sum":6000,"min":1000,"max":2000,"avg":1500}`,
		`{"key":"user-0000","start":2000,"end":4000,"count":4,"sum":10000,"min":2000,"max":3000,"avg":2500}`,
		`{"key":"user-0000","start":3000,"end":5000,"count":4,"sum":14000,"min":3000,"max":4000,"avg":3500}`,
		`{"key":"user-0000","start":4000,"end":6000,"count":2,"sum":8000,"min":4000,"max":4000,"avg":4000}`)
	results(t, Expected(oneUser, 1, &pb.WindowOperator{Kind: pb.WindowKind_WINDOW_KIND_SESSION, GapMs: 1001}),
		`{"key":"user-0000","start":0,"end":5001,"count":5}`)
	results(t, Expected(oneUser, 1, &pb.WindowOperator{Kind: pb.WindowKind_WINDOW_KIND_SESSION, GapMs: 1000}), // exactly gap apart: apart
		`{"key":"user-0000","start":0,"end":1000,"count":1}`,
		`{"key":"user-0000","start":1000,"end":2000,"count":1}`,
		`{"key":"user-0000","start":2000,"end":3000,"count":1}`,
		`{"key":"user-0000","start":3000,"end":4000,"count":1}`,
		`{"key":"user-0000","start":4000,"end":5000,"count":1}`)
}

// TestExpectedAgreesWithTheOperator: the window operator, given every generated event of
// two splits out of order (no watermark: nothing is late; the end of input fires every
// window), emits exactly the reference's results, for each kind of window.
func TestExpectedAgreesWithTheOperator(t *testing.T) {
	gen := &pb.EventGenerator{Seed: 42, Count: 3000, Keys: 40, KeySkew: 1.1, StartMs: 1_700_000_000_000, StepMs: 13, MaxDisorderMs: 800, MaxAmount: 50}
	for _, w := range []*pb.WindowOperator{
		{Kind: pb.WindowKind_WINDOW_KIND_TUMBLING, SizeMs: 5000, Field: "amount"},
		{Kind: pb.WindowKind_WINDOW_KIND_SLIDING, SizeMs: 6000, SlideMs: 2000, Field: "amount"},
		{Kind: pb.WindowKind_WINDOW_KIND_SESSION, GapMs: 400, Field: "amount"},
		{Kind: pb.WindowKind_WINDOW_KIND_SESSION, GapMs: 250},
	} {
		t.Run(w.GetKind().String(), func(t *testing.T) {
			o, err := operator.New(&pb.Operator{Kind: &pb.Operator_Window{Window: w}}, operator.Info{Vertex: "w"})
			if err != nil {
				t.Fatal(err)
			}
			var lines []byte
			emit := func(r operator.Record) error { lines = append(append(lines, r.Value...), '\n'); return nil }
			g := operator.NewGenerator(gen)
			for s := range int32(2) {
				for i := range gen.Count {
					if err := o.Process(g.Event(s, i).Record(s, i), emit); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := o.Finish(emit); err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "out.part-end"), lines, 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := ReadCommitted(dir, "out")
			if err != nil {
				t.Fatal(err)
			}
			want := Expected(gen, 2, w)
			if len(want) < 100 {
				t.Fatalf("only %d windows", len(want))
			}
			if err := Compare(want, got); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestReadCommitted: the part files of every sink the pattern matches, in name order; a
// temporary file is not read; a line that is not a window result is an error naming it.
func TestReadCommitted(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("win/out-1.txt.part-0000000002", `{"key":"b","start":0,"end":10,"count":1}`+"\n")
	write("win/out-0.txt.part-0000000001", `{"key":"a","start":0,"end":10,"count":2,"sum":3,"min":1,"max":2,"avg":1.5}`+"\n"+`{"key":"a","start":0,"end":10,"count":3,"sum":4,"min":1,"max":2,"avg":1.3333333333333333,"update":1}`+"\n")
	write("win/out-0.txt.part-end", `{"key":"c","start":-10,"end":0,"count":1}`+"\n")
	write("win/out-0.txt.part-0000000003.tmp", "not committed\n")
	write("win/other.txt.part-0000000001", "not matched\n")
	got, err := ReadCommitted(dir, "win/out-*.txt")
	if err != nil {
		t.Fatal(err)
	}
	results(t, got,
		`{"key":"a","start":0,"end":10,"count":2,"sum":3,"min":1,"max":2,"avg":1.5}`,
		`{"key":"a","start":0,"end":10,"count":3,"sum":4,"min":1,"max":2,"avg":1.3333333333333333,"update":1}`,
		`{"key":"c","start":-10,"end":0,"count":1}`,
		`{"key":"b","start":0,"end":10,"count":1}`)
	write("win/out-2.txt.part-end", `{"key":"d","start":0,"end":10,"count":1,"color":"red"}`+"\n")
	if _, err := ReadCommitted(dir, "win/out-*.txt"); err == nil || !strings.Contains(err.Error(), "out-2.txt.part-end line 1") {
		t.Fatalf("a line with an unknown field: %v", err)
	}
}

// TestCompareNamesEveryDifference: a duplicated, a missing, an unexpected and a wrong result
// are each counted and named; equal lists agree.
func TestCompareNamesEveryDifference(t *testing.T) {
	want := []Result{
		{Key: "a", Start: 0, End: 10, Count: 2, Sum: 3, Min: 1, Max: 2, Avg: 1.5},
		{Key: "a", Start: 10, End: 20, Count: 1, Sum: 5, Min: 5, Max: 5, Avg: 5},
		{Key: "b", Start: 0, End: 10, Count: 1, Sum: 1, Min: 1, Max: 1, Avg: 1},
	}
	if err := Compare(want, want); err != nil {
		t.Fatalf("equal: %v", err)
	}
	got := []Result{
		want[0], want[0], // duplicated
		{Key: "b", Start: 0, End: 10, Count: 1, Sum: 2, Min: 2, Max: 2, Avg: 2}, // wrong
		{Key: "c", Start: 0, End: 10, Count: 1},                                 // unexpected
		// a [10, 20) missing
	}
	err := Compare(want, got)
	if err == nil {
		t.Fatal("no difference found")
	}
	for _, s := range []string{
		"(3 expected, 4 got): 1 missing, 1 unexpected, 1 duplicated, 1 wrong",
		"missing: a [10, 20)",
		`unexpected: {"key":"c","start":0,"end":10,"count":1}`,
		"duplicated: a [0, 10)",
		`wrong: got {"key":"b","start":0,"end":10,"count":1,"sum":2,"min":2,"max":2,"avg":2}, want {"key":"b","start":0,"end":10,"count":1,"sum":1,"min":1,"max":1,"avg":1}`,
	} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%v\ndoes not say %q", err, s)
		}
	}
	// An update of a window the reference has once is a duplicate.
	if err := Compare(want[:1], []Result{want[0], {Key: "a", Start: 0, End: 10, Count: 3, Update: 1}}); err == nil || !strings.Contains(err.Error(), "1 duplicated") {
		t.Fatalf("an update: %v", err)
	}
}
