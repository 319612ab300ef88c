package dataplane

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/operator"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// subpartitionReader reads one subpartition for one consumer without ever waiting: the
// stream's writer polls it for a remote channel, the task's loop for a local one.
type subpartitionReader interface {
	// poll appends up to max records to dst; eop marks the last. When it returns neither
	// records nor the end, the reader is armed: its wake function is called once when there
	// is something to take (records, the end, the partition's release).
	poll(dst []operator.Record, max int) (records []operator.Record, eop bool, err error)
	// close gives the subpartition up (a PIPELINED one may be read again by a new attempt).
	close()
	// partition is the partition read (its producer's byte count).
	partition() *Partition
}

func (r *blockingReader) partition() *Partition  { return r.p }
func (r *pipelinedReader) partition() *Partition { return r.p }

// partitionWait is how long a request for a partition not registered yet waits for its
// producer to register it before it is refused NotFound (and the consumer retries).
const partitionWait = 2 * time.Second

// subscribe makes the reader of the subpartition req names, waiting up to partitionWait for
// its producer to register it, or says why there is none. wake is the reader's wake function.
func (dp *Plane) subscribe(ctx context.Context, req *pb.ReadPartitionRequest, wake waker) (subpartitionReader, error) {
	p := dp.parts.await(ctx, req.GetJobId(), req.GetResultId(), req.GetPartitionIndex(), req.GetProducerAttemptId(), partitionWait)
	r, _, err := dp.readerOf(p, req, wake, nil)
	return r, err
}

// subscribeAsync is subscribe without waiting in a goroutine: done gets the reader or the
// refusal, at once or when the producer registers the partition (or partitionWait passed); it
// must not block. stop ends the wait without done being called.
func (dp *Plane) subscribeAsync(req *pb.ReadPartitionRequest, wake waker, done func(subpartitionReader, error)) (stop func()) {
	return dp.parts.awaitFunc(req.GetJobId(), req.GetResultId(), req.GetPartitionIndex(), req.GetProducerAttemptId(), partitionWait,
		func(p *Partition) {
			r, _, err := dp.readerOf(p, req, wake, nil)
			done(r, err)
		})
}

// readerOf makes the reader of one subpartition of p (nil: not found). ready says there is
// something to take already; otherwise the reader is armed (wake is called when there is).
// A PIPELINED reader is into when it is given (the caller's memory, one allocation less per
// channel).
func (dp *Plane) readerOf(p *Partition, req *pb.ReadPartitionRequest, wake waker, into *pipelinedReader) (r subpartitionReader, ready bool, err error) {
	if p == nil || p.isReleased() {
		return nil, false, status.Errorf(codes.NotFound, "partition %s/%s/%d of producer %s not found on %s",
			req.GetJobId(), req.GetResultId(), req.GetPartitionIndex(), req.GetProducerAttemptId(), dp.cfg.ID)
	}
	i := int(req.GetSubpartitionIndex())
	if i < 0 || i >= len(p.subs) {
		return nil, false, status.Errorf(codes.InvalidArgument, "subpartition %d out of range [0,%d) for %s", i, len(p.subs), p.key)
	}
	sp := p.subs[i]
	if p.typ == pb.ResultType_RESULT_TYPE_BLOCKING {
		if !p.isFinished() {
			return nil, false, status.Errorf(codes.NotFound, "blocking partition %s is not consumable yet (producer not finished)", p.key)
		}
		sp.mu.Lock()
		data := sp.queue // append-free after finish
		sp.mu.Unlock()
		return &blockingReader{p: p, data: data}, true, nil
	}
	consumer := req.GetConsumerAttemptId()
	if consumer == "" {
		consumer = "?"
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	switch {
	case p.gone.Load():
		// Checked again under the lock (see poll): a release in between would find no one
		// to wake.
		return nil, false, status.Errorf(codes.NotFound, "partition %s of producer %s was released on %s", p.key, req.GetProducerAttemptId(), dp.cfg.ID)
	case sp.reader != "":
		return nil, false, status.Errorf(codes.FailedPrecondition, "subpartition of %s is already consumed by attempt %s", p.key, sp.reader)
	case sp.drained:
		return nil, false, status.Errorf(codes.FailedPrecondition, "subpartition of %s was fully consumed", p.key)
	}
	ready = sp.ended || len(sp.queue) > int(sp.head)
	sp.reader, sp.wake, sp.armed = consumer, wake, !ready
	if into == nil {
		into = &pipelinedReader{}
	}
	*into = pipelinedReader{dp: dp, p: p, sp: sp}
	return into, ready, nil
}

// blockingReader reads a finished BLOCKING subpartition: always something to take.
type blockingReader struct {
	p    *Partition
	data []operator.Record
}

func (r *blockingReader) poll(dst []operator.Record, max int) ([]operator.Record, bool, error) {
	if r.p.isReleased() {
		return nil, false, status.Errorf(codes.Aborted, "partition %s %s", r.p.key, r.p.releasedBy())
	}
	n := batchOf(r.data[:min(len(r.data), max)])
	dst = append(dst, r.data[:n]...)
	r.data = r.data[n:]
	return dst, len(r.data) == 0, nil
}

func (r *blockingReader) close() {}

type pipelinedReader struct {
	dp *Plane
	p  *Partition
	sp *subpartition
}

func (r *pipelinedReader) poll(dst []operator.Record, max int) ([]operator.Record, bool, error) {
	r.sp.mu.Lock()
	// Under the lock: release sets gone before it takes each subpartition's lock, so either
	// this sees it, or the release comes after and finds this reader armed (and wakes it).
	if r.p.gone.Load() {
		r.sp.mu.Unlock()
		return nil, false, status.Errorf(codes.Aborted, "partition %s %s", r.p.key, r.p.releasedBy())
	}
	dst, eop := r.sp.take(dst, max)
	if eop {
		r.sp.drained = true
	}
	r.sp.mu.Unlock()
	if eop && r.p.allDrained() {
		r.dp.parts.remove(r.p.key)
	}
	return dst, eop, nil
}

func (r *pipelinedReader) close() {
	r.sp.mu.Lock()
	r.sp.reader, r.sp.wake, r.sp.armed = "", nil, false
	r.sp.mu.Unlock()
}

// waitingReader is a subpartitionReader read by one goroutine that waits for it: batches of
// up to batchRecords, lingering up to batchLinger to fill one once it holds a record.
type waitingReader struct {
	r     subpartitionReader
	ready chan struct{} // capacity 1: wake signals it
	buf   []operator.Record
	timer *time.Timer
}

func (w *waitingReader) wake() {
	select {
	case w.ready <- struct{}{}:
	default:
	}
}

// next returns the next batch, in a buffer reused by the next call; eop marks the last.
func (w *waitingReader) next(ctx context.Context) ([]operator.Record, bool, error) {
	batch := w.buf[:0]
	var linger <-chan time.Time
	defer func() {
		if linger != nil {
			w.timer.Stop()
		}
	}()
	for {
		had := len(batch)
		var (
			eop bool
			err error
		)
		batch, eop, err = w.r.poll(batch, batchRecords-len(batch))
		if err != nil {
			return nil, false, err
		}
		w.buf = batch
		if eop || len(batch) >= batchRecords {
			return batch, eop, nil
		}
		if len(batch) > had {
			continue // it took some: there may be more (the reader is not armed)
		}
		if len(batch) > 0 && linger == nil {
			if w.timer == nil {
				w.timer = time.NewTimer(batchLinger)
			} else {
				w.timer.Reset(batchLinger)
			}
			linger = w.timer.C
		}
		select {
		case <-w.ready:
		case <-linger:
			return batch, false, nil
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
}
