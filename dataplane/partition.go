package dataplane

import (
	"context"
	"encoding/binary"
	"fmt"
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

// bufferedRecordBytes is the bytes of keys and values a PIPELINED subpartition holds per
// record of its capacity: a subpartition of 1024 records holds at most 1 MiB of them, plus one
// record (an empty one takes a record of any size up to the TaskManager's maximum).
const bufferedRecordBytes = 1024

// batchBytes bounds the keys' and values' bytes one poll takes (a batch of one record when
// that record is larger), as batchRecords bounds its records.
const batchBytes = 256 << 10

// batchOf is how many of rs one batch takes: up to batchBytes of keys and values, at least one
// record.
func batchOf(rs []operator.Record) int {
	bytes := 0
	for i := range rs {
		if bytes += rs[i].Size(); bytes > batchBytes && i > 0 {
			return i
		}
	}
	return len(rs)
}

// subpartitionBuffer is the capacity of each of n PIPELINED subpartitions.
func subpartitionBuffer(n int) int {
	if n <= 0 {
		return pipelinedBuffer
	}
	return min(pipelinedBuffer, max(minSubpartitionBuffer, pipelinedPartitionBuffer/n))
}

// RouteKey returns the subpartition of key among n: Fibonacci hashing, the high 32 bits of
// h * 0x9E3779B97F4A7C15, modulo n, where h is the number of a numeric key (8 bytes, big
// endian: the int64 keys of the format before bytes, routed as they were) and the FNV-1a hash
// of another. It is part of the data-exchange contract.
func RouteKey(key []byte, n int) int {
	if n <= 1 {
		return 0
	}
	var h uint64
	if len(key) == operator.Int64Size {
		h = binary.BigEndian.Uint64(key)
	} else {
		h = 14695981039346656037 // FNV-1a, 64 bits
		for _, c := range key {
			h = (h ^ uint64(c)) * 1099511628211
		}
	}
	h *= 0x9E3779B97F4A7C15
	return int((h >> 32) % uint64(n))
}

// PartitionKey identifies one result partition on a TM.
type PartitionKey struct {
	job     string
	result  string
	index   int32
	attempt string
}

func (k PartitionKey) String() string {
	return fmt.Sprintf("%s/%s/%d@%s", k.job, k.result, k.index, k.attempt)
}

// Partition is what one producer attempt writes for one produced result.
type Partition struct {
	key      PartitionKey
	typ      pb.ResultType
	forward  bool
	subs     []*subpartition
	finished chan struct{} // closed when the producer FINISHED (BLOCKING: readable)
	released chan struct{} // closed when released: writers and readers abort
	gone     atomic.Bool   // released, for the writer's check per record
	// failure is why the producer failed when its failure released the partition (set before
	// gone, so a reader that sees gone sees it): a consumer's error names the root cause.
	failure string
	// bytesOut counts the encoded record batches sent from this partition over Exchange
	// streams: the producer task's (nil: not counted).
	bytesOut *atomic.Int64
	blocked  *BlockedTime // the producer task's wait for space (nil: not counted)
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
// is kept small (96 bytes: 262,144 of them in a 512 x 512 job).
type subpartition struct {
	mu       sync.Mutex
	capacity int32 // PIPELINED: the queue's bound in records (and capacity x bufferedRecordBytes in bytes)
	head     int32 // PIPELINED: the first record not taken
	size     int64 // PIPELINED: the bytes of the keys and values from head on
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

func newPartition(key PartitionKey, d *pb.ResultPartitionDeploymentDescriptor) *Partition {
	n := int(d.GetNumSubpartitions())
	p := &Partition{
		key:      key,
		typ:      ResultType(d.GetResultType()),
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
	sp.size += int64(r.Size())
}

// full reports whether a PIPELINED subpartition takes no more records: its records or bytes are
// at capacity. sp.mu is held.
func (sp *subpartition) full() bool {
	n := len(sp.queue) - int(sp.head)
	return n >= int(sp.capacity) || (n > 0 && sp.size >= int64(sp.capacity)*bufferedRecordBytes)
}

// take appends up to max records to dst; eop is true when the producer finished and the
// queue is now empty (the end is delivered with the last records). Finding nothing arms the
// reader. sp.mu is held.
func (sp *subpartition) take(dst []operator.Record, max int) ([]operator.Record, bool) {
	head := int(sp.head)
	n := min(len(sp.queue)-head, max)
	if sp.size > batchBytes {
		n = batchOf(sp.queue[head : head+n])
	}
	for i := head; i < head+n; i++ {
		sp.size -= int64(sp.queue[i].Size())
	}
	dst = append(dst, sp.queue[head:head+n]...)
	clear(sp.queue[head : head+n]) // the records' bytes are the reader's now
	sp.head += int32(n)
	if int(sp.head) == len(sp.queue) {
		sp.queue, sp.head, sp.size = sp.queue[:0], 0, 0
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

// ResultType defaults an unspecified result type to PIPELINED.
func ResultType(t pb.ResultType) pb.ResultType {
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

// Add routes one record: FORWARD to subpartition 0, ALL_TO_ALL by RouteKey. A full PIPELINED
// subpartition blocks the producer (backpressure) until its reader takes.
func (p *Partition) Add(ctx context.Context, r operator.Record) error {
	i := 0
	if !p.forward {
		i = RouteKey(r.Key, len(p.subs))
	}
	return p.addTo(ctx, i, r)
}

// addTo appends r to subpartition i (Add).
func (p *Partition) addTo(ctx context.Context, i int, r operator.Record) error {
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
		if !sp.full() {
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
		p.blocked.begin()
		select {
		case <-space:
		case <-ctx.Done():
		case <-p.released:
		}
		p.blocked.end()
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// CountBlocked makes the producer's waits for space in a full subpartition count in b (the
// task's backpressure). Call it before the first Add.
func (p *Partition) CountBlocked(b *BlockedTime) { p.blocked = b }

// BlockedTime is the time a producer waited for space in full PIPELINED subpartitions: the
// clock is read only when an add blocks, never per record.
type BlockedTime struct {
	mu    sync.Mutex
	total time.Duration
	since time.Time // the current wait's start; zero when not waiting
}

func (b *BlockedTime) begin() {
	if b != nil {
		b.mu.Lock()
		b.since = time.Now()
		b.mu.Unlock()
	}
}

func (b *BlockedTime) end() {
	if b != nil {
		b.mu.Lock()
		b.total += time.Since(b.since)
		b.since = time.Time{}
		b.mu.Unlock()
	}
}

// Total is the time waited so far, the current wait included.
func (b *BlockedTime) Total() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.since.IsZero() {
		return b.total
	}
	return b.total + time.Since(b.since)
}

// Broadcast appends a checkpoint barrier to every subpartition, behind the records already in
// it, waiting for space as Add does. Only the producer goroutine calls it.
func (p *Partition) Broadcast(ctx context.Context, id uint64) error {
	for i := range p.subs {
		if err := p.addTo(ctx, i, operator.Record{Barrier: id}); err != nil {
			return err
		}
	}
	return nil
}

// BroadcastWatermark appends a watermark at time t to every subpartition, behind the records
// already in it, as Broadcast does a barrier. Only the producer goroutine calls it.
func (p *Partition) BroadcastWatermark(ctx context.Context, t int64) error {
	for i := range p.subs {
		if err := p.addTo(ctx, i, operator.Record{Watermark: true, Time: t}); err != nil {
			return err
		}
	}
	return nil
}

// BroadcastIdle appends the idle marker (a watermark record with Idle) to every subpartition:
// the consumers' watermarks are not held back by this producer until its next record or
// watermark. Only the producer goroutine calls it.
func (p *Partition) BroadcastIdle(ctx context.Context) error {
	for i := range p.subs {
		if err := p.addTo(ctx, i, operator.Record{Watermark: true, Idle: true, Time: operator.NoTimestamp}); err != nil {
			return err
		}
	}
	return nil
}

// Finish marks the end of the data: PIPELINED readers get end_of_partition once they took
// the rest, a BLOCKING partition becomes readable. Only the producer goroutine calls it.
func (p *Partition) Finish() {
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

// release aborts writers and readers (an armed reader is woken to find it) and frees the data;
// failure is the producer's failure that released it ("" for a cancel or a release of data no
// longer needed).
func (p *Partition) release(failure string) {
	p.once.Do(func() {
		p.failure = failure
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

func (p *Partition) isFinished() bool {
	select {
	case <-p.finished:
		return true
	default:
		return false
	}
}

func (p *Partition) isReleased() bool {
	select {
	case <-p.released:
		return true
	default:
		return false
	}
}

// allDrained reports whether every PIPELINED subpartition delivered end_of_partition.
func (p *Partition) allDrained() bool {
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

// releasedBy is what a reader of a released partition says: the producer released it, and when
// its failure did, the failure (the cause a consumer's own failure then names).
func (p *Partition) releasedBy() string {
	if p.failure != "" {
		return "released by its producer, which failed: " + p.failure
	}
	return "released by its producer"
}
