package dataplane

import (
	"context"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/operator"
)

// TestBlockedTimeCountsTheWaitForSpace: a producer's Add on a full PIPELINED subpartition
// counts its wait in the partition's BlockedTime, the wait in progress included (a consumer
// that never takes shows as blocked all along), and stops counting once the reader takes.
func TestBlockedTimeCountsTheWaitForSpace(t *testing.T) {
	p := lonePartition("a")
	var b BlockedTime
	p.CountBlocked(&b)
	ctx := context.Background()
	for i := range pipelinedBuffer {
		if err := p.Add(ctx, operator.Record{Value: operator.Int64Bytes(int64(i))}); err != nil {
			t.Fatal(err)
		}
	}
	if b.Total() != 0 {
		t.Fatalf("blocked %s before any add waited", b.Total())
	}
	done := make(chan error, 1)
	go func() { done <- p.Add(ctx, operator.Record{Value: operator.Int64Bytes(-1)}) }()
	deadline := time.Now().Add(10 * time.Second)
	for b.Total() < 10*time.Millisecond {
		if time.Now().After(deadline) {
			t.Fatalf("the waiting add counts %s after 10s", b.Total())
		}
		select {
		case err := <-done:
			t.Fatalf("the add on a full subpartition returned %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	sp := p.subs[0]
	sp.mu.Lock()
	sp.take(nil, 1)
	sp.mu.Unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	after := b.Total()
	if after < 10*time.Millisecond || b.Total() != after {
		t.Fatalf("blocked %s, then %s once the add returned; want at least 10ms, then no more", after, b.Total())
	}
}
