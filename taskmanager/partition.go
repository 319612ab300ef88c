package taskmanager

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jmcluster/jmcluster/operator"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// pipelinedBuffer is the capacity, in records, of one PIPELINED subpartition: a producer
// blocks (backpressure) when its consumer is slow or not yet connected.
const pipelinedBuffer = 1024

// pipelinedPartitionBuffer bounds the records one PIPELINED partition buffers over all its
// subpartitions, and minSubpartitionBuffer is the least one subpartition gets. A wide
// ALL_TO_ALL partition divides the budget: 512 subpartitions get 32 records each instead of
// 1024 (a channel's buffer is allocated whole when it is made, so 512 x 512 subpartitions of
// 1024 records would be 8.6 GB across the cluster before a record flows).
const (
	pipelinedPartitionBuffer = 16384
	minSubpartitionBuffer    = 16
)

// subpartitionBuffer is the capacity of each of n PIPELINED subpartitions.
func subpartitionBuffer(n int) int {
	if n <= 0 {
		return pipelinedBuffer
	}
	return min(pipelinedBuffer, max(minSubpartitionBuffer, pipelinedPartitionBuffer/n))
}

// RouteKey returns the subpartition of key among n: Fibonacci hashing, the high 32 bits of
// uint64(key) * 0x9E3779B97F4A7C15, modulo n. It is part of the data-exchange contract.
func RouteKey(key int64, n int) int {
	if n <= 1 {
		return 0
	}
	h := uint64(key) * 0x9E3779B97F4A7C15
	return int((h >> 32) % uint64(n))
}

// partitionKey identifies one result partition on a TM.
type partitionKey struct {
	job     string
	result  string
	index   int32
	attempt string
}

func (k partitionKey) String() string {
	return fmt.Sprintf("%s/%s/%d@%s", k.job, k.result, k.index, k.attempt)
}

// resultPartition is what one producer attempt writes for one produced result.
type resultPartition struct {
	key      partitionKey
	typ      pb.ResultType
	forward  bool
	subs     []*subpartition
	finished chan struct{} // closed when the producer FINISHED (BLOCKING: readable)
	released chan struct{} // closed when released: writers and readers abort
	gone     atomic.Bool   // released, for the writer's check per record
	// bytesOut counts the encoded record batches sent from this partition over Exchange
	// streams: the producer task's (nil: not counted).
	bytesOut *atomic.Int64
	once     sync.Once
	finOnce  sync.Once
}

// subpartition is the slice of a partition one consumer subtask reads. A PIPELINED one is a
// bounded queue the producer appends to and one reader takes from without waiting (poll):
// when the reader finds it empty it is armed, and the next record (or the end, or the
// release) calls the reader's wake function once. Nothing waits per channel: a remote
// channel's sender is the stream's writer, woken per ready channel; a local channel's reader
// is its task's loop. A wide partition's subpartitions are many (a 512-wide ALL_TO_ALL
// producer has 512), so the queue is allocated when the first record arrives, and the struct
// is kept small (88 bytes: 262,144 of them in a 512 x 512 job).
type subpartition struct {
	mu       sync.Mutex
	capacity int32 // PIPELINED: the queue's bound
	head     int32 // PIPELINED: the first record not taken
	// queue: PIPELINED, written and not taken from head on; BLOCKING, all the data (append-free
	// once the producer finished).
	queue   []operator.Record
	space   chan struct{} // made by a producer that found the queue full, closed when the reader takes
	wake    waker         // the reader's: woken once when it is armed and records, the end or the release arrive
	reader  string        // PIPELINED: the consumer attempt reading it
	ended   bool          // PIPELINED: the producer finished; end_of_partition once the queue is empty
	armed   bool
	drained bool // PIPELINED: end_of_partition was delivered
}

func newResultPartition(key partitionKey, d *pb.ResultPartitionDeploymentDescriptor) *resultPartition {
	n := int(d.GetNumSubpartitions())
	p := &resultPartition{
		key:      key,
		typ:      resultType(d.GetResultType()),
		forward:  distribution(d.GetDistribution(), n) == pb.Distribution_DISTRIBUTION_FORWARD,
		subs:     make([]*subpartition, n),
		finished: make(chan struct{}),
		released: make(chan struct{}),
	}
	buf := subpartitionBuffer(n)
	subs := make([]subpartition, n) // one allocation: a 512-wide producer has 512
	for i := range p.subs {
		subs[i].capacity = int32(buf)
		p.subs[i] = &subs[i]
	}
	return p
}

// buffered is the records a PIPELINED subpartition holds.
func (sp *subpartition) buffered() int {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return len(sp.queue) - int(sp.head)
}

// waker is a subpartition reader's owner, told that an armed reader has something to take. wake
// must not block; it is called without the subpartition's lock.
type waker interface{ wake() }

// wakeLocked disarms the reader and returns its wake function, to be called after sp.mu is
// released (it takes the reader's locks).
func (sp *subpartition) wakeLocked() waker {
	if !sp.armed {
		return nil
	}
	sp.armed = false
	return sp.wake
}

// push appends r, compacting the queue when its front was taken. sp.mu is held.
func (sp *subpartition) push(r operator.Record) {
	if len(sp.queue) == cap(sp.queue) && sp.head > 0 {
		n := copy(sp.queue, sp.queue[sp.head:])
		sp.queue, sp.head = sp.queue[:n], 0
	}
	if sp.queue == nil {
		sp.queue = make([]operator.Record, 0, min(int(sp.capacity), batchRecords))
	}
	sp.queue = append(sp.queue, r)
}

// take appends up to max records to dst; eop is true when the producer finished and the
// queue is now empty (the end is delivered with the last records). Finding nothing arms the
// reader. sp.mu is held.
func (sp *subpartition) take(dst []operator.Record, max int) ([]operator.Record, bool) {
	head := int(sp.head)
	n := min(len(sp.queue)-head, max)
	dst = append(dst, sp.queue[head:head+n]...)
	sp.head += int32(n)
	if int(sp.head) == len(sp.queue) {
		sp.queue, sp.head = sp.queue[:0], 0
	}
	if n > 0 && sp.space != nil {
		close(sp.space)
		sp.space = nil
	}
	eop := sp.ended && int(sp.head) == len(sp.queue)
	if n == 0 && !eop {
		sp.armed = true
	}
	return dst, eop
}

// resultType defaults an unspecified result type to PIPELINED.
func resultType(t pb.ResultType) pb.ResultType {
	if t == pb.ResultType_RESULT_TYPE_UNSPECIFIED {
		return pb.ResultType_RESULT_TYPE_PIPELINED
	}
	return t
}

// distribution defaults an unspecified distribution: FORWARD for one subpartition, else ALL_TO_ALL.
func distribution(d pb.Distribution, n int) pb.Distribution {
	if d != pb.Distribution_DISTRIBUTION_UNSPECIFIED {
		return d
	}
	if n <= 1 {
		return pb.Distribution_DISTRIBUTION_FORWARD
	}
	return pb.Distribution_DISTRIBUTION_ALL_TO_ALL
}

// add routes one record: FORWARD to subpartition 0, ALL_TO_ALL by RouteKey. A full PIPELINED
// subpartition blocks the producer (backpressure) until its reader takes.
func (p *resultPartition) add(ctx context.Context, r operator.Record) error {
	i := 0
	if !p.forward {
		i = RouteKey(r.Key, len(p.subs))
	}
	return p.addTo(ctx, i, r)
}

// addTo appends r to subpartition i (add).
func (p *resultPartition) addTo(ctx context.Context, i int, r operator.Record) error {
	sp := p.subs[i]
	for {
		if p.gone.Load() {
			return fmt.Errorf("%w: %s", ErrPartitionReleased, p.key)
		}
		sp.mu.Lock()
		if p.typ == pb.ResultType_RESULT_TYPE_BLOCKING {
			sp.queue = append(sp.queue, r)
			sp.mu.Unlock()
			return nil
		}
		if len(sp.queue)-int(sp.head) < int(sp.capacity) {
			sp.push(r)
			wake := sp.wakeLocked()
			sp.mu.Unlock()
			if wake != nil {
				wake.wake()
			}
			return nil
		}
		if sp.space == nil {
			sp.space = make(chan struct{})
		}
		space := sp.space
		sp.mu.Unlock()
		select {
		case <-space:
		case <-ctx.Done():
			return ctx.Err()
		case <-p.released:
		}
	}
}

// broadcast appends a checkpoint barrier to every subpartition, behind the records already in
// it, waiting for space as add does. Only the producer goroutine calls it.
func (p *resultPartition) broadcast(ctx context.Context, id uint64) error {
	for i := range p.subs {
		if err := p.addTo(ctx, i, operator.Record{Barrier: id}); err != nil {
			return err
		}
	}
	return nil
}

// finish marks the end of the data: PIPELINED readers get end_of_partition once they took
// the rest, a BLOCKING partition becomes readable. Only the producer goroutine calls it.
func (p *resultPartition) finish() {
	p.finOnce.Do(func() {
		if p.typ == pb.ResultType_RESULT_TYPE_PIPELINED {
			for _, sp := range p.subs {
				sp.mu.Lock()
				sp.ended = true
				wake := sp.wakeLocked()
				sp.mu.Unlock()
				if wake != nil {
					wake.wake()
				}
			}
		}
		close(p.finished)
	})
}

// release aborts writers and readers (an armed reader is woken to find it) and frees the data.
func (p *resultPartition) release() {
	p.once.Do(func() {
		p.gone.Store(true)
		close(p.released)
		for _, sp := range p.subs {
			sp.mu.Lock()
			sp.queue, sp.head = nil, 0
			wake := sp.wakeLocked()
			sp.mu.Unlock()
			if wake != nil {
				wake.wake()
			}
		}
	})
}

func (p *resultPartition) isFinished() bool {
	select {
	case <-p.finished:
		return true
	default:
		return false
	}
}

func (p *resultPartition) isReleased() bool {
	select {
	case <-p.released:
		return true
	default:
		return false
	}
}

// allDrained reports whether every PIPELINED subpartition delivered end_of_partition.
func (p *resultPartition) allDrained() bool {
	for _, sp := range p.subs {
		sp.mu.Lock()
		d := sp.drained
		sp.mu.Unlock()
		if !d {
			return false
		}
	}
	return true
}

// partitionRegistry holds the partitions this TM serves.
type partitionRegistry struct {
	mu    sync.RWMutex
	parts map[partitionKey]*resultPartition
	// waiters: consumers waiting for a partition to be registered (awaitFunc), called by add.
	waiters map[partitionKey][]*partitionWaiter
}

// partitionWaiter is one wait for a partition: fn is called once, with the partition when it
// is registered or with what is there when the wait ends, unless the wait was stopped first.
// Stopping never waits for a fn that runs (its caller may hold a lock fn takes): fn copes with
// coming late.
type partitionWaiter struct {
	fn    func(*resultPartition)
	ended atomic.Bool // fired or stopped
	timer *time.Timer
}

func (w *partitionWaiter) fire(p *resultPartition) {
	if w.ended.CompareAndSwap(false, true) {
		w.timer.Stop()
		w.fn(p)
	}
}

func newPartitionRegistry() *partitionRegistry {
	return &partitionRegistry{parts: map[partitionKey]*resultPartition{}, waiters: map[partitionKey][]*partitionWaiter{}}
}

func (r *partitionRegistry) add(p *resultPartition) {
	r.addLater(p)()
}

// addLater registers p and returns the call that answers the consumers already waiting for it
// (a wide partition's may be hundreds): a producer reports RUNNING first, then answers them.
func (r *partitionRegistry) addLater(p *resultPartition) (answer func()) {
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
func (r *partitionRegistry) awaitFunc(job, result string, index int32, attempt string, wait time.Duration, fn func(*resultPartition)) (stop func()) {
	if p := r.lookup(job, result, index, attempt); p != nil || attempt == "" || wait <= 0 {
		fn(p)
		return func() {}
	}
	k := partitionKey{job, result, index, attempt}
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

func (r *partitionRegistry) forget(k partitionKey, w *partitionWaiter) {
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
func (r *partitionRegistry) await(ctx context.Context, job, result string, index int32, attempt string, wait time.Duration) *resultPartition {
	got := make(chan *resultPartition, 1)
	stop := r.awaitFunc(job, result, index, attempt, wait, func(p *resultPartition) { got <- p })
	select {
	case p := <-got:
		return p
	case <-ctx.Done():
		stop()
		return r.lookup(job, result, index, attempt)
	}
}

// lookup finds a partition; an empty attempt matches any producer attempt.
func (r *partitionRegistry) lookup(job, result string, index int32, attempt string) *resultPartition {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if attempt != "" {
		return r.parts[partitionKey{job, result, index, attempt}]
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
func (r *partitionRegistry) lookupMany(job, result string, index []int32, attempt []string, found []*resultPartition) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for i, a := range attempt {
		if a != "" {
			found[i] = r.parts[partitionKey{job, result, index[i], a}]
		}
	}
}

// has reports whether the partition is still held.
func (r *partitionRegistry) has(k partitionKey) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	_, ok := r.parts[k]
	return ok
}

// remove drops the partition from the registry and releases it.
func (r *partitionRegistry) remove(k partitionKey) {
	r.mu.Lock()
	p := r.parts[k]
	delete(r.parts, k)
	r.mu.Unlock()
	if p != nil {
		p.release()
	}
}

// removeAttempt removes every partition of a producer attempt.
func (r *partitionRegistry) removeAttempt(attempt string) {
	r.mu.Lock()
	var ps []*resultPartition
	for k, p := range r.parts {
		if k.attempt == attempt {
			ps = append(ps, p)
			delete(r.parts, k)
		}
	}
	r.mu.Unlock()
	for _, p := range ps {
		p.release()
	}
}

// removeAll releases everything (TM stop).
func (r *partitionRegistry) removeAll() {
	r.mu.Lock()
	ps := r.parts
	r.parts = map[partitionKey]*resultPartition{}
	r.mu.Unlock()
	for _, p := range ps {
		p.release()
	}
}
