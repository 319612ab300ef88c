package jobmaster

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestRefusalsProveDeathOnlyInARunSpanningTheWindow: the registry proves a TM dead only after
// n refused probes in a row of its registered incarnation, spanning at least the window; a
// probe that is not refused ends the run; a probe of another incarnation or address counts
// nothing; the proof is returned once, names the refusals, and a direct contact clears it.
func TestRefusalsProveDeathOnlyInARunSpanningTheWindow(t *testing.T) {
	r := newRegistry(hclog.NewNullLogger(), time.Second, 0)
	if _, err := r.Register("tm1", "aaaa", "127.0.0.1:1", "127.0.0.1:2", 4); err != nil {
		t.Fatal(err)
	}
	const n, window = 3, 300 * time.Millisecond
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	probe := func(inc, addr string, refused bool, ms int) bool {
		_, ok := r.probed("tm1", inc, addr, refused, at(ms), n, window)
		return ok
	}
	steps := []struct {
		name    string
		inc     string
		refused bool
		ms      int
		proved  bool
	}{
		{"first refusal", "aaaa", true, 0, false},
		{"second refusal", "aaaa", true, 150, false},
		{"a connect that did not fail ends the run", "aaaa", false, 200, false},
		{"the run starts again", "aaaa", true, 250, false},
		{"two more", "aaaa", true, 300, false},
		{"three in a row, but over 100ms only", "aaaa", true, 350, false},
		{"another incarnation's probe counts nothing", "bbbb", true, 600, false},
		{"four in a row over 300ms", "aaaa", true, 550, true},
		{"proven once", "aaaa", true, 700, false},
	}
	for _, s := range steps {
		if got := probe(s.inc, "127.0.0.1:1", s.refused, s.ms); got != s.proved {
			t.Fatalf("%s: proved %v, want %v", s.name, got, s.proved)
		}
	}
	tm, _ := r.Get("tm1")
	if !strings.Contains(tm.Dead, "connection refused 4 times over 300ms") || !tm.DeadAt.Equal(at(550)) {
		t.Fatalf("proof %q at %v, want 4 refusals over 300ms at +550ms", tm.Dead, tm.DeadAt.Sub(t0))
	}
	if len(r.Usable(time.Minute)) != 0 {
		t.Fatal("a TM proven dead is usable for placement")
	}
	if !r.Touch("tm1") {
		t.Fatal("touch")
	}
	if tm, _ := r.Get("tm1"); tm.Dead != "" {
		t.Fatalf("a heartbeat after the proof left it: %q", tm.Dead)
	}
	if probe("aaaa", "127.0.0.1:9", true, 800) {
		t.Fatal("a refusal at another address than the registered one counted")
	}
}

// TestProbeCountsOnlyRefusals: a probe of a closed port is refused (ECONNREFUSED) and one of
// an open port is not; a TM whose port is closed is proven dead after DeadRefusals probes.
func TestProbeCountsOnlyRefusals(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	open := l.Addr().String()
	defer l.Close()
	l2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l2.Addr().String()
	l2.Close()
	if _, err := net.Dial("tcp", closed); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Skipf("a connect to a closed loopback port gave %v, not ECONNREFUSED", err)
	}
	jm := New(Config{DeadRefusals: 2, DeadRefusalWindow: time.Nanosecond}, nil, nil)
	tr := newTerm(context.Background(), jm, 1)
	defer tr.stop()
	for _, tc := range []struct{ id, addr string }{{"open", open}, {"closed", closed}} {
		if _, err := jm.tms.Register(tc.id, "inc", tc.addr, "127.0.0.1:1", 1); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			tr.watch.probe(tc.id, tc.addr, "inc")
		}
	}
	if tm, _ := jm.tms.Get("open"); tm.Dead != "" {
		t.Fatalf("a TM whose port accepts connections was proven dead: %s", tm.Dead)
	}
	if tm, _ := jm.tms.Get("closed"); !strings.Contains(tm.Dead, "connection refused") {
		t.Fatalf("a TM whose port is closed: proof %q, want refused connections", tm.Dead)
	}
}

// TestStallRestartsLivenessTimers: a term whose pulse did not run for more than a heartbeat
// interval (the process was stopped) restarts its liveness timers, so a TM last seen before
// the stall counts its silence from the end of the stall and is not declared lost for it.
func TestStallRestartsLivenessTimers(t *testing.T) {
	jm := New(Config{HeartbeatInterval: 100 * time.Millisecond, HeartbeatTimeout: 300 * time.Millisecond}, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	tr := &term{jm: jm, epoch: 1, ctx: ctx, cancel: cancel}
	tr.watch = newTMWatch(tr)
	defer tr.stop()
	start := time.Now()
	tr.watch.since, tr.watch.beat = start, start
	seen := TaskManager{ID: "tm1", LastSeen: start}
	now := start.Add(time.Second) // a second without a beat: the process was stopped
	if tr.watch.awake(now) {
		t.Fatal("a gap of 10 heartbeat intervals was not taken for a stall")
	}
	if got := tr.watch.lastContact(seen); !got.Equal(now) {
		t.Fatalf("silence counts from %v, want the end of the stall (%v)", got.Sub(start), now.Sub(start))
	}
	if !tr.watch.awake(now.Add(50 * time.Millisecond)) {
		t.Fatal("a gap under a heartbeat interval was taken for a stall")
	}
}

// verifierRaft is a Raft whose VerifyLeader answers what the test sends it.
type verifierRaft struct {
	Raft
	answers chan error
	calls   atomic.Int64
}

func (v *verifierRaft) VerifyLeader(ctx context.Context) error {
	v.calls.Add(1)
	select {
	case err := <-v.answers:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestStalledLeaderAnswersTaskManagersOnceConfirmed: after a stall a leader answers no TM's
// heartbeat or registration (ErrVerifyingLeadership) until a quorum confirms it still leads:
// not while its confirmation fails (a deposed leader fails it and steps down), and again as
// soon as one succeeds. Without a stall it answers at once.
func TestStalledLeaderAnswersTaskManagersOnceConfirmed(t *testing.T) {
	raft := &verifierRaft{answers: make(chan error)}
	jm := New(Config{HeartbeatInterval: 100 * time.Millisecond, HeartbeatTimeout: 300 * time.Millisecond, RetryAfter: 10 * time.Millisecond}, raft, nil)
	ctx, cancel := context.WithCancel(context.Background())
	tr := &term{jm: jm, epoch: 1, ctx: ctx, cancel: cancel}
	tr.watch = newTMWatch(tr)
	defer tr.stop()
	start := time.Now()
	tr.watch.since, tr.watch.beat = start, start
	if err := tr.watch.answersTaskManagers(start.Add(50 * time.Millisecond)); err != nil {
		t.Fatalf("no stall: %v", err)
	}
	resumed := start.Add(time.Second) // a second without a beat: the process was stopped
	if err := tr.watch.answersTaskManagers(resumed); !errors.Is(err, ErrVerifyingLeadership) || !errors.Is(err, ErrNotLeader) {
		t.Fatalf("right after the stall: %v, want ErrVerifyingLeadership", err)
	}
	raft.answers <- errors.New("leadership lost") // the first confirmation fails
	if err := tr.watch.answersTaskManagers(resumed.Add(time.Millisecond)); !errors.Is(err, ErrVerifyingLeadership) {
		t.Fatalf("after a failed confirmation: %v, want ErrVerifyingLeadership", err)
	}
	raft.answers <- nil // the retry succeeds
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := tr.watch.answersTaskManagers(resumed.Add(2 * time.Millisecond))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10s after a successful confirmation: %v (%d confirmations asked)", err, raft.calls.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := raft.calls.Load(); n != 2 {
		t.Fatalf("%d confirmations asked, want 2 (one failed, one succeeded)", n)
	}
}

// TestCallFailedIsTransportOnly: transport failures and timeouts make a TM worth probing; an
// answer of the TM (a refusal by its logic) does not.
func TestCallFailedIsTransportOnly(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{status.Error(codes.Unavailable, "connection refused"), true},
		{status.Error(codes.DeadlineExceeded, "deadline"), true},
		{context.DeadlineExceeded, true},
		{status.Error(codes.FailedPrecondition, "stale epoch"), false},
		{status.Error(codes.InvalidArgument, "bad"), false},
	} {
		if got := callFailed(c.err); got != c.want {
			t.Errorf("callFailed(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
