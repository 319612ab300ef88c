package jobmaster_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/operator"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// committedLines is the committed output of a checkpointed file sink subtask whose path is
// name: its part files in name order, each part taken once whichever TaskManager's work dir
// holds it (a part is the same bytes wherever it was committed), as lines.
func committedLines(t *testing.T, c *testcluster.Cluster, name string) []string {
	t.Helper()
	parts := map[string]string{}
	for _, tm := range c.TMs {
		names, err := filepath.Glob(filepath.Join(tm.WorkDir, name+".part-*"))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			b, err := os.ReadFile(n)
			if err != nil {
				t.Fatal(err)
			}
			parts[filepath.Base(n)] = string(b)
		}
	}
	keys := make([]string, 0, len(parts))
	for k := range parts {
		keys = append(keys, k)
	}
	sort.Strings(keys) // part-<10 digits> in id order, then part-end
	var lines []string
	for _, k := range keys {
		lines = append(lines, strings.Split(strings.TrimSuffix(parts[k], "\n"), "\n")...)
	}
	return lines
}

// vertexDeadLetters is the leader's jmcluster_vertex_dead_letters gauge of the job, by vertex.
func vertexDeadLetters(t *testing.T, c *testcluster.Cluster, jobID string) map[string]float64 {
	t.Helper()
	mfs, err := c.Leader().A.Metrics.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "jmcluster_vertex_dead_letters" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["job"] == jobID {
				seen[labels["vertex"]] = m.GetGauge().GetValue()
			}
		}
	}
	return seen
}

// TestInvalidRecordsLandInTheDeadLetterOutput: records with invalid JSON or a missing field
// land in the dead-letter output with their reason, counted in a metric; the job keeps
// running. A streaming job checkpointed every 200 ms on two TaskManagers: a sequence source
// (8-byte numbers: not JSON) and an event generator feed a json_key_by on "user" whose records
// go to a file sink and to a json_filter on a field no event has ("coupon"); the dead letters
// go to a file sink of their values (dead_letters). While the bad records flow the job stays
// RUNNING with no restart, and the leader's jmcluster_vertex_dead_letters of json_key_by
// reaches exactly the source's count while it runs. When the job finished, the committed
// dead-letter output holds exactly one dead letter per bad record (by vertex, origin and seq)
// with its reason, and the committed good output every event once, keyed by its user.
func TestInvalidRecordsLandInTheDeadLetterOutput(t *testing.T) {
	const numbers, events = 300, 1000 // the numbers flow for ~2 s, the events for ~10 s
	c := testcluster.New(t, testcluster.Options{JMs: 3, TMs: 2, Slots: 8, Checkpoints: true})
	gen := &pb.EventGenerator{Seed: 36, Count: events, Keys: 50, StartMs: 1_700_000_000_000, StepMs: 10, RatePerSecond: 100}
	edge := func(s, d string, dist pb.Distribution) *pb.JobEdge {
		return &pb.JobEdge{Source: s, Target: d, Distribution: dist, ResultType: pb.ResultType_RESULT_TYPE_PIPELINED}
	}
	const fwd, all = pb.Distribution_DISTRIBUTION_FORWARD, pb.Distribution_DISTRIBUTION_ALL_TO_ALL
	fileSink := func(p string, f pb.FileSinkFormat) *pb.Operator {
		return &pb.Operator{Kind: &pb.Operator_FileSink{FileSink: &pb.FileSink{Path: p, Format: f}}}
	}
	jg := &pb.JobGraph{
		Name: "dead letters", Type: pb.JobType_JOB_TYPE_STREAMING,
		Vertices: []*pb.JobVertex{
			{Id: "numbers", Parallelism: 1, Operator: &pb.Operator{Kind: &pb.Operator_SequenceSource{SequenceSource: &pb.SequenceSource{Count: numbers, RatePerSecond: 150, Keys: 7}}}},
			{Id: "events", Parallelism: 2, Operator: &pb.Operator{Kind: &pb.Operator_EventGenerator{EventGenerator: gen}}},
			{Id: "key", Parallelism: 2, Operator: &pb.Operator{Kind: &pb.Operator_JsonKeyBy{JsonKeyBy: &pb.JsonKeyBy{Path: "user"}}}},
			{Id: "out", Parallelism: 2, Operator: fileSink("out-{subtask}.txt", pb.FileSinkFormat_FILE_SINK_FORMAT_KEY_TAB_VALUE)},
			{Id: "coupons", Parallelism: 2, Operator: &pb.Operator{Kind: &pb.Operator_JsonFilter{JsonFilter: &pb.JsonFilter{Path: "coupon", Op: pb.CompareOp_COMPARE_OP_EQUAL, Value: `"SPRING"`}}}},
			{Id: "kept", Parallelism: 1, Operator: &pb.Operator{Kind: &pb.Operator_LogSink{LogSink: &pb.LogSink{}}}},
		},
		Edges:            []*pb.JobEdge{edge("numbers", "key", all), edge("events", "key", fwd), edge("key", "out", fwd), edge("key", "coupons", fwd), edge("coupons", "kept", all)},
		DeadLetters:      &pb.DeadLetters{Operator: fileSink("dead-{subtask}.jsonl", pb.FileSinkFormat_FILE_SINK_FORMAT_VALUE)},
		CheckpointConfig: &pb.CheckpointConfig{IntervalMs: 200},
		RestartStrategy:  &pb.RestartStrategy{Kind: pb.RestartKind_RESTART_KIND_FIXED_DELAY, Attempts: 3, DelayMs: 100},
	}
	id := c.Submit(jg)

	// The committed graph has the dead-letter vertex, fed by the two JSON operators.
	rec := waitAllRunning(t, c, id)
	var fed []string
	for _, e := range rec.GetJobGraph().GetEdges() {
		if e.GetDeadLetters() {
			fed = append(fed, e.GetSource()+"->"+e.GetTarget())
		}
	}
	if got := strings.Join(fed, " "); got != "key->dead-letters coupons->dead-letters" || graph.FindJobVertex(rec.ExecutionGraph, graph.DeadLetterVertexID) == nil {
		t.Fatalf("the committed graph's dead-letter edges: %q", got)
	}
	before := testcluster.Attempts(rec)

	// While the bad records flow: RUNNING, no restart, and the dead letters counted.
	testcluster.WaitFor(t, 60*time.Second, fmt.Sprintf("json_key_by's dead letters at %d while the job runs", numbers), func() (bool, string) {
		r := c.Job(id)
		if r.Status != pb.JobStatus_JOB_STATUS_RUNNING || r.Restarts != 0 {
			t.Fatalf("the job left RUNNING while bad records flow: %s", testcluster.Describe(r))
		}
		if ch := testcluster.Changed(before, testcluster.Attempts(r)); len(ch) > 0 {
			t.Fatalf("tasks restarted: %v (%s)", ch, testcluster.Describe(r))
		}
		dl := vertexDeadLetters(t, c, id)
		return dl["key"] == numbers && dl["coupons"] > 0, fmt.Sprint(dl)
	})
	s, err := c.Client(c.Leader()).GetJob(t.Context(), &pb.GetJobRequest{JobId: id})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range s.GetSummary().GetVertices() {
		if v.VertexId == "key" && v.GetDeadLetters() < numbers {
			t.Fatalf("the job status shows %d dead letters of key, the metric %d", v.GetDeadLetters(), numbers)
		}
	}

	done := c.WaitJob(id, "the job FINISHED", 120*time.Second, func(r *pb.JobRecord) bool { return r.Status == pb.JobStatus_JOB_STATUS_FINISHED })
	if done.Restarts != 0 || len(testcluster.Changed(before, testcluster.Attempts(done))) > 0 {
		t.Fatalf("the job restarted: %s", testcluster.Describe(done))
	}

	// Every bad record once in the committed dead-letter output, with its reason.
	type letter struct {
		vertex string
		origin int32
		seq    int64
	}
	seen := map[letter]bool{}
	for _, l := range committedLines(t, c, "dead-0.jsonl") {
		var d operator.DeadLetter
		if err := json.Unmarshal([]byte(l), &d); err != nil {
			t.Fatalf("dead letter %q: %v", l, err)
		}
		k := letter{d.Vertex, d.Origin, d.Seq}
		if seen[k] {
			t.Fatalf("dead letter %+v twice", d)
		}
		seen[k] = true
		switch d.Vertex {
		case "key":
			n, ok := operator.Int64Of(append([]byte(d.Value), d.ValueBase64...))
			if d.Reason != "not valid JSON" || d.Origin != 0 || !ok || n != d.Seq {
				t.Fatalf("json_key_by's dead letter %+v", d)
			}
		case "coupons":
			e := operator.NewGenerator(gen).Event(d.Origin, d.Seq)
			if d.Reason != "lacks the field coupon" || d.Key != e.User || d.Value != string(e.JSON(nil)) || d.Time == nil || *d.Time != e.TimeMs {
				t.Fatalf("json_filter's dead letter %+v, want of %+v", d, e)
			}
		default:
			t.Fatalf("a dead letter of vertex %q: %+v", d.Vertex, d)
		}
	}
	for o := range int32(2) {
		for i := range int64(events) {
			if !seen[letter{"coupons", o, i}] {
				t.Fatalf("no dead letter of event %d/%d", o, i)
			}
		}
	}
	for i := range int64(numbers) {
		if !seen[letter{"key", 0, i}] {
			t.Fatalf("no dead letter of number %d", i)
		}
	}
	if len(seen) != numbers+2*events {
		t.Fatalf("%d dead letters, want %d", len(seen), numbers+2*events)
	}

	// Every event once in the committed good output, keyed by its user.
	g := operator.NewGenerator(gen)
	for sub := range int32(2) {
		lines := committedLines(t, c, fmt.Sprintf("out-%d.txt", sub))
		if len(lines) != events {
			t.Fatalf("out-%d.txt: %d committed lines, want %d", sub, len(lines), events)
		}
		for i, l := range lines {
			e := g.Event(sub, int64(i))
			if want := e.User + "\t" + string(e.JSON(nil)); l != want {
				t.Fatalf("out-%d.txt line %d: %q, want %q", sub, i, l, want)
			}
		}
	}
}
