package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/transport/pb"
)

type testLogWriter struct{ t testing.TB }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func testLogger(t testing.TB) hclog.Logger {
	if _, bench := t.(*testing.B); bench {
		return hclog.NewNullLogger()
	}
	return hclog.New(&hclog.LoggerOptions{Name: "test", Level: hclog.Debug, Output: testLogWriter{t}})
}

// harness applies commands to one FSM with increasing Raft indexes.
type harness struct {
	t     testing.TB
	f     *FSM
	index uint64
	// entries records every entry applied, for the fuzz targets' seed corpora.
	entries [][]byte
}

func newHarness(t testing.TB) *harness {
	return &harness{t: t, f: New(testLogger(t))}
}

func (h *harness) apply(typ pb.CommandType, m proto.Message) *Result {
	h.t.Helper()
	data, err := Encode(typ, m)
	if err != nil {
		h.t.Fatalf("encode: %v", err)
	}
	h.index++
	h.entries = append(h.entries, data)
	res, ok := h.f.Apply(&raft.Log{Index: h.index, Term: 1, Type: raft.LogCommand, Data: data}).(*Result)
	if !ok || res.Index != h.index {
		h.t.Fatalf("apply %s: result %#v", typ, res)
	}
	return res
}

func (h *harness) ok(typ pb.CommandType, m proto.Message) *Result {
	h.t.Helper()
	res := h.apply(typ, m)
	if res.Err != nil {
		h.t.Fatalf("apply %s: %v", typ, res.Err)
	}
	return res
}

func (h *harness) fails(typ pb.CommandType, m proto.Message, want error) {
	h.t.Helper()
	before := h.f.Hash()
	res := h.apply(typ, m)
	if !errors.Is(res.Err, want) {
		h.t.Fatalf("apply %s: err = %v, want %v", typ, res.Err, want)
	}
	if after := h.f.Hash(); after != before {
		h.t.Fatalf("apply %s failed with %v but changed the state", typ, res.Err)
	}
}

func (h *harness) job(id string) *pb.JobRecord {
	h.t.Helper()
	rec, ok := h.f.Job(id)
	if !ok {
		h.t.Fatalf("job %q not found", id)
	}
	return rec
}

func (h *harness) submit(jg *pb.JobGraph) {
	h.t.Helper()
	h.ok(pb.CommandType_COMMAND_TYPE_SUBMIT_JOB, &pb.SubmitJobCommand{JobGraph: jg, Timestamp: 1000})
}

func (h *harness) setStatus(id string, st pb.JobStatus) {
	h.t.Helper()
	h.ok(pb.CommandType_COMMAND_TYPE_SET_JOB_STATUS, &pb.SetJobStatusCommand{JobId: id, Status: st, Timestamp: 1100})
}

// attemptAll creates attempt number n for every subtask of the job.
func (h *harness) attemptAll(id string, n int32) {
	h.t.Helper()
	rec := h.job(id)
	var specs []*pb.AttemptSpec
	for _, ejv := range rec.ExecutionGraph.Vertices {
		for _, ev := range ejv.Subtasks {
			specs = append(specs, spec(id, ev.VertexId, ev.SubtaskIndex, n))
		}
	}
	h.ok(pb.CommandType_COMMAND_TYPE_CREATE_ATTEMPTS, &pb.CreateAttemptsCommand{JobId: id, Attempts: specs, Timestamp: 1200})
}

// moveAll moves every current execution of the job to st.
func (h *harness) moveAll(id string, st pb.ExecutionState) {
	h.t.Helper()
	rec := h.job(id)
	var ups []*pb.ExecutionStateUpdate
	for _, ejv := range rec.ExecutionGraph.Vertices {
		for _, ev := range ejv.Subtasks {
			ups = append(ups, &pb.ExecutionStateUpdate{JobId: id, AttemptId: ev.Current.AttemptId, State: st, Timestamp: 1300})
		}
	}
	res := h.ok(pb.CommandType_COMMAND_TYPE_UPDATE_EXECUTION_STATES, &pb.UpdateExecutionStatesCommand{Updates: ups})
	for i, e := range res.Value.(*pb.UpdateExecutionStatesResult).Errors {
		if e != "" {
			h.t.Fatalf("update %d: %s", i, e)
		}
	}
}

func attemptID(job, vertex string, subtask, n int32) string {
	return fmt.Sprintf("%s-%s-%d-%d", job[len(job)-6:], vertex, subtask, n)
}

func spec(job, vertex string, subtask, n int32) *pb.AttemptSpec {
	return &pb.AttemptSpec{
		VertexId:      vertex,
		SubtaskIndex:  subtask,
		AttemptId:     attemptID(job, vertex, subtask, n),
		AttemptNumber: n,
		Slot:          &pb.SlotID{TmId: fmt.Sprintf("tm-%d", subtask%3), Index: subtask},
		TmGrpcAddress: fmt.Sprintf("127.0.0.1:%d", 7000+subtask%3),
		TmDataAddress: fmt.Sprintf("127.0.0.1:%d", 8000+subtask%3),
	}
}

func jobIDN(n int) string { return fmt.Sprintf("%032x", n+1) }

func vertex(id string, p int32, op *pb.Operator) *pb.JobVertex {
	return &pb.JobVertex{Id: id, Name: id, Parallelism: p, Operator: op}
}

// streamingJob is src(p) -FORWARD pipelined-> map(p) -ALL_TO_ALL blocking-> sink(q).
func streamingJob(id string, p, q int32) *pb.JobGraph {
	return &pb.JobGraph{
		JobId: id,
		Name:  "job-" + id[:4],
		Type:  pb.JobType_JOB_TYPE_STREAMING,
		Vertices: []*pb.JobVertex{
			vertex("src", p, &pb.Operator{Kind: &pb.Operator_SequenceSource{SequenceSource: &pb.SequenceSource{Count: 100}}}),
			vertex("map", p, &pb.Operator{Kind: &pb.Operator_Map{Map: &pb.MapOperator{Multiply: 3}}}),
			vertex("sink", q, &pb.Operator{Kind: &pb.Operator_LogSink{LogSink: &pb.LogSink{}}}),
		},
		Edges: []*pb.JobEdge{
			{Source: "src", Target: "map", Distribution: pb.Distribution_DISTRIBUTION_FORWARD, ResultType: pb.ResultType_RESULT_TYPE_PIPELINED},
			{Source: "map", Target: "sink", Distribution: pb.Distribution_DISTRIBUTION_ALL_TO_ALL, ResultType: pb.ResultType_RESULT_TYPE_BLOCKING},
		},
	}
}

// forwardJob is a chain of `vertices` vertices of parallelism p joined by FORWARD edges.
func forwardJob(id string, vertices int, p int32) *pb.JobGraph {
	jg := &pb.JobGraph{JobId: id, Name: "chain", Type: pb.JobType_JOB_TYPE_STREAMING}
	for i := 0; i < vertices; i++ {
		op := &pb.Operator{Kind: &pb.Operator_Map{Map: &pb.MapOperator{Add: int64(i)}}}
		switch i {
		case 0:
			op = &pb.Operator{Kind: &pb.Operator_SequenceSource{SequenceSource: &pb.SequenceSource{}}}
		case vertices - 1:
			op = &pb.Operator{Kind: &pb.Operator_LogSink{LogSink: &pb.LogSink{}}}
		}
		jg.Vertices = append(jg.Vertices, vertex(fmt.Sprintf("v%d", i), p, op))
		if i > 0 {
			jg.Edges = append(jg.Edges, &pb.JobEdge{Source: fmt.Sprintf("v%d", i-1), Target: fmt.Sprintf("v%d", i),
				Distribution: pb.Distribution_DISTRIBUTION_FORWARD, ResultType: pb.ResultType_RESULT_TYPE_PIPELINED})
		}
	}
	return jg
}

// memSink is an in-memory raft.SnapshotSink.
type memSink struct {
	bytes.Buffer
	closed, cancelled bool
	failAfter         int // fail writes once the buffer holds this many bytes (0: never)
}

func (s *memSink) Write(p []byte) (int, error) {
	if s.failAfter > 0 && s.Len()+len(p) > s.failAfter {
		return 0, errors.New("disk full")
	}
	return s.Buffer.Write(p)
}
func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Close() error  { s.closed = true; return nil }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }

func persist(t testing.TB, f *FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	if !sink.closed || sink.cancelled {
		t.Fatalf("sink closed=%v cancelled=%v", sink.closed, sink.cancelled)
	}
	return sink.Bytes()
}

func restore(f *FSM, data []byte) error {
	return f.Restore(nopCloser{bytes.NewReader(data)})
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }
