package taskmanager

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jmcluster/jmcluster/taskmanager/operators"
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
	once     sync.Once
	finOnce  sync.Once
}

// subpartition is the slice of a partition one consumer subtask reads.
type subpartition struct {
	// ch is a PIPELINED subpartition's buffer of capacity records, made when the producer or
	// the reader first needs it (queue): a wide partition's subpartitions are many (a 512-wide
	// ALL_TO_ALL producer has 512) and making them all before the task reports RUNNING was
	// the largest part of deploying a wide job.
	ch       chan operators.Record
	capacity int
	chOnce   sync.Once

	mu      sync.Mutex
	reader  string // PIPELINED: the consumer attempt reading it
	drained bool   // PIPELINED: end_of_partition was delivered
	data    []operators.Record
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
	for i := range p.subs {
		p.subs[i] = &subpartition{capacity: buf}
	}
	return p
}

// queue is a PIPELINED subpartition's buffer, made on first use.
func (sp *subpartition) queue() chan operators.Record {
	sp.chOnce.Do(func() { sp.ch = make(chan operators.Record, sp.capacity) })
	return sp.ch
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

// add routes one record: FORWARD to subpartition 0, ALL_TO_ALL by RouteKey.
func (p *resultPartition) add(ctx context.Context, r operators.Record) error {
	i := 0
	if !p.forward {
		i = RouteKey(r.Key, len(p.subs))
	}
	sp := p.subs[i]
	if p.typ == pb.ResultType_RESULT_TYPE_BLOCKING {
		sp.mu.Lock()
		sp.data = append(sp.data, r)
		sp.mu.Unlock()
		return nil
	}
	select {
	case sp.queue() <- r:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-p.released:
		return fmt.Errorf("%w: %s", ErrPartitionReleased, p.key)
	}
}

// finish marks the end of the data: PIPELINED channels close (readers send end_of_partition),
// a BLOCKING partition becomes readable. Only the producer goroutine calls it.
func (p *resultPartition) finish() {
	p.finOnce.Do(func() {
		if p.typ == pb.ResultType_RESULT_TYPE_PIPELINED {
			for _, sp := range p.subs {
				close(sp.queue())
			}
		}
		close(p.finished)
	})
}

// release aborts writers and readers and frees the data.
func (p *resultPartition) release() {
	p.once.Do(func() {
		close(p.released)
		for _, sp := range p.subs {
			sp.mu.Lock()
			sp.data = nil
			sp.mu.Unlock()
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
	// waiters: consumers waiting for a partition to be registered (await), woken by add.
	waiters map[partitionKey][]chan struct{}
}

func newPartitionRegistry() *partitionRegistry {
	return &partitionRegistry{parts: map[partitionKey]*resultPartition{}, waiters: map[partitionKey][]chan struct{}{}}
}

func (r *partitionRegistry) add(p *resultPartition) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.parts[p.key] = p
	for _, w := range r.waiters[p.key] {
		close(w)
	}
	delete(r.waiters, p.key)
}

// await is lookup of a partition of a named producer attempt that waits up to wait for the
// producer to register it: a consumer deployed with its producer usually asks first, and
// answering NotFound at once made it poll (a round trip and a backoff per channel).
func (r *partitionRegistry) await(ctx context.Context, job, result string, index int32, attempt string, wait time.Duration) *resultPartition {
	if p := r.lookup(job, result, index, attempt); p != nil || attempt == "" || wait <= 0 {
		return p
	}
	k := partitionKey{job, result, index, attempt}
	w := make(chan struct{})
	r.mu.Lock()
	if p := r.parts[k]; p != nil {
		r.mu.Unlock()
		return p
	}
	r.waiters[k] = append(r.waiters[k], w)
	r.mu.Unlock()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-w:
		return r.lookup(job, result, index, attempt)
	case <-timer.C:
	case <-ctx.Done():
	}
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
	return r.parts[k]
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
