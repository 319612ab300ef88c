package reconcile

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/jobmaster"
)

// stuckAckTerm is a real term's port whose acknowledgements hang until released, as calls to
// TMs that do not answer, counting how many are in flight at once.
type stuckAckTerm struct {
	jobmaster.Term
	release chan struct{}

	mu            sync.Mutex
	inFlight, max int
	done          []string
}

func (s *stuckAckTerm) Ack(ctx context.Context, addr string, _ []string) error {
	s.mu.Lock()
	s.inFlight++
	s.max = max(s.max, s.inFlight)
	s.mu.Unlock()
	select {
	case <-s.release:
	case <-ctx.Done():
	}
	s.mu.Lock()
	s.inFlight--
	s.done = append(s.done, addr)
	s.mu.Unlock()
	return nil
}

func (s *stuckAckTerm) state() (inFlight, maxInFlight, done int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inFlight, s.max, len(s.done)
}

// TestActDoesNotWaitForAcknowledgements: what a committed plan decided is carried out without
// holding the gate: act returns while every acknowledgement hangs (TMs that do not answer),
// and at most maxParallelAcks are in flight. Before, act sent them one at a time and
// returned only after the last, so N unreachable TMs kept the gate closed N call deadlines.
func TestActDoesNotWaitForAcknowledgements(t *testing.T) {
	col := newTestCollector(t, Config{})
	term := &stuckAckTerm{Term: col.t, release: make(chan struct{})}
	const tms = 3 * maxParallelAcks
	plan := &Plan{Acks: map[string][]string{}}
	for i := range tms {
		plan.Acks[fmt.Sprintf("127.0.0.1:%d", 20000+i)] = []string{fmt.Sprintf("attempt-%d", i)}
	}
	returned := make(chan struct{})
	go func() { col.r.act(t.Context(), term, plan); close(returned) }()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		n, _, _ := term.state()
		t.Fatalf("act has not returned after 10 s with %d acknowledgements hanging", n)
	}
	waitUntil(t, 10*time.Second, fmt.Sprintf("%d acknowledgements in flight", maxParallelAcks), func() (bool, string) {
		n, m, _ := term.state()
		return n == maxParallelAcks, fmt.Sprintf("%d in flight, at most %d", n, m)
	})
	close(term.release)
	waitUntil(t, 10*time.Second, "every acknowledgement sent", func() (bool, string) {
		_, m, d := term.state()
		return d == tms, fmt.Sprintf("%d done, at most %d in flight", d, m)
	})
	if _, m, _ := term.state(); m != maxParallelAcks {
		t.Fatalf("%d acknowledgements in flight at once, want at most (and, with %d TMs, exactly) %d", m, tms, maxParallelAcks)
	}
}

// waitUntil polls cond until it holds or the timeout passes, then fails with what it last saw.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, seen := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s; last seen: %s", timeout, what, seen)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
