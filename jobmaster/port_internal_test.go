package jobmaster

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// cancelTM counts the CancelTask calls it gets; the first failUntil calls fail (UNAVAILABLE).
type cancelTM struct {
	pb.UnimplementedTaskManagerServiceServer
	mu        sync.Mutex
	calls     []string
	failUntil int
}

func (s *cancelTM) CancelTask(_ context.Context, req *pb.CancelTaskRequest) (*pb.CancelTaskResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, fmt.Sprintf("%s@%d", req.AttemptId, req.Epoch))
	if len(s.calls) <= s.failUntil {
		return nil, status.Error(codes.Unavailable, "not now")
	}
	return &pb.CancelTaskResponse{State: pb.ExecutionState_EXECUTION_STATE_CANCELED}, nil
}

func (s *cancelTM) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.calls...)
}

// serveCancelTM serves tm's TaskManagerService on a loopback port and returns its address.
func serveCancelTM(t *testing.T, tm *cancelTM) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterTaskManagerServiceServer(srv, tm)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// leadingJM is a JobMaster over a local Raft that has established leadership at epoch; the
// reconciler keeps the term's port.
func leadingJM(t *testing.T, epoch uint64) (*fsm.FSM, *JobMaster, *portReconciler) {
	t.Helper()
	f := fsm.New(nil)
	jm := New(Config{TickInterval: 10 * time.Millisecond}, &localRaft{f: f}, f)
	t.Cleanup(jm.Shutdown)
	rc := &portReconciler{}
	jm.SetReconciler(rc)
	if err := jm.EstablishLeadership(context.Background(), epoch); err != nil {
		t.Fatal(err)
	}
	return f, jm, rc
}

// portReconciler keeps the port EstablishLeadership hands it.
type portReconciler struct{ t Term }

func (p *portReconciler) Reconcile(_ context.Context, t Term) error { p.t = t; return nil }

// TestReconciliationCancelsThroughTheTermsPath: the port's Cancel is the scheduler's own
// cancel path: an attempt cancelled by reconciliation and then found again in a heartbeat's
// deployment report gets one CancelTask per term, fenced with the term's epoch; a failed call
// is sent again on the next request; nothing is committed for it.
func TestReconciliationCancelsThroughTheTermsPath(t *testing.T) {
	tm := &cancelTM{failUntil: 1}
	addr := serveCancelTM(t, tm)
	f, jm, rc := leadingJM(t, 7)
	if rc.t == nil || rc.t.Epoch() != 7 {
		t.Fatalf("port %v, want the term of epoch 7", rc.t)
	}
	term, err := jm.currentTerm()
	if err != nil {
		t.Fatal(err)
	}

	rc.t.Cancel("job", "a1", addr) // fails (UNAVAILABLE): may be sent again
	waitFor(t, 10*time.Second, "the failed CancelTask to be forgotten", func() (bool, string) {
		term.mu.Lock()
		defer term.mu.Unlock()
		_, sent := term.cancelSent[cancelKey{"a1", addr}]
		return len(tm.seen()) == 1 && !sent, fmt.Sprintf("calls %v", tm.seen())
	})
	rc.t.Cancel("job", "a1", addr)
	waitFor(t, 10*time.Second, "the second CancelTask to complete", func() (bool, string) {
		return jm.ForeignCancels() == 1, fmt.Sprintf("calls %v, foreign cancels %d", tm.seen(), jm.ForeignCancels())
	})
	// Sent once per term from now on, whichever path asks.
	rc.t.Cancel("job", "a1", addr)
	term.cancelOnTM(addr, "job", "a1")
	jm.RevokeLeadership() // waits for every call of the term
	if got := tm.seen(); len(got) != 2 || got[0] != "a1@7" || got[1] != "a1@7" {
		t.Fatalf("CancelTask calls %v, want two (one failed, one completed), both with epoch 7", got)
	}
	if n := len(f.JobIDs()); n != 0 {
		t.Fatalf("%d jobs committed", n)
	}
	// A stopped term starts no call.
	rc.t.Cancel("job", "a2", addr)
	if got := tm.seen(); len(got) != 2 {
		t.Fatalf("a stopped term sent CancelTask: %v", got)
	}
}

// TestTermForgetsOldCancelsAndMissingCounts: what a term remembers per attempt is bounded. A
// cancel sent is remembered (not sent again) for ackedRetention and then forgotten, so a term
// that cancels attempts for hours does not grow without end; a missing-heartbeat count of an
// attempt that is no current attempt of any job is dropped on the next prune. Before, both maps
// only grew for the whole term.
func TestTermForgetsOldCancelsAndMissingCounts(t *testing.T) {
	tm := &cancelTM{}
	addr := serveCancelTM(t, tm)
	_, jm, rc := leadingJM(t, 3)
	term, err := jm.currentTerm()
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	for i := range n {
		rc.t.Cancel("job", fmt.Sprintf("a%d", i), addr)
	}
	waitFor(t, 10*time.Second, "every CancelTask answered", func() (bool, string) {
		return jm.ForeignCancels() == n, fmt.Sprintf("%d answered", jm.ForeignCancels())
	})
	term.mu.Lock()
	for i := range n {
		term.missing[fmt.Sprintf("gone%d", i)] = 1 // attempts the graph does not have
	}
	term.mu.Unlock()
	sizes := func() (int, int) {
		term.mu.Lock()
		defer term.mu.Unlock()
		return len(term.cancelSent), len(term.missing)
	}

	term.prune(time.Now())
	if sent, missing := sizes(); sent != n || missing != 0 {
		t.Fatalf("after a prune now: %d cancels remembered (want %d: within the retention each is sent once), %d missing counts (want 0)", sent, n, missing)
	}
	rc.t.Cancel("job", "a0", addr)
	term.prune(time.Now().Add(ackedRetention + time.Second))
	if sent, _ := sizes(); sent != 0 {
		t.Fatalf("after the retention: %d cancels remembered, want 0", sent)
	}
	rc.t.Cancel("job", "a0", addr) // forgotten: sent again
	waitFor(t, 10*time.Second, "the forgotten cancel sent again", func() (bool, string) {
		return jm.ForeignCancels() == n+1, fmt.Sprintf("%d answered, calls %d", jm.ForeignCancels(), len(tm.seen()))
	})
}
