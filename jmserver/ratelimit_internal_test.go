package jmserver

import (
	"context"
	"fmt"
	"testing"
	"time"
)

type keyCtx struct{}

func keyed(k string) context.Context { return context.WithValue(context.Background(), keyCtx{}, k) }

func testLimiter(cfg WriteLimit) (*writeLimiter, *time.Time) {
	cfg.Key = func(ctx context.Context) string { return ctx.Value(keyCtx{}).(string) }
	l := newWriteLimiter(cfg)
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }
	return l, &now
}

// TestWriteLimiterTable: each case is one client's calls at given offsets and the expected
// admissions and retry-afters.
func TestWriteLimiterTable(t *testing.T) {
	l, now := testLimiter(WriteLimit{Rate: 2, Burst: 2})
	steps := []struct {
		at    time.Duration // since the start
		key   string
		retry time.Duration // 0: admitted
	}{
		{0, "a", 0},
		{0, "a", 0},
		{0, "a", 500 * time.Millisecond}, // empty: one token every 500ms
		{0, "b", 0},                      // another client is not affected
		{100 * time.Millisecond, "a", 400 * time.Millisecond},
		{500 * time.Millisecond, "a", 0}, // refusals took nothing
		{500 * time.Millisecond, "a", 500 * time.Millisecond},
	}
	start := *now
	for i, s := range steps {
		*now = start.Add(s.at)
		if got := l.take(s.key); got != s.retry {
			t.Fatalf("step %d (%s at %s): retry %s, want %s", i, s.key, s.at, got, s.retry)
		}
	}
	if err := l.admit(keyed("a")); err == nil {
		t.Fatal("admit over the limit returned nil")
	}
}

// TestWriteLimiterBounded: the limiters kept never exceed MaxClients, and a client idle for a
// full refill is forgotten (its bucket was full, so nothing is lost).
func TestWriteLimiterBounded(t *testing.T) {
	l, now := testLimiter(WriteLimit{Rate: 1, Burst: 5, MaxClients: 100})
	for i := 0; i < 1000; i++ {
		l.take(fmt.Sprintf("c%d", i))
		if n := l.clients(); n > 100 {
			t.Fatalf("%d limiters kept after %d clients, bound 100", n, i+1)
		}
	}
	*now = now.Add(5 * time.Second) // a full refill of every bucket
	l.take("fresh")
	if n := l.clients(); n != 1 {
		t.Fatalf("%d limiters kept after every other client was idle for a full refill", n)
	}
	if off := newWriteLimiter(WriteLimit{Rate: -1}); off != nil || off.admit(keyed("x")) != nil {
		t.Fatal("a negative rate must turn the limit off")
	}
}
