package taskmanager

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

var unbounded = &pb.SequenceSource{RatePerSecond: 100}

func TestEpochFencing(t *testing.T) {
	jm := startJM(t)
	tm := newTM(t, "tm1", jm, nil)
	c := client(t, tm)
	ctx := context.Background()
	jm.setEpoch(5)
	report(t, c, &pb.RequestReportRequest{Epoch: 5, LeaderId: "jm", LeaderGrpcAddress: jm.addr})
	if tm.Epoch() != 5 || tm.Leader() != jm.addr {
		t.Fatalf("epoch %d leader %q after RequestReport(5)", tm.Epoch(), tm.Leader())
	}
	stale := func(what string, err error) {
		t.Helper()
		if status.Code(err) != codes.FailedPrecondition || transport.Reason(err) != transport.ReasonStaleEpoch {
			t.Fatalf("%s with epoch 4: got %v, want FAILED_PRECONDITION/STALE_EPOCH", what, err)
		}
	}
	_, err := c.SubmitTask(ctx, &pb.SubmitTaskRequest{Epoch: 4, Task: source("job", "src", 0, 1, "old", 0, unbounded)})
	stale("SubmitTask", err)
	if n := len(tm.Tasks()); n != 0 {
		t.Fatalf("stale SubmitTask started %d tasks", n)
	}

	submit(t, c, 5, source("job", "src", 0, 1, "a1", 0, unbounded))
	jm.waitState(t, "a1", running)
	_, err = c.CancelTask(ctx, &pb.CancelTaskRequest{Epoch: 4, JobId: "job", AttemptId: "a1"})
	stale("CancelTask", err)
	_, err = c.UpdatePartitionInfo(ctx, &pb.UpdatePartitionInfoRequest{Epoch: 4, JobId: "job", ConsumerAttemptId: "a1"})
	stale("UpdatePartitionInfo", err)
	_, err = c.AcknowledgeTerminal(ctx, &pb.AcknowledgeTerminalRequest{Epoch: 4, AttemptIds: []string{"a1"}})
	stale("AcknowledgeTerminal", err)
	s, _ := c.RequestReport(ctx, &pb.RequestReportRequest{Epoch: 4})
	_, err = s.Recv()
	stale("RequestReport", err)

	if ti, _ := findTask(tm, "a1"); ti.State != running {
		t.Fatalf("task after stale cancel: %+v", ti)
	}
	if tm.Epoch() != 5 || tm.FreeSlots() != 3 {
		t.Fatalf("epoch %d free %d", tm.Epoch(), tm.FreeSlots())
	}
	// A higher epoch on a call other than RequestReport is adopted only once a JobMaster names
	// it as the established leader's epoch; until then the call is refused and changes nothing.
	_, err = c.CancelTask(ctx, &pb.CancelTaskRequest{Epoch: 7, JobId: "job", AttemptId: "a1"})
	if status.Code(err) != codes.FailedPrecondition || transport.Reason(err) != transport.ReasonUnannouncedEpoch {
		t.Fatalf("CancelTask with an unannounced epoch 7: got %v, want FAILED_PRECONDITION/%s", err, transport.ReasonUnannouncedEpoch)
	}
	if ti, _ := findTask(tm, "a1"); ti.State != running || tm.Epoch() != 5 {
		t.Fatalf("after an unannounced epoch: task %+v, epoch %d", ti, tm.Epoch())
	}
	jm.setEpoch(7)
	waitFor(t, 10*time.Second, "CancelTask with epoch 7 once the JobMaster names it", func() (bool, string) {
		_, err := c.CancelTask(ctx, &pb.CancelTaskRequest{Epoch: 7, JobId: "job", AttemptId: "a1"})
		return err == nil, fmt.Sprint(err)
	})
	if tm.Epoch() != 7 {
		t.Fatalf("epoch %d, want 7", tm.Epoch())
	}
}

// TestRefusedCallsNeverRaiseTheEpoch: a TaskManagerService call that fails validation, with an
// epoch far above anything seen, is refused with INVALID_ARGUMENT and leaves the epoch alone;
// so does a well-formed one whose epoch no JobMaster names. No numeric bound is involved: a
// RequestReport (the new leader's first call) still adopts any higher epoch.
func TestRefusedCallsNeverRaiseTheEpoch(t *testing.T) {
	jm := startJM(t)
	tm := newTM(t, "tm1", jm, nil)
	c := client(t, tm)
	ctx := t.Context()
	submit(t, c, 1, source("job", "src", 0, 1, "a", 0, unbounded))
	jm.waitState(t, "a", running)
	const huge = uint64(1) << 62
	invalid := map[string]func() error{
		"SubmitTask without a task": func() error {
			_, err := c.SubmitTask(ctx, &pb.SubmitTaskRequest{Epoch: huge})
			return err
		},
		"SubmitTask with an escaping sink path": func() error {
			d := deploy("job", "sink", 0, 1, "s", 1, checksumOp("../../escaped-{subtask}.json"), gate("r", pipelined, channel("r", 0, 0, "", "")))
			_, err := c.SubmitTask(ctx, &pb.SubmitTaskRequest{Epoch: huge, Task: d})
			return err
		},
		"CancelTask without an attempt": func() error {
			_, err := c.CancelTask(ctx, &pb.CancelTaskRequest{Epoch: huge, JobId: "job"})
			return err
		},
		"UpdatePartitionInfo with a negative partition": func() error {
			_, err := c.UpdatePartitionInfo(ctx, &pb.UpdatePartitionInfoRequest{Epoch: huge, JobId: "job", ConsumerAttemptId: "a",
				Channels: []*pb.InputChannelDescriptor{{ResultId: "r", PartitionIndex: -1}}})
			return err
		},
		"AcknowledgeTerminal without attempts": func() error {
			_, err := c.AcknowledgeTerminal(ctx, &pb.AcknowledgeTerminalRequest{Epoch: huge})
			return err
		},
		"RequestReport with a negative chunk size": func() error {
			s, err := c.RequestReport(ctx, &pb.RequestReportRequest{Epoch: huge, LeaderId: "x", LeaderGrpcAddress: jm.addr, ChunkSize: -1})
			if err == nil {
				_, err = s.Recv()
			}
			return err
		},
	}
	for name, call := range invalid {
		if err := call(); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("%s with epoch 1<<62: got %v, want INVALID_ARGUMENT", name, err)
		}
		if e := tm.Epoch(); e != 1 {
			t.Fatalf("%s raised the epoch to %d", name, e)
		}
	}
	// Well-formed, but the epoch is unannounced: refused, nothing changes.
	_, err := c.CancelTask(ctx, &pb.CancelTaskRequest{Epoch: huge, JobId: "job", AttemptId: "a"})
	if transport.Reason(err) != transport.ReasonUnannouncedEpoch {
		t.Fatalf("CancelTask with an unannounced epoch: %v", err)
	}
	// A well-formed SubmitTasks batch with an unannounced epoch: refused whole, nothing starts.
	d := source("job", "src2", 0, 1, "b", 1, unbounded)
	if _, err := c.SubmitTasks(ctx, &pb.SubmitTasksRequest{Epoch: huge, Tasks: []*pb.TaskDeploymentDescriptor{d}}); transport.Reason(err) != transport.ReasonUnannouncedEpoch {
		t.Fatalf("SubmitTasks with an unannounced epoch: %v", err)
	}
	if _, ok := findTask(tm, "b"); ok {
		t.Fatal("a task of a refused SubmitTasks batch is on the TM")
	}
	if ti, _ := findTask(tm, "a"); ti.State != running || tm.Epoch() != 1 {
		t.Fatalf("after refused calls: task %+v, epoch %d", ti, tm.Epoch())
	}
	// The leader still works with the TM: its calls are accepted and the task reports.
	if rep := report(t, c, &pb.RequestReportRequest{Epoch: 1, LeaderId: "jm", LeaderGrpcAddress: jm.addr}); len(rep[0].GetExecutions()) != 1 {
		t.Fatalf("report: %v", rep)
	}
	if _, err := c.CancelTask(ctx, &pb.CancelTaskRequest{Epoch: 1, JobId: "job", AttemptId: "a"}); err != nil {
		t.Fatal(err)
	}
	jm.waitState(t, "a", canceled)
	// No numeric bound: a valid RequestReport adopts any higher epoch.
	report(t, c, &pb.RequestReportRequest{Epoch: huge, LeaderId: "jm", LeaderGrpcAddress: jm.addr})
	if e := tm.Epoch(); e != huge {
		t.Fatalf("epoch %d after RequestReport(1<<62), want %d", e, huge)
	}
}

func TestTerminalRetention(t *testing.T) {
	jm := startJM(t)
	tm := newTM(t, "tm1", jm, func(c *Config) { c.RetainTerminal = time.Minute })
	c := client(t, tm)
	submit(t, c, 1, source("job", "src", 0, 1, "done", 0, &pb.SequenceSource{Count: 5}))
	jm.waitState(t, "done", finished)
	if tm.FreeSlots() != 4 {
		t.Fatalf("slot of a finished task not free: %d", tm.FreeSlots())
	}
	rep := report(t, c, &pb.RequestReportRequest{Epoch: 2})
	if ex := rep[0].GetExecutions(); len(ex) != 1 || ex[0].GetState() != finished || ex[0].GetAttemptId() != "done" {
		t.Fatalf("retained state not reported: %v", ex)
	}
	if _, err := c.AcknowledgeTerminal(t.Context(), &pb.AcknowledgeTerminalRequest{Epoch: 2, AttemptIds: []string{"done"}}); err != nil {
		t.Fatal(err)
	}
	if rep := report(t, c, &pb.RequestReportRequest{Epoch: 2}); len(rep) != 1 || len(rep[0].GetExecutions()) != 0 || !rep[0].GetLast() {
		t.Fatalf("acknowledged state still reported: %v", rep)
	}

	// Expiry.
	tm2 := newTM(t, "tm2", jm, func(c *Config) { c.RetainTerminal = 50 * time.Millisecond })
	submit(t, client(t, tm2), 1, source("job", "src", 0, 1, "short", 0, &pb.SequenceSource{Count: 5}))
	jm.waitState(t, "short", finished)
	waitFor(t, 5*time.Second, "retention expiry", func() (bool, string) {
		return len(tm2.Tasks()) == 0, fmt.Sprint(tm2.Tasks())
	})
}

func TestLeaderGrace(t *testing.T) {
	jm := startJM(t)
	tm := newTM(t, "tm1", jm, func(c *Config) {
		c.LeaderGrace = 300 * time.Millisecond
		c.ShutdownTimeout = 100 * time.Millisecond
	})
	c := client(t, tm)
	submit(t, c, 1, source("job", "src", 0, 1, "a", 0, unbounded))
	jm.waitState(t, "a", running)
	jm.srv.Stop()
	waitFor(t, 10*time.Second, "tasks cancelled after the grace", func() (bool, string) {
		ti, _ := findTask(tm, "a")
		return ti.State == canceled && tm.FreeSlots() == 4, fmt.Sprintf("%+v free=%d", ti, tm.FreeSlots())
	})
	if tm.OutboxLen() == 0 {
		t.Fatal("the CANCELED report should wait in the outbox while no leader is reachable")
	}
}

func TestCancelTask(t *testing.T) {
	jm := startJM(t)
	tm := newTM(t, "tm1", jm, nil)
	c := client(t, tm)
	submit(t, c, 1, source("job", "src", 0, 1, "a", 2, unbounded))
	jm.waitState(t, "a", running)
	if tm.FreeSlots() != 3 {
		t.Fatalf("free slots %d, want 3", tm.FreeSlots())
	}
	resp, err := c.CancelTask(t.Context(), &pb.CancelTaskRequest{Epoch: 1, JobId: "job", AttemptId: "a"})
	if err != nil || resp.GetState() != canceled {
		t.Fatalf("CancelTask: %v %v", resp, err)
	}
	if tm.FreeSlots() != 4 {
		t.Fatalf("slot not freed: %d", tm.FreeSlots())
	}
	jm.waitState(t, "a", canceled)
	resp, err = c.CancelTask(t.Context(), &pb.CancelTaskRequest{Epoch: 1, JobId: "job", AttemptId: "unknown"})
	if err != nil || resp.GetState() != canceled {
		t.Fatalf("CancelTask(unknown): %v %v", resp, err)
	}
	// The slot can be reused by the next attempt; resubmitting the same attempt is idempotent.
	b := source("job", "src", 0, 1, "b", 2, unbounded)
	b.AttemptNumber = 1
	submit(t, c, 1, b)
	submit(t, c, 1, b)
	cd := source("job", "src", 0, 1, "c", 2, unbounded)
	cd.AttemptNumber = 2
	_, err = c.SubmitTask(t.Context(), &pb.SubmitTaskRequest{Epoch: 1, Task: cd})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("busy slot: %v", err)
	}
	// An attempt number at or below one the TM holds for the subtask is stale.
	stale := source("job", "src", 0, 1, "d", 3, unbounded)
	stale.AttemptNumber = 1
	_, err = c.SubmitTask(t.Context(), &pb.SubmitTaskRequest{Epoch: 1, Task: stale})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "stale attempt number") {
		t.Fatalf("stale attempt number: %v", err)
	}
	// A cancel naming the wrong job, or no attempt, is refused and stops nothing.
	_, err = c.CancelTask(t.Context(), &pb.CancelTaskRequest{Epoch: 1, JobId: "other", AttemptId: "b"})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("CancelTask(wrong job): %v", err)
	}
	_, err = c.CancelTask(t.Context(), &pb.CancelTaskRequest{Epoch: 1, JobId: "job"})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("CancelTask(no attempt): %v", err)
	}
	if tm.FreeSlots() != 3 {
		t.Fatalf("free slots %d after refused calls, want 3", tm.FreeSlots())
	}
}

func TestChunkReport(t *testing.T) {
	execs := make([]*pb.ExecutionReport, 2500)
	for i := range execs {
		execs[i] = &pb.ExecutionReport{AttemptId: fmt.Sprint(i)}
	}
	base := &pb.TaskManagerReport{TmId: "tm", Slots: 4}
	chunks := ChunkReport(base, execs, 1000, 0)
	if len(chunks) != 3 {
		t.Fatalf("%d chunks", len(chunks))
	}
	for i, c := range chunks {
		want := []int{1000, 1000, 500}[i]
		if len(c.GetExecutions()) != want || c.GetChunkIndex() != int32(i) || c.GetLast() != (i == 2) || c.GetTmId() != "tm" {
			t.Fatalf("chunk %d: %d executions, index %d, last %v", i, len(c.GetExecutions()), c.GetChunkIndex(), c.GetLast())
		}
	}
	if chunks[2].GetExecutions()[499].GetAttemptId() != "2499" {
		t.Fatal("executions out of order")
	}
	empty := ChunkReport(base, nil, 1000, 0)
	if len(empty) != 1 || !empty[0].GetLast() || len(empty[0].GetExecutions()) != 0 {
		t.Fatalf("empty report: %v", empty)
	}
}

func TestBadInput(t *testing.T) {
	jm := startJM(t)
	tm := newTM(t, "tm1", jm, func(c *Config) { c.MaxMessageSize = 64 << 10 })
	c := client(t, tm)
	ok := source("job", "src", 0, 1, "a", 0, unbounded)
	cases := map[string]func(d *pb.TaskDeploymentDescriptor){
		"attempt_id is empty":  func(d *pb.TaskDeploymentDescriptor) { d.AttemptId = "" },
		"operator: is missing": func(d *pb.TaskDeploymentDescriptor) { d.Operator = nil },
		"slot_index 9":         func(d *pb.TaskDeploymentDescriptor) { d.SlotIndex = 9 },
		"must have no inputs":  func(d *pb.TaskDeploymentDescriptor) { d.Inputs = gate("r", pipelined, channel("r", 0, 0, "", "")) },
		"num_subpartitions 0": func(d *pb.TaskDeploymentDescriptor) {
			d.Produced = []*pb.ResultPartitionDeploymentDescriptor{{ResultId: "r"}}
		},
		`vertex "src" has no inputs`: func(d *pb.TaskDeploymentDescriptor) { d.Operator = checksumOp("x.json") },
	}
	for want, mutate := range cases {
		d := cloneTDD(ok)
		mutate(d)
		_, err := c.SubmitTask(t.Context(), &pb.SubmitTaskRequest{Epoch: 1, Task: d})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), want) {
			t.Fatalf("%s: got %v", want, err)
		}
	}
	big := cloneTDD(ok)
	big.VertexId = strings.Repeat("v", 100<<10)
	if _, err := c.SubmitTask(t.Context(), &pb.SubmitTaskRequest{Epoch: 1, Task: big}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("oversized SubmitTask: %v", err)
	}
	_, err := c.UpdatePartitionInfo(t.Context(), &pb.UpdatePartitionInfoRequest{Epoch: 1, JobId: "job", ConsumerAttemptId: "nope"})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("UpdatePartitionInfo(unknown): %v", err)
	}
	if n := len(tm.Tasks()); n != 0 {
		t.Fatalf("bad input started %d tasks", n)
	}
}

func TestSecondReaderRefused(t *testing.T) {
	jm := startJM(t)
	tm := newTM(t, "tm1", jm, nil)
	c := client(t, tm)
	submit(t, c, 1, source("job", "src", 0, 1, "p", 0, unbounded, produces("r", 0, 1, forward, pipelined)))
	jm.waitState(t, "p", running)
	conn, err := tm.conns.peer(tm.DataAddr())
	if err != nil {
		t.Fatal(err)
	}
	dc := pb.NewDataServiceClient(conn)
	req := &pb.ReadPartitionRequest{JobId: "job", ResultId: "r", PartitionIndex: 0, ProducerAttemptId: "p", ConsumerAttemptId: "c1"}
	s1, err := dc.ReadPartition(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s1.Recv(); err != nil {
		t.Fatal(err)
	}
	req.ConsumerAttemptId = "c2"
	s2, _ := dc.ReadPartition(t.Context(), req)
	if _, err := s2.Recv(); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("second reader: %v", err)
	}
	req.ProducerAttemptId = "other"
	s3, _ := dc.ReadPartition(t.Context(), req)
	if _, err := s3.Recv(); status.Code(err) != codes.NotFound {
		t.Fatalf("unknown producer: %v", err)
	}
}

func TestRegistrationAndHeartbeat(t *testing.T) {
	jm := startJM(t)
	jm.epoch = 3
	tm := newTM(t, "tm1", jm, nil)
	submit(t, client(t, tm), 3, source("job", "src", 0, 1, "a", 1, unbounded))
	waitFor(t, 10*time.Second, "heartbeat with the deployed task", func() (bool, string) {
		jm.mu.Lock()
		defer jm.mu.Unlock()
		if len(jm.registers) == 0 || len(jm.beats) == 0 {
			return false, fmt.Sprintf("%d registrations, %d heartbeats", len(jm.registers), len(jm.beats))
		}
		r, b := jm.registers[0], jm.beats[len(jm.beats)-1]
		ok := r.GetTmId() == "tm1" && r.GetSlots() == 4 && r.GetDataAddress() == tm.DataAddr() &&
			len(b.GetDeployed()) == 1 && b.GetDeployed()[0].GetAttemptId() == "a" && b.GetFreeSlots() == 3 && b.GetEpochSeen() == 3
		return ok, fmt.Sprintf("register %v, heartbeat %v", r, b)
	})
	if tm.Leader() != jm.addr || tm.Epoch() != 3 {
		t.Fatalf("leader %q epoch %d", tm.Leader(), tm.Epoch())
	}
}

func TestConfigValidate(t *testing.T) {
	var c Config
	if err := c.Validate(); err == nil {
		t.Fatal("missing ID accepted")
	}
	c = Config{ID: "x"}
	if err := c.Validate(); err != nil || c.Slots != 4 || c.HeartbeatInterval != time.Second || c.MaxMessageSize != 4<<20 {
		t.Fatalf("defaults: %v %+v", err, c)
	}
	c = Config{ID: "x", Slots: -1}
	if err := c.Validate(); err == nil {
		t.Fatal("negative slots accepted")
	}
}

// TestCancelThatOvertakesItsSubmitTask: the leader cancels an attempt whose SubmitTask has not
// arrived yet (the cancel overtook it, or the SubmitTask is a retry). The TM answers CANCELED
// and keeps a tombstone, so the SubmitTask that arrives after it — alone or in a batch — is
// refused naming the cancel, and no task runs that no leader owns. The tombstones are bounded:
// past MaxCancelTombstones the oldest is forgotten.
func TestCancelThatOvertakesItsSubmitTask(t *testing.T) {
	jm := startJM(t)
	tm := newTM(t, "tm1", jm, nil)
	c := client(t, tm)
	for _, id := range []string{"a", "b"} {
		resp, err := c.CancelTask(t.Context(), &pb.CancelTaskRequest{Epoch: 1, JobId: "job", AttemptId: id})
		if err != nil || resp.GetState() != canceled {
			t.Fatalf("CancelTask(%s) before its SubmitTask: %v %v", id, resp, err)
		}
	}
	_, err := c.SubmitTask(t.Context(), &pb.SubmitTaskRequest{Epoch: 1, Task: source("job", "src", 0, 1, "a", 0, unbounded)})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "cancelled by the leader before it reached tm1") {
		t.Fatalf("SubmitTask after its cancel: %v", err)
	}
	resp, err := c.SubmitTasks(t.Context(), &pb.SubmitTasksRequest{Epoch: 1, Tasks: []*pb.TaskDeploymentDescriptor{
		source("job", "src", 1, 2, "b", 1, unbounded), source("job", "src", 0, 2, "c", 2, unbounded)}})
	if err != nil || len(resp.GetResults()) != 2 || codes.Code(resp.Results[0].GetCode()) != codes.FailedPrecondition || resp.Results[1].GetCode() != 0 {
		t.Fatalf("SubmitTasks with a cancelled attempt: %v %v", resp, err)
	}
	for _, ti := range tm.Tasks() {
		if ti.AttemptID == "a" || ti.AttemptID == "b" {
			t.Fatalf("the cancelled attempt %s runs: %+v", ti.AttemptID, ti)
		}
	}
	if _, ok := findTask(tm, "c"); !ok || tm.FreeSlots() != 3 {
		t.Fatalf("the other attempt of the batch did not start: free slots %d", tm.FreeSlots())
	}

	ts := newTombstones(3)
	for _, id := range []string{"1", "2", "3", "2", "4"} {
		ts.add(id)
	}
	if ts.has("1") || !ts.has("2") || !ts.has("3") || !ts.has("4") || ts.len() != 3 {
		t.Fatalf("bounded tombstones: %v", ts.set)
	}
}

// TestLeaderThatRefusesConnectionsIsRetriedWithBackoff: the leader's port is closed while the
// leader resolver (gossip, whose metadata of a dead leader lingers) keeps naming it. A failed
// contact makes the TM try again at once (the next leader may already be known), but from the
// second failure in a row it waits, doubling from leaderRetryMin up to the heartbeat interval;
// without the pauses the TM spun on the refused port, thousands of attempts a second.
func TestLeaderThatRefusesConnectionsIsRetriedWithBackoff(t *testing.T) {
	jm := startJM(t)
	tm := newTM(t, "tm1", jm, func(c *Config) {
		// As gossip does while the dead leader's metadata lingers: it keeps naming the leader.
		c.LeaderResolver = func(context.Context) (string, error) { return jm.addr, nil }
	})
	waitFor(t, 10*time.Second, "the TM registered", func() (bool, string) {
		return tm.Heartbeats() > 0, fmt.Sprintf("%d heartbeats", tm.Heartbeats())
	})
	jm.srv.Stop()
	base := tm.link.contactFailures.Load()
	start := time.Now()
	waitFor(t, 30*time.Second, "eight failed contacts", func() (bool, string) {
		n := tm.link.contactFailures.Load() - base
		return n >= 8, fmt.Sprintf("%d failures", n)
	})
	// Failures 2..7 are each followed by a pause of at least leaderRetryMin (doubling, capped
	// by the 20 ms heartbeat interval the test JM hands out).
	elapsed := time.Since(start)
	if min := 5 * leaderRetryMin; elapsed < min {
		t.Fatalf("eight failed contacts in %v: the TM does not back off (at least %v expected)", elapsed, min)
	}
	t.Logf("eight failed contacts in %v", elapsed.Round(time.Millisecond))
}
