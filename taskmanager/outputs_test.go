package taskmanager

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jmcluster/jmcluster/operator"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestDeadLetterPartitionGetsTheDeadLetters: a json_key_by task whose descriptor has a
// records partition and a dead_letters partition, fed by an event generator (JSON) and a
// sequence source (8-byte numbers: not JSON), through a real TaskManager. Every event goes,
// keyed by its user, to the records partition only; every number goes, as a dead letter
// saying "not valid JSON", to the dead_letters partition only; the task counts them and
// finishes.
func TestDeadLetterPartitionGetsTheDeadLetters(t *testing.T) {
	jm := startJM(t)
	dir := t.TempDir()
	tm := newTM(t, "tm1", jm, func(c *Config) { c.WorkDir, c.Slots = dir, 5 })
	c := client(t, tm)
	const job, events, numbers = "dl", 200, 150
	gen := &pb.EventGenerator{Seed: 36, Count: events, Keys: 10, StartMs: 1_700_000_000_000, StepMs: 5}
	keyBy := &pb.Operator{Kind: &pb.Operator_JsonKeyBy{JsonKeyBy: &pb.JsonKeyBy{Path: "user"}}}
	fileSink := func(p string, f pb.FileSinkFormat) *pb.Operator {
		return &pb.Operator{Kind: &pb.Operator_FileSink{FileSink: &pb.FileSink{Path: p, Format: f}}}
	}
	dead := produces("key->dead-letters", 0, 1, allToAll, pipelined)
	dead.DeadLetters = true
	submit(t, c, 1, deploy(job, "out", 0, 1, "out-0", 0, fileSink("out.txt", pb.FileSinkFormat_FILE_SINK_FORMAT_KEY_TAB_VALUE),
		gate("key->out", pipelined, channel("key->out", 0, 0, "key-0", tm.DataAddr()))))
	submit(t, c, 1, deploy(job, "dead-letters", 0, 1, "dead-0", 1, fileSink("dead.jsonl", pb.FileSinkFormat_FILE_SINK_FORMAT_VALUE),
		gate("key->dead-letters", pipelined, channel("key->dead-letters", 0, 0, "key-0", tm.DataAddr()))))
	keyTask := deploy(job, "key", 0, 1, "key-0", 2, keyBy, nil, produces("key->out", 0, 1, forward, pipelined), dead)
	keyTask.Inputs = append(gate("gen->key", pipelined, channel("gen->key", 0, 0, "gen-0", tm.DataAddr())),
		gate("seq->key", pipelined, channel("seq->key", 0, 0, "seq-0", tm.DataAddr()))...)
	submit(t, c, 1, keyTask)
	submit(t, c, 1, deploy(job, "gen", 0, 1, "gen-0", 3, &pb.Operator{Kind: &pb.Operator_EventGenerator{EventGenerator: gen}}, nil,
		produces("gen->key", 0, 1, forward, pipelined)))
	submit(t, c, 1, source(job, "seq", 0, 1, "seq-0", 4, &pb.SequenceSource{Count: numbers}, produces("seq->key", 0, 1, forward, pipelined)))
	for _, a := range []string{"gen-0", "seq-0", "key-0", "out-0", "dead-0"} {
		jm.waitState(t, a, finished)
	}

	lines := func(name string) []string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	}
	g := operator.NewGenerator(gen)
	var want []string
	for i := range int64(events) {
		e := g.Event(0, i)
		want = append(want, e.User+"\t"+string(e.JSON(nil)))
	}
	got := lines("out.txt")
	if !slices.Equal(got, want) {
		t.Fatalf("out.txt has %d lines, want the %d events keyed by user; first %q", len(got), len(want), got[:min(2, len(got))])
	}
	seen := map[int64]bool{}
	for _, l := range lines("dead.jsonl") {
		var d operator.DeadLetter
		if err := json.Unmarshal([]byte(l), &d); err != nil {
			t.Fatalf("dead letter %q: %v", l, err)
		}
		n, _ := operator.Int64Of(append([]byte(d.Value), d.ValueBase64...)) // base64 when not UTF-8
		if d.Reason != "not valid JSON" || d.Vertex != "key" || d.Origin != 0 || n != d.Seq || seen[d.Seq] {
			t.Fatalf("dead letter %+v (seen before: %v)", d, seen[d.Seq])
		}
		seen[d.Seq] = true
	}
	if len(seen) != numbers {
		t.Fatalf("%d dead letters, want %d", len(seen), numbers)
	}
	tm.mu.Lock()
	kt := tm.table.tasks["key-0"]
	tm.mu.Unlock()
	if n, out := kt.deadLetters.Load(), kt.recordsOut.Load(); n != numbers || out != events {
		t.Fatalf("the task counted %d dead letters and %d records out, want %d and %d", n, out, numbers, events)
	}
}

// TestDeadLetterOverTheMaximumRecordSize: a dead letter too large for MaxRecordSize is sent
// without the record's key and value, its reason saying so, rather than failing the task.
func TestDeadLetterOverTheMaximumRecordSize(t *testing.T) {
	r := operator.Record{Key: []byte("k"), Value: []byte(strings.Repeat("x", 600)), Time: operator.NoTimestamp, Origin: 2, Seq: 9}
	d := operator.DeadLetterRecord(operator.Info{Vertex: "v"}, r, "not valid JSON")
	got, err := trimDeadLetter(d, 512)
	if err != nil {
		t.Fatal(err)
	}
	var dl operator.DeadLetter
	if err := json.Unmarshal(got.Value, &dl); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("not valid JSON (the record's key and value are left out: its dead letter of %d bytes is over the TaskManager's maximum record size 512 bytes", d.Size())
	if !strings.HasPrefix(dl.Reason, want) || dl.Value != "" || dl.Key != "" || dl.Seq != 9 || dl.Origin != 2 || string(got.Key) != "k" || got.Size() > 512 {
		t.Fatalf("trimmed to %q (key %q)", got.Value, got.Key)
	}
	if _, err := trimDeadLetter(d, 40); err == nil || !strings.Contains(err.Error(), "record too large") {
		t.Fatalf("trim to 40 bytes: %v", err)
	}
}

// TestDeadLetterWithoutADeadLetterPartitionFailsTheTask: a json_key_by task deployed without
// a dead_letters partition (a descriptor the JobMaster never makes) fails on its first dead
// letter, naming the record and its reason.
func TestDeadLetterWithoutADeadLetterPartitionFailsTheTask(t *testing.T) {
	jm := startJM(t)
	tm := newTM(t, "tm1", jm, func(c *Config) { c.WorkDir = t.TempDir() })
	c := client(t, tm)
	keyBy := &pb.Operator{Kind: &pb.Operator_JsonKeyBy{JsonKeyBy: &pb.JsonKeyBy{Path: "user"}}}
	submit(t, c, 1, deploy("nodl", "key", 0, 1, "key-0", 0, keyBy,
		gate("seq->key", pipelined, channel("seq->key", 0, 0, "seq-0", tm.DataAddr()))))
	submit(t, c, 1, source("nodl", "seq", 0, 1, "seq-0", 1, &pb.SequenceSource{Count: 3}, produces("seq->key", 0, 1, forward, pipelined)))
	cause := jm.waitState(t, "key-0", failed)
	if !strings.Contains(cause, "the job has no dead-letter output (dead_letters in the job spec); the record 0/0: not valid JSON") {
		t.Fatalf("cause %q", cause)
	}
}
