package taskmanager

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jmcluster/jmcluster/operator"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestEventGeneratorJobInATask runs two event generator subtasks into a file sink of
// key<TAB>value lines through a real TaskManager; the file holds exactly the events
// operator.GeneratedEvent computes from the seed, each split's in order.
func TestEventGeneratorJobInATask(t *testing.T) {
	jm := startJM(t)
	dir := t.TempDir()
	tm := newTM(t, "tm1", jm, func(c *Config) { c.WorkDir = dir })
	c := client(t, tm)
	const job, count = "events", 300
	cfg := &pb.EventGenerator{Seed: 2026, Count: count, Keys: 20, KeySkew: 1.1, StartMs: 1_700_000_000_000, StepMs: 5, MaxDisorderMs: 40}
	gen := &pb.Operator{Kind: &pb.Operator_EventGenerator{EventGenerator: cfg}}
	sink := &pb.Operator{Kind: &pb.Operator_FileSink{FileSink: &pb.FileSink{Path: "events.txt", Format: pb.FileSinkFormat_FILE_SINK_FORMAT_KEY_TAB_VALUE}}}
	submit(t, c, 1, deploy(job, "sink", 0, 1, "sink-0", 0, sink,
		gate("gen->sink", pipelined, channel("gen->sink", 0, 0, "gen-0", tm.DataAddr()), channel("gen->sink", 1, 0, "gen-1", tm.DataAddr()))))
	for i, a := range []string{"gen-0", "gen-1"} {
		submit(t, c, 1, deploy(job, "gen", int32(i), 2, a, int32(i+1), gen, nil, produces("gen->sink", int32(i), 1, forward, pipelined)))
	}
	for _, a := range []string{"gen-0", "gen-1", "sink-0"} {
		jm.waitState(t, a, finished)
	}
	b, err := os.ReadFile(filepath.Join(dir, "events.txt"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	g := operator.NewGenerator(cfg)
	var want []string
	for split := range int32(2) {
		for i := range int64(count) {
			e := g.Event(split, i)
			want = append(want, e.User+"\t"+string(e.JSON(nil)))
		}
	}
	// The two splits interleave in the file; each split's lines keep their order.
	got := slices.Clone(lines)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("the file has %d lines, want %d; first lines %q", len(lines), len(want), lines[:min(3, len(lines))])
	}
	for split := range int32(2) {
		next := int64(0)
		for _, l := range lines {
			e := g.Event(split, next)
			if next < count && l == e.User+"\t"+string(e.JSON(nil)) {
				next++
			}
		}
		if next != count {
			t.Fatalf("split %d: its events are not in order in the file (%d of %d in order)", split, next, count)
		}
	}
}
