package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/jepsen-style/checker"
	"github.com/jmcluster/jmcluster/jepsen-style/history"
	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// store is a linearizable in-memory job API shared by the fake JMs.
type store struct {
	mu   sync.Mutex
	jobs map[string]pb.JobStatus
}

type fakeJM struct {
	pb.UnimplementedClientServiceServer
	pb.UnimplementedOperatorServiceServer
	id string
	s  *store
}

func (f *fakeJM) SubmitJob(_ context.Context, req *pb.SubmitJobRequest) (*pb.SubmitJobResponse, error) {
	f.s.mu.Lock()
	defer f.s.mu.Unlock()
	id := req.GetJobGraph().GetJobId()
	if _, ok := f.s.jobs[id]; ok {
		return nil, status.Error(codes.AlreadyExists, "exists")
	}
	f.s.jobs[id] = pb.JobStatus_JOB_STATUS_RUNNING
	return &pb.SubmitJobResponse{JobId: id}, nil
}

func (f *fakeJM) CancelJob(_ context.Context, req *pb.CancelJobRequest) (*pb.CancelJobResponse, error) {
	f.s.mu.Lock()
	defer f.s.mu.Unlock()
	if _, ok := f.s.jobs[req.GetJobId()]; !ok {
		return nil, status.Error(codes.NotFound, "no job")
	}
	f.s.jobs[req.GetJobId()] = pb.JobStatus_JOB_STATUS_CANCELED
	return &pb.CancelJobResponse{Status: pb.JobStatus_JOB_STATUS_CANCELED}, nil
}

func (f *fakeJM) GetJob(_ context.Context, req *pb.GetJobRequest) (*pb.GetJobResponse, error) {
	f.s.mu.Lock()
	defer f.s.mu.Unlock()
	st, ok := f.s.jobs[req.GetJobId()]
	if !ok {
		return nil, status.Error(codes.NotFound, "no job")
	}
	return &pb.GetJobResponse{Job: &pb.JobRecord{Status: st}, ServedBy: f.id}, nil
}

func (f *fakeJM) ClusterStatus(context.Context, *pb.ClusterStatusRequest) (*pb.ClusterStatusResponse, error) {
	state := "Follower"
	if f.id == "jm2" {
		state = "Leader"
	}
	return &pb.ClusterStatusResponse{NodeId: f.id, LeaderId: "jm2", Epoch: 4, RaftState: state}, nil
}

func (f *fakeJM) StateHash(context.Context, *pb.StateHashRequest) (*pb.StateHashResponse, error) {
	f.s.mu.Lock()
	defer f.s.mu.Unlock()
	return &pb.StateHashResponse{Hash: "h", AppliedIndex: uint64(len(f.s.jobs)), NodeId: f.id}, nil
}

func startFakes(t *testing.T) map[string]string {
	t.Helper()
	s := &store{jobs: map[string]pb.JobStatus{}}
	addrs := map[string]string{}
	for _, id := range []string{"jm1", "jm2", "jm3"} {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer()
		fj := &fakeJM{id: id, s: s}
		pb.RegisterClientServiceServer(srv, fj)
		pb.RegisterOperatorServiceServer(srv, fj)
		go func() { _ = srv.Serve(lis) }()
		t.Cleanup(srv.Stop)
		addrs[id] = lis.Addr().String()
	}
	return addrs
}

// waitFor polls cond until it holds or the deadline passes, then fails with what it last saw.
func waitFor(t *testing.T, d time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.After(d)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, seen := cond()
		if ok {
			return
		}
		select {
		case <-deadline:
			t.Fatalf("condition not met after %s; last seen: %s", d, seen)
		case <-tick.C:
		}
	}
}

func TestGeneratorAgainstLinearizableFake(t *testing.T) {
	pool, err := NewPool(startFakes(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	rec := history.NewRecorder(nil)
	gen := NewGenerator(GeneratorConfig{Processes: 3, Seed: 5, MinPause: time.Millisecond, MaxPause: 2 * time.Millisecond}, pool, rec)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { gen.Run(ctx); close(done) }()
	waitFor(t, 10*time.Second, func() (bool, string) {
		n := len(rec.Ops())
		return n >= 120, fmt.Sprintf("%d ops", n)
	})
	cancel()
	<-done

	calls, err := history.Pair(rec.Ops())
	if err != nil {
		t.Fatal(err)
	}
	fs := map[history.F]int{}
	for _, c := range calls {
		fs[c.F]++
		if c.Type == history.Info {
			t.Fatalf("indeterminate op against a healthy fake: %+v", c)
		}
	}
	if fs[history.Submit] == 0 || fs[history.Cancel] == 0 || fs[history.Read] == 0 {
		t.Fatalf("op mix = %v", fs)
	}
	if r, _ := checker.Linearizable(calls, 10*time.Second); r.Verdict != checker.Pass {
		t.Fatalf("linearizable: %+v", r)
	}
	final := FinalReads(context.Background(), pool, gen.JobIDs())
	if r := checker.NoLostSubmissions(calls, final); r.Verdict != checker.Pass {
		t.Fatalf("lost: %+v", r)
	}
	hctx, hcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer hcancel()
	if r := checker.StateHashes(HashRounds(hctx, pool), 3); r.Verdict != checker.Pass {
		t.Fatalf("state hash: %+v", r)
	}
	mon := NewMonitor(pool, gen.JobIDs()[0], 0, nil)
	if l := mon.Leader(context.Background()); l != "jm2" {
		t.Fatalf("leader = %q", l)
	}
	mon.Poll(context.Background())
	if len(mon.Observations()) != 3 || len(mon.JobStatuses()) != 1 {
		t.Fatalf("monitor saw %d observations, %d statuses", len(mon.Observations()), len(mon.JobStatuses()))
	}
}

func TestClassify(t *testing.T) {
	cases := []struct {
		err  error
		want history.Type
	}{
		{nil, history.OK},
		{status.Error(codes.InvalidArgument, "bad"), history.Fail},
		{status.Error(codes.NotFound, "no"), history.Fail},
		{transport.NotLeaderError("10.77.0.12:7100"), history.Info},
		{transport.ReconcilingError(time.Second), history.Info},
		{status.Error(codes.DeadlineExceeded, "slow"), history.Info},
		{errors.New("eof"), history.Info},
	}
	for _, c := range cases {
		if got, _ := Classify(c.err); got != c.want {
			t.Errorf("Classify(%v) = %s, want %s", c.err, got, c.want)
		}
	}
	if _, v := Classify(transport.ReconcilingError(time.Second)); v.Reason != transport.ReasonReconciling {
		t.Fatalf("reason = %q", v.Reason)
	}
	if typ, v := ClassifyRead(nil, status.Error(codes.NotFound, "no")); typ != history.OK || v.Found {
		t.Fatalf("read NOT_FOUND = %s %+v", typ, v)
	}
}
