package reconcile

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/jobmaster"
	"github.com/jmcluster/jmcluster/taskmanager"
	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// stubRaft is the little of a Raft node the collector needs: an id and an address.
type stubRaft struct{}

func (stubRaft) Apply(context.Context, []byte) (*fsm.Result, error) {
	return nil, errors.New("stub raft: no commits")
}
func (stubRaft) ID() string       { return "jm1" }
func (stubRaft) GRPCAddr() string { return "127.0.0.1:1" }
func (stubRaft) IsLeader() bool   { return true }
func (stubRaft) LeaderGRPCAddr(context.Context) (string, string, error) {
	return "jm1", "127.0.0.1:1", nil
}

// reportTM serves RequestReport over real gRPC, chunked exactly as a TaskManager chunks it
// (taskmanager.ChunkReport), and records the encoded size of every chunk it sends. With stall
// set it sends the first chunk and then hangs.
type reportTM struct {
	pb.UnimplementedTaskManagerServiceServer
	id, addr string
	execs    []*pb.ExecutionReport
	stall    bool

	mu     sync.Mutex
	sizes  []int
	asked  []*pb.RequestReportRequest
	served int
}

func startReportTM(t *testing.T, id string, execs []*pb.ExecutionReport) *reportTM {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &reportTM{id: id, addr: l.Addr().String(), execs: execs}
	srv := grpc.NewServer()
	pb.RegisterTaskManagerServiceServer(srv, s)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return s
}

func (s *reportTM) RequestReport(req *pb.RequestReportRequest, stream pb.TaskManagerService_RequestReportServer) error {
	s.mu.Lock()
	s.asked = append(s.asked, req)
	s.served++
	s.mu.Unlock()
	base := &pb.TaskManagerReport{TmId: s.id, GrpcAddress: s.addr, Slots: 400}
	for i, c := range taskmanager.ChunkReport(base, s.execs, int(req.ChunkSize), int(req.MaxChunkBytes)) {
		if s.stall && i == 1 {
			<-stream.Context().Done()
			return stream.Context().Err()
		}
		s.mu.Lock()
		s.sizes = append(s.sizes, proto.Size(c))
		s.mu.Unlock()
		if err := stream.Send(c); err != nil {
			return err
		}
	}
	return nil
}

// wideExecutions are n reports of sinks of a width-wide ALL_TO_ALL edge: one consumed entry per
// input channel, about 50 bytes each.
func wideExecutions(n, width int) []*pb.ExecutionReport {
	out := make([]*pb.ExecutionReport, n)
	for i := range out {
		e := &pb.ExecutionReport{
			JobId: "job", VertexId: "sink", SubtaskIndex: int32(i), AttemptId: fmt.Sprintf("%032x", i),
			State: pb.ExecutionState_EXECUTION_STATE_RUNNING, SlotIndex: int32(i),
		}
		for p := range width {
			e.Consumed = append(e.Consumed, &pb.ConsumedPartitionReport{ResultId: "src->sink", PartitionIndex: int32(p), ProducerAttemptId: fmt.Sprintf("%032x", 1<<20+p)})
		}
		out[i] = e
	}
	return out
}

// newTestCollector returns a collector of a Reconciler working through the port of a real
// term (epoch 1) of a JobMaster over the stub Raft node: the term EstablishLeadership hands
// its reconciler.
func newTestCollector(t *testing.T, cfg Config) *collector {
	t.Helper()
	jm := jobmaster.New(jobmaster.Config{}, stubRaft{}, fsm.New(nil))
	t.Cleanup(jm.Shutdown)
	var port jobmaster.Term
	jm.SetReconciler(reconcilerFunc(func(_ context.Context, term jobmaster.Term) error {
		port = term
		return nil
	}))
	if err := jm.EstablishLeadership(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	return newCollector(New(cfg), port)
}

// reconcilerFunc is a jobmaster.Reconciler that only keeps the port it is given.
type reconcilerFunc func(context.Context, jobmaster.Term) error

func (f reconcilerFunc) Reconcile(ctx context.Context, t jobmaster.Term) error { return f(ctx, t) }

// TestCollectorReadsAReportOver4MiBInByteBoundedChunks: a TM whose report totals more than the
// 4 MiB message limit answers the collector in several chunks, each within the byte budget the
// leader asked for (the limit minus its margin), through the leader's gRPC client with its
// default 4 MiB receive limit; the collector joins every execution, in order.
func TestCollectorReadsAReportOver4MiBInByteBoundedChunks(t *testing.T) {
	execs := wideExecutions(200, 512)
	total := 0
	for _, e := range execs {
		total += proto.Size(e)
	}
	if total <= transport.ChunkedMessageLimit {
		t.Fatalf("the test report is %d bytes, not over the %d-byte limit", total, transport.ChunkedMessageLimit)
	}
	tm := startReportTM(t, "tm1", execs)
	c := newTestCollector(t, Config{})
	rep, err := c.fetch(t.Context(), target{id: "tm1", addr: tm.addr})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Executions) != len(execs) {
		t.Fatalf("collected %d executions, want %d", len(rep.Executions), len(execs))
	}
	for i, e := range rep.Executions {
		if e.AttemptId != execs[i].AttemptId || len(e.Consumed) != 512 {
			t.Fatalf("execution %d: %s with %d consumed entries", i, e.AttemptId, len(e.Consumed))
		}
	}
	tm.mu.Lock()
	defer tm.mu.Unlock()
	asked := tm.asked[0]
	if asked.MaxChunkBytes != int64(transport.ChunkBudget(0)) || asked.ChunkSize != DefaultReportChunk {
		t.Fatalf("asked for chunks of %d bytes and %d executions, want %d and %d", asked.MaxChunkBytes, asked.ChunkSize, transport.ChunkBudget(0), DefaultReportChunk)
	}
	if len(tm.sizes) < 2 {
		t.Fatalf("%d chunks for %d bytes", len(tm.sizes), total)
	}
	for i, n := range tm.sizes {
		if n > transport.ChunkBudget(0) {
			t.Fatalf("chunk %d is %d bytes, over the %d-byte budget", i, n, transport.ChunkBudget(0))
		}
	}
	t.Logf("%d executions, %d bytes, in chunks of %v bytes", len(execs), total, tm.sizes)
}

// TestReportStreamBounds: the collector stops reading a report that passes MaxReportBytes or
// MaxReportExecutions with an error naming the bound, and a stream that stalls is cut by
// ReportStreamTimeout.
func TestReportStreamBounds(t *testing.T) {
	execs := wideExecutions(40, 512) // about 1 MiB
	tm := startReportTM(t, "tm1", execs)
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{MaxReportBytes: 256 << 10, ReportChunkBytes: 64 << 10}, "passed MaxReportBytes (262144 bytes)"},
		{Config{MaxReportExecutions: 25, ReportChunk: 10}, "passed MaxReportExecutions (25 executions) at chunk 2: 30 executions"},
	} {
		c := newTestCollector(t, tc.cfg)
		_, err := c.fetch(t.Context(), target{id: "tm1", addr: tm.addr})
		if !errors.Is(err, ErrReportTooLarge) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "tm1") {
			t.Fatalf("got %v, want ErrReportTooLarge naming %q", err, tc.want)
		}
	}

	stalled := startReportTM(t, "tm2", execs)
	stalled.stall = true
	c := newTestCollector(t, Config{ReportStreamTimeout: 300 * time.Millisecond, ReportChunk: 10})
	start := time.Now()
	_, err := c.fetch(t.Context(), target{id: "tm2", addr: stalled.addr})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("stalled stream: %v, want DeadlineExceeded", err)
	}
	t.Logf("stalled stream cut after %s", time.Since(start).Round(time.Millisecond))
}

// TestRefusedReportIsNotWaitedFor: a TM whose report passes a bound is asked once, counts as
// not reported, and the collection ends without waiting for the report deadline.
func TestRefusedReportIsNotWaitedFor(t *testing.T) {
	big := startReportTM(t, "tm1", wideExecutions(40, 512))
	small := startReportTM(t, "tm2", wideExecutions(2, 4))
	c := newTestCollector(t, Config{MaxReportBytes: 256 << 10, ReportDeadline: time.Minute})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	reports, err := c.collect(ctx, []target{{id: "tm1", addr: big.addr, holds: true}, {id: "tm2", addr: small.addr, holds: true}})
	if err != nil {
		t.Fatal(err)
	}
	if reports["tm1"] != nil || reports["tm2"] == nil || len(reports["tm2"].Executions) != 2 {
		t.Fatalf("reports %v", reports)
	}
	big.mu.Lock()
	defer big.mu.Unlock()
	if big.served != 1 {
		t.Fatalf("the refused TM was asked %d times, want once", big.served)
	}
}

// TestReportStreamRefusesContradictions: an as_expected chunk is taken only as the one last
// chunk, listing nothing, of a stream whose request carried an expectation.
func TestReportStreamRefusesContradictions(t *testing.T) {
	one := []*pb.ExecutionReport{{JobId: "j", AttemptId: "a"}}
	for _, c := range []struct {
		name   string
		expect *transport.ReportDigest
		chunks []*pb.TaskManagerReport
		want   string
	}{
		{"nothing expected", nil, []*pb.TaskManagerReport{{AsExpected: true, Last: true}}, "to a request that expected nothing"},
		{"not the last", &transport.ReportDigest{Count: 3}, []*pb.TaskManagerReport{{AsExpected: true}}, "in chunk 0, which is not the last"},
		{"lists executions", &transport.ReportDigest{Count: 3}, []*pb.TaskManagerReport{{Executions: one}, {AsExpected: true, Last: true, ChunkIndex: 1}}, "and lists 1 executions"},
	} {
		s := &reportStream{tmID: "tm1", maxBytes: 1 << 20, maxExecs: 10, rep: &Report{TMID: "tm1"}, expect: c.expect}
		var err error
		for _, ch := range c.chunks {
			if err = s.add(ch); err != nil {
				break
			}
		}
		if !errors.Is(err, ErrContradictoryReport) || !strings.Contains(fmt.Sprint(err), c.want) || s.rep.AsExpected {
			t.Errorf("%s: want ErrContradictoryReport containing %q, got %v (as expected %v)", c.name, c.want, err, s.rep.AsExpected)
		}
	}
	s := &reportStream{tmID: "tm1", maxBytes: 1 << 20, maxExecs: 10, rep: &Report{TMID: "tm1"}, expect: &transport.ReportDigest{Count: 3}}
	if err := s.add(&pb.TaskManagerReport{AsExpected: true, Last: true}); err != nil || !s.rep.AsExpected || s.rep.Expected != 3 {
		t.Fatalf("a good answer: %v, %+v", err, s.rep)
	}
}
