package taskmanager

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	gproto "google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// wideTask is a retained FINISHED sink of a 512-wide ALL_TO_ALL edge: its report carries one
// consumed entry per input channel (about 50 bytes each). It is placed straight into the TM's
// table, as a task that ran and ended would be, so no goroutine reads its 512 channels.
func wideTask(tm *TaskManager, subtask int32, width int) {
	chans := make([]*pb.InputChannelDescriptor, width)
	for p := range chans {
		chans[p] = channel("src->sink", int32(p), subtask, fmt.Sprintf("%032x", p), "127.0.0.1:7501")
	}
	d := deploy("job", "sink", subtask, int32(width), fmt.Sprintf("%032x", 1<<20+int(subtask)), subtask, checksumOp("x"), gate("src->sink", pipelined, chans...))
	t := tm.newTask(d, nil)
	t.cancel()
	close(t.done)
	t.state, t.endedAt = finished, time.Now()
	tm.mu.Lock()
	tm.table.addLocked(t)
	tm.mu.Unlock()
}

// TestReportOver4MiBArrivesInByteBoundedChunks: a TM whose executions' reports total more than
// the 4 MiB message limit streams them in chunks that each stay within the byte budget (the
// limit minus its margin), through a client with gRPC's default 4 MiB receive limit; every
// execution arrives, in order. A leader asking for smaller chunks gets smaller ones.
func TestReportOver4MiBArrivesInByteBoundedChunks(t *testing.T) {
	tm := newTM(t, "tm1", nil, func(c *Config) { c.Slots = 200; c.JobMasters = []string{"127.0.0.1:1"} })
	const tasks, width = 200, 512
	for i := range int32(tasks) {
		wideTask(tm, i, width)
	}
	c := client(t, tm)

	chunks := report(t, c, &pb.RequestReportRequest{Epoch: 1})
	total, execs := 0, 0
	for i, ch := range chunks {
		n := gproto.Size(ch)
		total += n
		execs += len(ch.Executions)
		if n > transport.ChunkBudget(0) {
			t.Fatalf("chunk %d is %d bytes, over the budget of %d", i, n, transport.ChunkBudget(0))
		}
		if ch.ChunkIndex != int32(i) || ch.Last != (i == len(chunks)-1) || ch.TmId != "tm1" {
			t.Fatalf("chunk %d: index %d, last %v, tm %q", i, ch.ChunkIndex, ch.Last, ch.TmId)
		}
		for _, e := range ch.Executions {
			if len(e.Consumed) != width {
				t.Fatalf("chunk %d: %s reports %d consumed partitions, want %d", i, e.AttemptId, len(e.Consumed), width)
			}
		}
	}
	if total <= transport.ChunkedMessageLimit || execs != tasks || len(chunks) < 2 {
		t.Fatalf("report of %d bytes, %d executions in %d chunks: want more than %d bytes, %d executions, several chunks",
			total, execs, len(chunks), transport.ChunkedMessageLimit, tasks)
	}
	t.Logf("%d executions, %d bytes in %d chunks (budget %d bytes per chunk)", execs, total, len(chunks), transport.ChunkBudget(0))

	// The leader's max_chunk_bytes lowers the bound; the execution count bound still applies.
	small := report(t, c, &pb.RequestReportRequest{Epoch: 1, MaxChunkBytes: 256 << 10})
	for i, ch := range small {
		if n := gproto.Size(ch); n > 256<<10 {
			t.Fatalf("chunk %d is %d bytes with max_chunk_bytes 256 KiB", i, n)
		}
	}
	if len(small) <= len(chunks) {
		t.Fatalf("%d chunks at 256 KiB, %d at the default budget", len(small), len(chunks))
	}
	counted := report(t, c, &pb.RequestReportRequest{Epoch: 1, ChunkSize: 7})
	if len(counted) != (tasks+6)/7 {
		t.Fatalf("%d chunks of 7 executions for %d executions", len(counted), tasks)
	}
}

// TestChunkReportBytes: chunks are cut before they would pass the byte bound, counting the
// chunk exactly as proto encodes it; an execution larger than the bound travels alone.
func TestChunkReportBytes(t *testing.T) {
	base := &pb.TaskManagerReport{TmId: "tm1", GrpcAddress: "127.0.0.1:7401", DataAddress: "127.0.0.1:7501", Slots: 400}
	mk := func(n int) *pb.ExecutionReport {
		return &pb.ExecutionReport{AttemptId: strings.Repeat("a", 32), FailureCause: strings.Repeat("x", n)}
	}
	execs := []*pb.ExecutionReport{mk(100), mk(100), mk(5000), mk(100), mk(100), mk(100)}
	const limit = 1000
	chunks := ChunkReport(base, execs, 1000, limit)
	var sizes []int
	got := 0
	for _, c := range chunks {
		sizes = append(sizes, gproto.Size(c))
		got += len(c.Executions)
		if len(c.Executions) > 1 && gproto.Size(c) > limit {
			t.Fatalf("a chunk of %d executions is %d bytes, over %d", len(c.Executions), gproto.Size(c), limit)
		}
	}
	if got != len(execs) || len(chunks) != 3 || len(chunks[1].Executions) != 1 || chunks[1].Executions[0] != execs[2] {
		t.Fatalf("chunks of %v executions, sizes %v", []int{len(chunks[0].Executions), len(chunks[1].Executions), len(chunks[len(chunks)-1].Executions)}, sizes)
	}
	// The count is exact but for the 8 bytes reserved for chunk_index and last: a budget of a
	// chunk's size plus those keeps it whole, one byte less than its size splits it.
	whole := ChunkReport(base, execs[:2], 1000, 0)[0]
	if n := len(ChunkReport(base, execs[:2], 1000, gproto.Size(whole)+8)); n != 1 {
		t.Fatalf("%d chunks with a budget of the chunk's %d bytes + 8", n, gproto.Size(whole))
	}
	if n := len(ChunkReport(base, execs[:2], 1000, gproto.Size(whole)-1)); n != 2 {
		t.Fatalf("%d chunks with a budget one byte under the chunk's %d bytes", n, gproto.Size(whole))
	}
}

// TestSubmitTasksBatch: a batch is fenced once, each task accepted or refused on its own with
// SubmitTask's rules, the accepted ones run, a redelivered batch is accepted as it is, and a
// batch with nothing deployable is refused whole without adopting its epoch. Slot sharing: a
// slot takes a task of another vertex of the same job, and refuses a second subtask of one
// vertex or a task of another job.
func TestSubmitTasksBatch(t *testing.T) {
	jm := startJM(t)
	tm := newTM(t, "tm1", jm, func(c *Config) { c.Slots = 4 })
	c := client(t, tm)
	a := source("job", "src", 0, 2, "a", 0, unbounded)
	b := source("job", "src", 1, 2, "b", 1, unbounded)
	busy := source("job", "src", 2, 3, "c", 0, unbounded)     // slot 0 holds src[0] already
	bad := source("job", "src", 2, 2, "", 2, unbounded)       // no attempt id
	shared := source("job", "other", 0, 1, "s", 0, unbounded) // shares slot 0 with src[0]
	foreign := source("job2", "src", 0, 1, "e", 1, unbounded) // slot 1 holds job's src[1]
	jm.setEpoch(3)                                            // a new leader term, named by the JobMaster as the epoch rule requires
	resp, err := c.SubmitTasks(t.Context(), &pb.SubmitTasksRequest{Epoch: 3, Tasks: []*pb.TaskDeploymentDescriptor{a, b, busy, bad, shared, foreign}})
	if err != nil {
		t.Fatal(err)
	}
	want := []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted, codes.InvalidArgument, codes.OK, codes.ResourceExhausted}
	for i, r := range resp.Results {
		if codes.Code(r.Code) != want[i] {
			t.Fatalf("result %d (%s): %s %q, want %s", i, r.AttemptId, codes.Code(r.Code), r.Message, want[i])
		}
	}
	if !strings.Contains(resp.Results[2].Message, "slot 0 of tm1 is busy") || !strings.Contains(resp.Results[3].Message, "attempt_id is empty") ||
		!strings.Contains(resp.Results[5].Message, "slot 1 of tm1 is busy with attempt b (job job") {
		t.Fatalf("messages: %q, %q, %q", resp.Results[2].Message, resp.Results[3].Message, resp.Results[5].Message)
	}
	jm.waitState(t, "s", running)
	if n := tm.FreeSlots(); n != 2 {
		t.Fatalf("%d free slots with three tasks in slots 0 and 1, want 2", n)
	}
	jm.waitState(t, "a", running)
	jm.waitState(t, "b", running)
	if tm.Epoch() != 3 {
		t.Fatalf("epoch %d, want 3 adopted from the batch", tm.Epoch())
	}

	// Redelivery of the same batch: accepted, nothing new starts.
	again, err := c.SubmitTasks(t.Context(), &pb.SubmitTasksRequest{Epoch: 3, Tasks: []*pb.TaskDeploymentDescriptor{a, b}})
	if err != nil || again.Results[0].Code != 0 || again.Results[1].Code != 0 {
		t.Fatalf("redelivery: %v %v", again, err)
	}
	if n := len(tm.Tasks()); n != 3 {
		t.Fatalf("%d tasks after a redelivered batch, want 3", n)
	}
	// A stale attempt number of a running subtask is refused in the batch.
	older := cloneTDD(a)
	older.AttemptId, older.SlotIndex, older.AttemptNumber = "a0", 2, 0
	a.AttemptNumber = 1
	r, err := c.SubmitTasks(t.Context(), &pb.SubmitTasksRequest{Epoch: 3, Tasks: []*pb.TaskDeploymentDescriptor{older}})
	if err != nil || codes.Code(r.Results[0].Code) != codes.FailedPrecondition {
		t.Fatalf("stale attempt number: %v %v", r, err)
	}

	// Nothing deployable: refused whole, the epoch is not adopted.
	_, err = c.SubmitTasks(t.Context(), &pb.SubmitTasksRequest{Epoch: 9, Tasks: []*pb.TaskDeploymentDescriptor{bad}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "tasks[0]") {
		t.Fatalf("all-invalid batch: %v", err)
	}
	if _, err := c.SubmitTasks(t.Context(), &pb.SubmitTasksRequest{Epoch: 9}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty batch: %v", err)
	}
	if tm.Epoch() != 3 {
		t.Fatalf("epoch %d after refused batches, want 3", tm.Epoch())
	}
	// A stale epoch refuses the whole batch.
	_, err = c.SubmitTasks(t.Context(), &pb.SubmitTasksRequest{Epoch: 2, Tasks: []*pb.TaskDeploymentDescriptor{source("job", "src", 3, 4, "d", 3, unbounded)}})
	if !transport.IsStaleEpoch(err) {
		t.Fatalf("stale epoch: %v", err)
	}
	if _, ok := findTask(tm, "d"); ok {
		t.Fatal("a task of a stale batch was deployed")
	}
}

// TestSubmitTasksDoesNotWaitForInputs: the answer to a batch does not wait for its tasks'
// start-up: consumers whose producer does not exist (each input channel retries for the
// one-minute input-connect timeout) are accepted at once and are still alive after it.
func TestSubmitTasksDoesNotWaitForInputs(t *testing.T) {
	jm := startJM(t)
	tm := newTM(t, "tm1", jm, func(c *Config) { c.Slots = 8; c.InputConnectTimeout = time.Minute })
	c := client(t, tm)
	var batch []*pb.TaskDeploymentDescriptor
	for i := range int32(8) {
		batch = append(batch, deploy("job", "sink", i, 8, fmt.Sprintf("s%d", i), i, checksumOp(fmt.Sprintf("x%d", i)),
			gate("src->sink", pipelined, channel("src->sink", 0, i, "missing-producer", "127.0.0.1:1"))))
	}
	start := time.Now()
	resp, err := c.SubmitTasks(t.Context(), &pb.SubmitTasksRequest{Epoch: 1, Tasks: batch})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resp.Results {
		if r.Code != 0 {
			t.Fatalf("%s: %s %s", r.AttemptId, codes.Code(r.Code), r.Message)
		}
	}
	if got := len(tm.Tasks()); got != 8 {
		t.Fatalf("%d tasks after the batch, want 8", got)
	}
	for _, ti := range tm.Tasks() {
		if isTerminal(ti.State) {
			t.Fatalf("%s is %s: its input is still waiting for its producer", ti.AttemptID, ti.State)
		}
	}
	t.Logf("8 consumers accepted in %s while their inputs wait for a producer", time.Since(start).Round(time.Millisecond))
}

// TestAnswerReportAsExpected: a TM whose executions give the digest the leader expects answers
// with one last chunk, as_expected, listing nothing; one execution in another state, an
// execution more or less, or no expectation at all gives the whole report.
func TestAnswerReportAsExpected(t *testing.T) {
	var execs []*pb.ExecutionReport
	for i := int32(0); i < 2500; i++ {
		execs = append(execs, &pb.ExecutionReport{JobId: "j", VertexId: "v", SubtaskIndex: i, AttemptId: fmt.Sprintf("a-%d", i),
			StartTimestamp: 7, State: pb.ExecutionState_EXECUTION_STATE_RUNNING, SlotIndex: i % 4,
			Produced: []*pb.ProducedPartitionReport{{ResultId: "r", PartitionIndex: i}}})
	}
	var d transport.ReportDigest
	for i := len(execs) - 1; i >= 0; i-- { // the leader's order is not the TM's
		e := execs[i]
		d.Add(e.JobId, e.VertexId, e.SubtaskIndex, e.AttemptId, e.SlotIndex, e.StartTimestamp, pb.ExecutionState_EXECUTION_STATE_RUNNING, 1, true, 0)
	}
	base := &pb.TaskManagerReport{TmId: "tm1"}
	got := AnswerReport(base, execs, &pb.RequestReportRequest{Expect: d.Proto()}, 1000, 1<<20)
	if len(got) != 1 || !got[0].AsExpected || !got[0].Last || len(got[0].Executions) != 0 || got[0].TmId != "tm1" {
		t.Fatalf("a matching TM answered %d chunks, first %v", len(got), got[0])
	}
	whole := func(what string, execs []*pb.ExecutionReport, req *pb.RequestReportRequest) {
		t.Helper()
		got := AnswerReport(base, execs, req, 1000, 1<<20)
		n := 0
		for _, c := range got {
			n += len(c.Executions)
			if c.AsExpected {
				t.Fatalf("%s: answered as expected", what)
			}
		}
		if n != len(execs) || !got[len(got)-1].Last {
			t.Fatalf("%s: %d executions in %d chunks, want all %d", what, n, len(got), len(execs))
		}
	}
	finished := slices.Clone(execs)
	finished[1200] = gproto.CloneOf(execs[1200])
	finished[1200].State = pb.ExecutionState_EXECUTION_STATE_FINISHED
	whole("one FINISHED", finished, &pb.RequestReportRequest{Expect: d.Proto()})
	moved := slices.Clone(execs)
	moved[3] = gproto.CloneOf(execs[3])
	moved[3].Produced[0].PartitionIndex = 4
	whole("a partition of another index", moved, &pb.RequestReportRequest{Expect: d.Proto()})
	whole("one execution fewer", execs[1:], &pb.RequestReportRequest{Expect: d.Proto()})
	whole("no expectation", execs, &pb.RequestReportRequest{})
}
