package jobmaster

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// startLocalJM is a leader on a local FSM (no Raft) with one recording TM registered.
func startLocalJM(t *testing.T, tm *recordingTM, cfg Config) (*JobMaster, *fsm.FSM) {
	t.Helper()
	f := fsm.New(nil)
	tm.state = f
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterTaskManagerServiceServer(srv, tm)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	cfg.TickInterval, cfg.HeartbeatTimeout = 10*time.Millisecond, time.Minute
	jm := New(cfg, &localRaft{f: f}, f)
	t.Cleanup(jm.Shutdown)
	if err := jm.EstablishLeadership(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	jm.Registry().Upsert("tm1", lis.Addr().String(), "127.0.0.1:2", 8, true)
	return jm, f
}

// TestSubmitFallsBackToSubmitTask: a TM without SubmitTasks (UNIMPLEMENTED) gets the tasks one
// SubmitTask call each, still only after their commit.
func TestSubmitFallsBackToSubmitTask(t *testing.T) {
	tm := &recordingTM{noBatch: true}
	jm, _ := startLocalJM(t, tm, Config{})
	if _, _, err := jm.SubmitJob(context.Background(), chainJob()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "three submitted tasks", func() (bool, string) {
		s, v := tm.view()
		return len(s) == 3, fmt.Sprintf("submitted %v, violations %v", s, v)
	})
	if _, v := tm.view(); len(v) != 0 {
		t.Fatalf("tasks submitted before their commit: %v", v)
	}
	if b, single := tm.calls(); b != 0 || single != 3 {
		t.Fatalf("%d batches, %d SubmitTask calls; want 0 and 3", b, single)
	}
}

// TestOversizedDescriptorFailsNamingTheLimit: a descriptor larger than SubmitBatchBytes is
// not sent; its attempt is committed FAILED with a cause naming the limit and the size.
func TestOversizedDescriptorFailsNamingTheLimit(t *testing.T) {
	tm := &recordingTM{}
	jm, f := startLocalJM(t, tm, Config{SubmitBatchBytes: 64})
	jg := chainJob()
	jg.RestartStrategy = &pb.RestartStrategy{Kind: pb.RestartKind_RESTART_KIND_NONE}
	id, _, err := jm.SubmitJob(context.Background(), jg)
	if err != nil {
		t.Fatal(err)
	}
	var cause string
	waitFor(t, 10*time.Second, "an attempt failed for its descriptor's size", func() (bool, string) {
		rec, _ := f.Job(id)
		forEachExecution(rec, func(ev *pb.ExecutionVertex) {
			if c := ev.GetCurrent().GetFailureCause(); strings.Contains(c, "over SubmitBatchBytes (64 bytes") {
				cause = c
			}
		})
		return cause != "", fmt.Sprintf("job %s", rec.GetStatus())
	})
	if s, _ := tm.view(); len(s) != 0 {
		t.Fatalf("oversized descriptors were sent: %v", s)
	}
	t.Log(cause)
}

// TestSubmitBatchesBoundedByBytes: batches keep the descriptors' order, hold at most maxTasks
// and encode (as a SubmitTasksRequest with the largest epoch, with the shared channel lists
// they carry) within maxBytes; each batch carries every list its gates refer to, once, and
// the references are renumbered into the batch's lists.
func TestSubmitBatchesBoundedByBytes(t *testing.T) {
	var shared []*pb.SharedChannels
	for l := range 3 {
		list := &pb.SharedChannels{}
		for p := range 10 + 15*l {
			list.Channels = append(list.Channels, &pb.InputChannelDescriptor{ResultId: fmt.Sprint("s", l), PartitionIndex: int32(p), ProducerAttemptId: "p"})
		}
		shared = append(shared, list)
	}
	sharedSize := make([]int, len(shared))
	for i, l := range shared {
		sharedSize[i] = proto.Size(l)
	}
	var tdds []*pb.TaskDeploymentDescriptor
	want := map[*pb.InputGateDeploymentDescriptor]*pb.SharedChannels{}
	for i := range 100 {
		d := &pb.TaskDeploymentDescriptor{JobId: "job", VertexId: "sink", SubtaskIndex: int32(i), AttemptId: fmt.Sprintf("%032x", i)}
		for p := range i % 7 * 20 {
			d.Inputs = append(d.Inputs, &pb.InputGateDeploymentDescriptor{ResultId: "r", Channels: []*pb.InputChannelDescriptor{{PartitionIndex: int32(p), ProducerAttemptId: "p"}}})
		}
		if l := i % 4; l > 0 {
			g := &pb.InputGateDeploymentDescriptor{ResultId: fmt.Sprint("s", l-1), SharedChannels: uint32(l), SubpartitionIndex: int32(i)}
			d.Inputs = append(d.Inputs, g)
			want[g] = shared[l-1]
		}
		tdds = append(tdds, d)
	}
	const maxBytes, maxTasks = 4000, 9
	batches := submitBatches(tdds, maxTasks, maxBytes, shared, sharedSize)
	n := 0
	for i, b := range batches {
		req := &pb.SubmitTasksRequest{Epoch: ^uint64(0), Tasks: b.tasks, SharedChannels: b.shared}
		if len(b.tasks) > maxTasks || (len(b.tasks) > 1 && proto.Size(req) > maxBytes) {
			t.Fatalf("batch %d: %d tasks, %d bytes", i, len(b.tasks), proto.Size(req))
		}
		carried := map[*pb.SharedChannels]bool{}
		for _, l := range b.shared {
			if carried[l] {
				t.Fatalf("batch %d carries a list twice", i)
			}
			carried[l] = true
		}
		for _, d := range b.tasks {
			if d != tdds[n] {
				t.Fatalf("batch %d out of order at %d", i, n)
			}
			n++
			for _, g := range d.Inputs {
				if g.SharedChannels == 0 {
					continue
				}
				if int(g.SharedChannels) > len(b.shared) || b.shared[g.SharedChannels-1] != want[g] {
					t.Fatalf("batch %d: gate of %s refers to list %d of %d, not the one it named", i, d.AttemptId, g.SharedChannels, len(b.shared))
				}
			}
		}
	}
	if n != len(tdds) || len(batches) < 100/maxTasks {
		t.Fatalf("%d descriptors in %d batches", n, len(batches))
	}
}

// TestFreshSubmissionIsNotMissing: a heartbeat that arrives within a heartbeat interval of the
// TM's acknowledgement (it may have been built before the TM took the batch) does not count
// the attempts missing; two later heartbeats without them fail them.
func TestFreshSubmissionIsNotMissing(t *testing.T) {
	tm := &recordingTM{}
	jm, f := startLocalJM(t, tm, Config{HeartbeatInterval: 30 * time.Second})
	// The restart the failures cause must not hide them: no restart strategy.
	jg := chainJob()
	jg.RestartStrategy = &pb.RestartStrategy{Kind: pb.RestartKind_RESTART_KIND_NONE}
	id, _, err := jm.SubmitJob(context.Background(), jg)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "three submitted tasks", func() (bool, string) {
		s, _ := tm.view()
		return len(s) == 3, fmt.Sprintf("submitted %v", s)
	})
	term, err := jm.currentTerm()
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the batch acknowledged", func() (bool, string) {
		term.mu.Lock()
		defer term.mu.Unlock()
		return len(term.acked) == 3 && len(term.submitting) == 0, fmt.Sprintf("acked %d, submitting %d", len(term.acked), len(term.submitting))
	})
	failedCount := func() int {
		n := 0
		rec, _ := f.Job(id)
		forEachExecution(rec, func(ev *pb.ExecutionVertex) {
			for _, e := range append([]*pb.Execution{ev.GetCurrent()}, ev.GetHistory()...) {
				if strings.Contains(e.GetFailureCause(), "missing from the deployment report") {
					n++
				}
			}
		})
		return n
	}
	counted := func() int {
		term.mu.Lock()
		defer term.mu.Unlock()
		return len(term.missing)
	}
	empty := &pb.HeartbeatRequest{TmId: "tm1"}
	for range 2 {
		term.checkDeployment(empty)
		if n := counted(); n != 0 {
			t.Fatalf("%d attempts counted missing by a heartbeat that came right after their submission", n)
		}
	}
	// The acknowledgements age past the grace: the next reports are fresh.
	term.mu.Lock()
	for id := range term.acked {
		term.acked[id] = time.Now().Add(-time.Minute)
	}
	term.mu.Unlock()
	term.checkDeployment(empty)
	term.checkDeployment(empty)
	waitFor(t, 10*time.Second, "the attempts failed as missing", func() (bool, string) {
		n := failedCount()
		return n == 3, fmt.Sprintf("%d failed", n)
	})
}
