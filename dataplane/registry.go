package dataplane

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// registry holds the partitions this TM serves.
type registry struct {
	mu    sync.RWMutex
	parts map[PartitionKey]*Partition
	// waiters: consumers waiting for a partition to be registered (awaitFunc), called by add.
	waiters map[PartitionKey][]*partitionWaiter
}

// partitionWaiter is one wait for a partition: fn is called once, with the partition when it
// is registered or with what is there when the wait ends, unless the wait was stopped first.
// Stopping never waits for a fn that runs (its caller may hold a lock fn takes): fn copes with
// coming late.
type partitionWaiter struct {
	fn    func(*Partition)
	ended atomic.Bool // fired or stopped
	timer *time.Timer
}

func (w *partitionWaiter) fire(p *Partition) {
	if w.ended.CompareAndSwap(false, true) {
		w.timer.Stop()
		w.fn(p)
	}
}

func newRegistry() *registry {
	return &registry{parts: map[PartitionKey]*Partition{}, waiters: map[PartitionKey][]*partitionWaiter{}}
}

func (r *registry) add(p *Partition) {
	r.addLater(p)()
}

// addLater registers p and returns the call that answers the consumers already waiting for it
// (a wide partition's may be hundreds): a producer reports RUNNING first, then answers them.
func (r *registry) addLater(p *Partition) (answer func()) {
	r.mu.Lock()
	r.parts[p.key] = p
	ws := r.waiters[p.key]
	delete(r.waiters, p.key)
	r.mu.Unlock()
	return func() {
		for _, w := range ws {
			w.fire(p)
		}
	}
}

// awaitFunc calls fn with the partition of a named producer attempt once the producer
// registered it, waiting up to wait (then fn gets nil): a consumer deployed with its producer
// usually asks first, and answering NotFound at once made it poll (a round trip and a backoff
// per channel). Nothing waits in a goroutine: fn runs in the registering producer's goroutine
// or in the timer's, and must not block. fn runs at once, in the caller's goroutine, when the
// partition is there (or no attempt is named). The returned stop ends the wait without fn.
func (r *registry) awaitFunc(job, result string, index int32, attempt string, wait time.Duration, fn func(*Partition)) (stop func()) {
	if p := r.lookup(job, result, index, attempt); p != nil || attempt == "" || wait <= 0 {
		fn(p)
		return func() {}
	}
	k := PartitionKey{job, result, index, attempt}
	w := &partitionWaiter{fn: fn}
	r.mu.Lock()
	if p := r.parts[k]; p != nil {
		r.mu.Unlock()
		fn(p)
		return func() {}
	}
	r.waiters[k] = append(r.waiters[k], w)
	w.timer = time.AfterFunc(wait, func() {
		r.forget(k, w)
		w.fire(r.lookup(job, result, index, attempt))
	})
	r.mu.Unlock()
	return func() {
		r.forget(k, w)
		if w.ended.CompareAndSwap(false, true) {
			w.timer.Stop()
		}
	}
}

func (r *registry) forget(k PartitionKey, w *partitionWaiter) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ws := r.waiters[k]
	if i := slices.Index(ws, w); i >= 0 {
		ws = slices.Delete(ws, i, i+1)
		if len(ws) == 0 {
			delete(r.waiters, k)
		} else {
			r.waiters[k] = ws
		}
	}
}

// await is awaitFunc for a caller that can wait: it returns the partition, or nil after wait
// or once ctx ends.
func (r *registry) await(ctx context.Context, job, result string, index int32, attempt string, wait time.Duration) *Partition {
	got := make(chan *Partition, 1)
	stop := r.awaitFunc(job, result, index, attempt, wait, func(p *Partition) { got <- p })
	select {
	case p := <-got:
		return p
	case <-ctx.Done():
		stop()
		return r.lookup(job, result, index, attempt)
	}
}

// lookup finds a partition; an empty attempt matches any producer attempt.
func (r *registry) lookup(job, result string, index int32, attempt string) *Partition {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if attempt != "" {
		return r.parts[PartitionKey{job, result, index, attempt}]
	}
	for k, p := range r.parts {
		if k.job == job && k.result == result && k.index == index {
			return p
		}
	}
	return nil
}

// lookupMany is lookup of the partitions index[i] of attempt[i] of one result, into found,
// under one read lock; an empty attempt finds nothing (lookup's scan is for tools).
func (r *registry) lookupMany(job, result string, index []int32, attempt []string, found []*Partition) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for i, a := range attempt {
		if a != "" {
			found[i] = r.parts[PartitionKey{job, result, index[i], a}]
		}
	}
}

// has reports whether the partition is still held.
func (r *registry) has(k PartitionKey) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	_, ok := r.parts[k]
	return ok
}

// remove drops the partition from the registry and releases it.
func (r *registry) remove(k PartitionKey) {
	r.mu.Lock()
	p := r.parts[k]
	delete(r.parts, k)
	r.mu.Unlock()
	if p != nil {
		p.release("")
	}
}

// removeAttempt removes every partition of a producer attempt; failure is the attempt's
// failure when it released them ("" otherwise).
func (r *registry) removeAttempt(attempt, failure string) {
	r.mu.Lock()
	var ps []*Partition
	for k, p := range r.parts {
		if k.attempt == attempt {
			ps = append(ps, p)
			delete(r.parts, k)
		}
	}
	r.mu.Unlock()
	for _, p := range ps {
		p.release(failure)
	}
}

// removeAll releases everything (TM stop).
func (r *registry) removeAll() {
	r.mu.Lock()
	ps := r.parts
	r.parts = map[PartitionKey]*Partition{}
	r.mu.Unlock()
	for _, p := range ps {
		p.release("")
	}
}
