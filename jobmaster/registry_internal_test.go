package jobmaster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/internal/failpoint"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestRegistryIncarnations: a TM restarted with the same id and addresses registers a new
// incarnation. The registry forgets what it knew of the earlier process (its gossip death, the
// lost flag), so the new one is usable at once; it returns the earlier incarnation (whose
// attempts the caller fails); gossip about the earlier incarnation no longer counts; and the
// earlier incarnation can neither register nor heartbeat again.
func TestRegistryIncarnations(t *testing.T) { registryIncarnations(t) }

// TestNoIncarnationIsCaught: with the planted bug no-incarnation the registry takes the
// restarted TM for the dead process, and TestRegistryIncarnations' check sees it.
func TestNoIncarnationIsCaught(t *testing.T) {
	failpoint.Set(t, failpoint.NoIncarnation.Name())
	rec := &recordingT{TB: t}
	func() {
		defer func() { _ = recover() }() // Fatalf of the recording T ends the check
		registryIncarnations(rec)
	}()
	if rec.failure == "" {
		t.Fatal("with no-incarnation planted, the incarnation check passed: it cannot catch the bug")
	}
	t.Logf("caught: %s", rec.failure)
}

// recordingT records the first failure of a check instead of failing the test.
type recordingT struct {
	testing.TB
	failure string
}

func (r *recordingT) Fatalf(format string, args ...any) {
	r.failure = fmt.Sprintf(format, args...)
	panic(r.failure)
}

func (r *recordingT) Fatal(args ...any) {
	r.failure = fmt.Sprint(args...)
	panic(r.failure)
}

func registryIncarnations(t testing.TB) {
	r := newRegistry(hclog.NewNullLogger(), time.Second, 0)
	defer r.close()
	if prev, err := r.Register("tm2", "aaaa", "127.0.0.1:1", "127.0.0.1:2", 4); err != nil || prev != "" {
		t.Fatalf("first registration: %q %v", prev, err)
	}
	// The process dies: gossip says so, the leader declares it lost.
	r.SetGossipOf("tm2", "aaaa", "dead")
	r.MarkLost("tm2")
	if tm, _ := r.Get("tm2"); !tm.Lost || !tm.GoneByGossip() || len(r.Usable(time.Minute)) != 0 {
		t.Fatalf("after the death: %+v", tm)
	}
	// It restarts with a new incarnation and registers.
	prev, err := r.Register("tm2", "bbbb", "127.0.0.1:1", "127.0.0.1:2", 4)
	if err != nil || prev != "aaaa" {
		t.Fatalf("registration of the new incarnation: previous %q, %v", prev, err)
	}
	// Gossip still carries the dead process for a while (and the restarted member's alive can
	// lose to it until it refutes): that news is about the old incarnation.
	r.SetGossipOf("tm2", "aaaa", "dead")
	tm, _ := r.Get("tm2")
	if tm.Lost || tm.GoneByGossip() || tm.Incarnation != "bbbb" || len(r.Usable(time.Minute)) != 1 {
		t.Fatalf("the new incarnation is not usable at once: %+v", tm)
	}
	// The old incarnation cannot come back.
	if _, err := r.Register("tm2", "aaaa", "127.0.0.1:1", "127.0.0.1:2", 4); !errors.Is(err, ErrReplacedIncarnation) {
		t.Fatalf("registration of the replaced incarnation: %v", err)
	}
	if r.TouchOf("tm2", "aaaa") || !r.TouchOf("tm2", "bbbb") {
		t.Fatal("heartbeats: the replaced incarnation accepted or the registered one refused")
	}
	// Gossip about the registered incarnation still counts.
	r.SetGossipOf("tm2", "bbbb", "left")
	if tm, _ := r.Get("tm2"); tm.Gossip != "left" {
		t.Fatalf("gossip of the registered incarnation ignored: %+v", tm)
	}
	// The same incarnation registering again (a re-registration after a leader change) replaces
	// nothing.
	if prev, err := r.Register("tm2", "bbbb", "127.0.0.1:1", "127.0.0.1:2", 4); err != nil || prev != "" {
		t.Fatalf("re-registration: %q %v", prev, err)
	}
}

// TestBrokenConnectionMakesATaskManagerSuspect: when the leader's ready connection to a TM
// breaks (here the TM's gRPC server stops, as when its process ends), the registry marks the TM
// worth probing at once, without a failed call or a late heartbeat. A call the TM answers, even
// with an error, marks nothing.
func TestBrokenConnectionMakesATaskManagerSuspect(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterTaskManagerServiceServer(srv, pb.UnimplementedTaskManagerServiceServer{})
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	r := newRegistry(hclog.NewNullLogger(), 5*time.Second, 0)
	defer r.close()
	addr := lis.Addr().String()
	if _, err := r.Register("tm1", "aaaa", addr, "127.0.0.1:1", 4); err != nil {
		t.Fatal(err)
	}
	err = r.Call(context.Background(), addr, func(ctx context.Context, c pb.TaskManagerServiceClient) error {
		_, err := c.CancelTask(ctx, &pb.CancelTaskRequest{})
		return err
	})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("call: %v", err)
	}
	if tm, _ := r.Get("tm1"); !tm.CallFailedAt.IsZero() {
		t.Fatalf("an answered call marked the TM: %v", tm.CallFailedAt)
	}
	stopped := time.Now()
	srv.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for {
		tm, _ := r.Get("tm1")
		if !tm.CallFailedAt.IsZero() {
			if tm.CallFailedAt.Before(stopped) {
				t.Fatalf("marked at %v, before the server stopped at %v", tm.CallFailedAt, stopped)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("10s after the TM's server stopped, the broken connection has not marked it (CallFailedAt %v)", tm.CallFailedAt)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestNewProcessAfterAProofOfDeathIsNoBrokenAssumption: a leader that knew a TM without an
// incarnation (from the pool or gossip) proves it dead by refused connections; the TM's new
// process then registers. That is the expected sequel of a death, not a TM that came back
// from a proof: no warning, and the proof is gone. The same incarnation talking again is the
// broken assumption, and is logged.
func TestNewProcessAfterAProofOfDeathIsNoBrokenAssumption(t *testing.T) {
	var buf strings.Builder
	var mu sync.Mutex
	log := hclog.New(&hclog.LoggerOptions{Output: &lockedWriter{w: &buf, mu: &mu}, Level: hclog.Warn})
	r := newRegistry(log, time.Second, 0)
	defer r.close()
	r.Upsert("tm1", "127.0.0.1:1", "127.0.0.1:2", 4, false)
	at := time.Now()
	for i := 0; i < 3; i++ {
		r.probed("tm1", "", "127.0.0.1:1", true, at.Add(time.Duration(i)*200*time.Millisecond), 3, 300*time.Millisecond)
	}
	if tm, _ := r.Get("tm1"); tm.Dead == "" {
		t.Fatal("three refusals over 400ms proved nothing")
	}
	if _, err := r.Register("tm1", "bbbb", "127.0.0.1:1", "127.0.0.1:2", 4); err != nil {
		t.Fatal(err)
	}
	if tm, _ := r.Get("tm1"); tm.Dead != "" {
		t.Fatalf("the new process still carries the proof: %s", tm.Dead)
	}
	mu.Lock()
	logged := buf.String()
	mu.Unlock()
	if strings.Contains(logged, "reached the leader again") {
		t.Fatalf("a new process registering was logged as a broken assumption:\n%s", logged)
	}
	// The same process (bbbb) proven dead and then heard from: that is worth the warning.
	for i := 0; i < 3; i++ {
		r.probed("tm1", "bbbb", "127.0.0.1:1", true, at.Add(time.Second+time.Duration(i)*200*time.Millisecond), 3, 300*time.Millisecond)
	}
	r.Touch("tm1")
	mu.Lock()
	logged = buf.String()
	mu.Unlock()
	if !strings.Contains(logged, "reached the leader again") {
		t.Fatalf("the proven-dead process talking again was not logged:\n%s", logged)
	}
}

type lockedWriter struct {
	w  *strings.Builder
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
