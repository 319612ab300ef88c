package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// wideJob is src(p) -ALL_TO_ALL-> sink(q), vertex ids of idLen characters (at least 3).
func wideJob(id string, p, q int32, idLen int) *pb.JobGraph {
	name := func(prefix string) string { return fmt.Sprintf("%s%0*d", prefix, idLen-len(prefix), 0) }
	src, snk := name("src"), name("snk")
	return &pb.JobGraph{
		JobId: id, Name: "wide", Type: pb.JobType_JOB_TYPE_STREAMING,
		Vertices: []*pb.JobVertex{
			vertex(src, p, &pb.Operator{Kind: &pb.Operator_SequenceSource{SequenceSource: &pb.SequenceSource{}}}),
			vertex(snk, q, &pb.Operator{Kind: &pb.Operator_LogSink{LogSink: &pb.LogSink{}}}),
		},
		Edges: []*pb.JobEdge{{Source: src, Target: snk, Distribution: pb.Distribution_DISTRIBUTION_ALL_TO_ALL, ResultType: pb.ResultType_RESULT_TYPE_PIPELINED}},
	}
}

// deployAll gives every subtask of a job an attempt the way the leader does (32 hex characters,
// a TaskManager of a 64-node cluster) and moves them all to RUNNING.
func deployAll(h *harness, id string) {
	h.t.Helper()
	rec := h.job(id)
	var specs []*pb.AttemptSpec
	n := 0
	for _, ejv := range rec.ExecutionGraph.Vertices {
		for _, ev := range ejv.Subtasks {
			n++
			tm := n % 64
			specs = append(specs, &pb.AttemptSpec{
				VertexId: ev.VertexId, SubtaskIndex: ev.SubtaskIndex, AttemptId: fmt.Sprintf("%032x", n),
				Slot:          &pb.SlotID{TmId: fmt.Sprintf("tm%d", tm), Index: int32(n % 16)},
				TmGrpcAddress: fmt.Sprintf("10.0.1.%d:7401", tm), TmDataAddress: fmt.Sprintf("10.0.1.%d:7501", tm),
			})
		}
	}
	h.setStatus(id, pb.JobStatus_JOB_STATUS_RUNNING)
	h.ok(createT, &pb.CreateAttemptsCommand{JobId: id, Attempts: specs, Timestamp: 1_767_000_000_000})
	for _, st := range []pb.ExecutionState{pb.ExecutionState_EXECUTION_STATE_DEPLOYING, pb.ExecutionState_EXECUTION_STATE_INITIALIZING, pb.ExecutionState_EXECUTION_STATE_RUNNING} {
		h.moveAll(id, st)
	}
}

// TestSubmitOverTheCeilingRefused: whatever a leader is configured with, every replica refuses
// a job over the replicated ceiling, naming it, and leaves no trace.
func TestSubmitOverTheCeilingRefused(t *testing.T) {
	h := newHarness(t)
	hostile := forwardJob(jobIDN(1), 4, 1024)
	for _, e := range hostile.Edges {
		e.Distribution = pb.Distribution_DISTRIBUTION_ALL_TO_ALL
	}
	ceil := graph.CeilingSizeLimits()
	for name, jg := range map[string]*pb.JobGraph{
		"4-vertex ALL_TO_ALL chain at p=1024": hostile,
		"executions":                          forwardJob(jobIDN(2), int(ceil.MaxExecutions/1024)+1, 1024),
		"bytes":                               wideJob(jobIDN(3), 1000, 1000, 64),
	} {
		before := h.f.Hash()
		res := h.apply(submitT, &pb.SubmitJobCommand{JobGraph: jg, Timestamp: 1})
		var se *graph.SizeError
		if !errors.As(res.Err, &se) || !se.Ceiling || !errors.Is(res.Err, graph.ErrInvalidJobGraph) {
			t.Fatalf("%s: err = %v, want a ceiling *graph.SizeError", name, res.Err)
		}
		if h.f.Hash() != before || len(h.f.JobIDs()) != 0 {
			t.Fatalf("%s: a refused submission changed the state", name)
		}
		t.Logf("%s: %v", name, res.Err)
	}
}

// TestJobsAtTheCeilingSnapshotAndRestore: for each limit, a job just under the replicated
// ceiling is accepted, runs (every subtask with an attempt, producers refreshed), and its state
// snapshots and restores equal. Its record, grown by what the estimate leaves out (the earlier
// attempts every subtask may keep, each with a failure cause and two failovers' state changes,
// 64-byte instead of 20-byte addresses in every partition and channel, a full status history,
// the acknowledgements of the checkpoints it may hold), stays under two thirds of the
// snapshot's record limit.
func TestJobsAtTheCeilingSnapshotAndRestore(t *testing.T) {
	ceil := graph.CeilingSizeLimits()
	// The widest 1024 -> q job with 64-character ids under the byte ceiling.
	q := int32(1)
	for graph.Size(wideJob(jobIDN(0), 1024, q+1, 64)).DeployedBytes <= ceil.MaxGraphBytes {
		q++
	}
	cases := []struct {
		limit string
		jg    *pb.JobGraph
	}{
		{graph.LimitExecutions, forwardJob(jobIDN(1), int(ceil.MaxExecutions/1024), 1024)},
		{graph.LimitInputChannels, wideJob(jobIDN(2), 1024, 1024, 3)},
		{graph.LimitGraphBytes, wideJob(jobIDN(3), 1024, q, 64)},
	}
	if raceEnabled {
		// The race detector makes a 100 MB record take minutes and gigabytes: an eighth of the
		// executions and a quarter of the channels and bytes.
		cases[0].jg = forwardJob(jobIDN(1), int(ceil.MaxExecutions/1024/8), 1024)
		cases[1].jg = wideJob(jobIDN(2), 512, 512, 3)
		cases[2].jg = wideJob(jobIDN(3), 512, q/2, 64)
	}
	for _, c := range cases {
		t.Run(c.limit, func(t *testing.T) {
			s := graph.Size(c.jg)
			if err := graph.CheckCeiling(c.jg); err != nil {
				t.Fatalf("the job is not under the ceiling: %v", err)
			}
			over := proto.Clone(c.jg).(*pb.JobGraph)
			over.Vertices[len(over.Vertices)-1].Parallelism++
			if !raceEnabled && graph.CheckCeiling(over) == nil {
				t.Fatalf("one more subtask is still under the ceiling: %+v", graph.Size(over))
			}
			start := time.Now()
			h := newHarness(t)
			h.f.logger = testLogger(t).Named("quiet")
			h.submit(c.jg)
			deployAll(h, c.jg.JobId)
			rec := h.job(c.jg.JobId)
			recordBytes := int64(proto.Size(&pb.SnapshotRecord{Record: &pb.SnapshotRecord_Job{Job: rec}}))
			data := persist(t, h.f)
			restored := New(testLogger(t))
			if err := restore(restored, data); err != nil {
				t.Fatal(err)
			}
			assertSameState(t, h.f, restored)

			// What the record can grow by while the job runs.
			retired := proto.Clone(rec.ExecutionGraph.Vertices[0].Subtasks[0].Current).(*pb.Execution)
			retired.FailureCause = strings.Repeat("c", 200)
			for i := 0; i < 4; i++ {
				retired.StateTimestamps = append(retired.StateTimestamps, &pb.StateTimestamp{State: pb.ExecutionState_EXECUTION_STATE_RECONCILING, Timestamp: 1_767_000_000_000})
			}
			history := s.Executions * int64(attemptHistory(rec.ExecutionGraph)) * int64(proto.Size(&pb.ExecutionVertex{History: []*pb.Execution{retired}}))
			addresses := (s.InputChannels + s.Partitions) * (64 - graph.EstimatedAddressLen)
			statuses := int64(100 * proto.Size(&pb.JobRecord{History: []*pb.JobStatusChange{{Status: 4, Timestamp: 1_767_000_000_000, Cause: strings.Repeat("c", 200)}}}))
			// The checkpoints' acknowledgements, one per subtask in each pending and retained
			// checkpoint (checkpointBudget), each with a 64-character vertex id and the longest
			// state path of the storage layout.
			ack := &pb.TaskCheckpointAck{VertexId: strings.Repeat("v", 64), SubtaskIndex: 131071, AttemptNumber: 1 << 20, StateSizeBytes: 1 << 40, Checksum: 1<<32 - 1}
			ack.StatePath = fmt.Sprintf("%s/chk-%d/%s-%d-%d.state", c.jg.JobId, uint64(1<<63), ack.VertexId, ack.SubtaskIndex, ack.AttemptNumber)
			ackBytes := int64(proto.Size(&pb.CheckpointRecord{Acks: []*pb.TaskCheckpointAck{ack}}))
			checkpoints := int64(max(2*s.Executions, maxJobCheckpointAcks)) * ackBytes
			worst := recordBytes + history + addresses + statuses + checkpoints
			if !raceEnabled && worst > maxSnapshotRecord*2/3 {
				t.Errorf("the record can grow to %d bytes, more than two thirds of the snapshot record limit %d", worst, maxSnapshotRecord)
			}
			t.Logf("%+v: deployed graph %d bytes (estimate %d), record %d bytes (can grow to %d, %d of them checkpoints), snapshot %d bytes, %s",
				s, proto.Size(rec.ExecutionGraph), s.DeployedBytes, recordBytes, worst, checkpoints, len(data), time.Since(start).Round(time.Millisecond))
		})
	}
}

// TestPersistRefusesARecordRestoreWouldRefuse: the writer applies the reader's record limit, so
// a snapshot that no replica could restore is never written; the error names the job.
func TestPersistRefusesARecordRestoreWouldRefuse(t *testing.T) {
	h := newHarness(t)
	h.submit(streamingJob(jobIDN(7), 40, 40))
	snap, err := h.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	err = snap.(*snapshot).write(&buf, 1000)
	if err == nil || !strings.Contains(err.Error(), jobIDN(7)) || !strings.Contains(err.Error(), "over the snapshot record limit of 1000") {
		t.Fatalf("write with a 1000-byte record limit: %v", err)
	}
}

// TestRestoreOfACorruptLengthAllocatesLittle: a record length of 200 MiB followed by a few bytes
// is refused as truncated without allocating the 200 MiB it announces.
func TestRestoreOfACorruptLengthAllocatesLittle(t *testing.T) {
	var lenBuf [binary.MaxVarintLen64]byte
	data := append(lenBuf[:binary.PutUvarint(lenBuf[:], 200<<20)], make([]byte, 100)...)
	f := New(testLogger(t))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err := restore(f, data)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrSnapshotCorrupt) {
		t.Fatalf("restore: %v", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Errorf("restoring 110 bytes allocated %d bytes", alloc)
	}
}

// TestAttemptHistoryShrinksWithTheJob: a job keeps ten earlier attempts per execution up to
// 16,384 executions and fewer (at least one) beyond, so its earlier attempts stay bounded in
// all and a record at the execution ceiling still fits the snapshot's record limit.
func TestAttemptHistoryShrinksWithTheJob(t *testing.T) {
	for _, c := range []struct{ vertices, p, want int }{
		{3, 3, 10}, {16, 1024, 10}, {32, 1024, 5}, {100, 1000, 1}, {128, 1024, 1},
	} {
		eg := &pb.ExecutionGraph{}
		for v := 0; v < c.vertices; v++ {
			eg.Vertices = append(eg.Vertices, &pb.ExecutionJobVertex{Subtasks: make([]*pb.ExecutionVertex, c.p)})
		}
		if got := attemptHistory(eg); got != c.want {
			t.Errorf("%d x %d executions keep %d earlier attempts each, want %d", c.vertices, c.p, got, c.want)
		}
		if c.vertices*c.p*attemptHistory(eg) > maxJobAttemptHistory && attemptHistory(eg) > 1 {
			t.Errorf("%d x %d: %d earlier attempts in all, over %d", c.vertices, c.p, c.vertices*c.p*attemptHistory(eg), maxJobAttemptHistory)
		}
	}
}
