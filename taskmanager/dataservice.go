package taskmanager

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/taskmanager/operators"
	"github.com/jmcluster/jmcluster/transport/pb"
)

const (
	// batchRecords is the most records one RecordBatch carries.
	batchRecords = 256
	// batchLinger is how long a reader waits to fill a batch once it holds a record.
	batchLinger = 5 * time.Millisecond
)

// dataService serves ReadPartition to consumer tasks on any TM.
type dataService struct {
	pb.UnimplementedDataServiceServer
	tm *TaskManager
}

// ReadPartition streams one subpartition on its own stream (the Exchange stream carries every
// channel between two TaskManagers on one; this stays for tools and older consumers). The
// first message is an empty batch confirming the subscription, so a consumer can tell "not
// there yet" (retry) from "broke after connecting" (fail).
func (s *dataService) ReadPartition(req *pb.ReadPartitionRequest, stream pb.DataService_ReadPartitionServer) error {
	return s.tm.serveSubpartition(stream.Context(), req, func(rs []operators.Record, eop bool) error {
		return stream.Send(&pb.RecordBatch{Records: toPB(rs), EndOfPartition: eop})
	})
}

// emitFunc delivers one batch of a channel to its consumer: first an empty one (the channel is
// open), then records, the last with eop. It may block (flow control); the records are the
// caller's buffer, reused after it returns.
type emitFunc func(records []operators.Record, eop bool) error

// serveSubpartition subscribes to the subpartition req names and emits it until end of
// partition, the consumer goes (ctx) or the partition is released. A refusal before anything
// was emitted is a status error: NotFound while the partition is not (yet) here, which
// consumers retry.
func (tm *TaskManager) serveSubpartition(ctx context.Context, req *pb.ReadPartitionRequest, emit emitFunc) error {
	r, err := tm.subscribe(ctx, req)
	if err != nil {
		return err
	}
	defer r.close()
	if err := emit(nil, false); err != nil {
		return err
	}
	for {
		rs, eop, err := r.next(ctx)
		if err != nil {
			return err
		}
		if err := emit(rs, eop); err != nil {
			return err
		}
		if eop {
			return nil
		}
	}
}

// subpartitionReader reads one subpartition for one consumer, in the consumer's goroutine (a
// local channel) or in the goroutine that sends it (a remote one).
type subpartitionReader interface {
	// next returns the next batch, in a buffer reused by the next call; eop marks the last.
	next(ctx context.Context) (records []operators.Record, eop bool, err error)
	// close gives the subpartition up (a PIPELINED one may be read again by a new attempt).
	close()
}

// partitionWait is how long a request for a partition not registered yet waits for its
// producer to register it before it is refused NotFound (and the consumer retries).
const partitionWait = 2 * time.Second

// subscribe makes the reader of the subpartition req names, or says why there is none.
func (tm *TaskManager) subscribe(ctx context.Context, req *pb.ReadPartitionRequest) (subpartitionReader, error) {
	p := tm.parts.await(ctx, req.GetJobId(), req.GetResultId(), req.GetPartitionIndex(), req.GetProducerAttemptId(), partitionWait)
	if p == nil || p.isReleased() {
		return nil, status.Errorf(codes.NotFound, "partition %s/%s/%d of producer %s not found on %s",
			req.GetJobId(), req.GetResultId(), req.GetPartitionIndex(), req.GetProducerAttemptId(), tm.cfg.ID)
	}
	i := int(req.GetSubpartitionIndex())
	if i < 0 || i >= len(p.subs) {
		return nil, status.Errorf(codes.InvalidArgument, "subpartition %d out of range [0,%d) for %s", i, len(p.subs), p.key)
	}
	sp := p.subs[i]
	if p.typ == pb.ResultType_RESULT_TYPE_BLOCKING {
		if !p.isFinished() {
			return nil, status.Errorf(codes.NotFound, "blocking partition %s is not consumable yet (producer not finished)", p.key)
		}
		sp.mu.Lock()
		data := sp.data // append-free after finish
		sp.mu.Unlock()
		return &blockingReader{p: p, data: data}, nil
	}
	consumer := req.GetConsumerAttemptId()
	if consumer == "" {
		consumer = "?"
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	switch {
	case sp.reader != "":
		return nil, status.Errorf(codes.FailedPrecondition, "subpartition of %s is already consumed by attempt %s", p.key, sp.reader)
	case sp.drained:
		return nil, status.Errorf(codes.FailedPrecondition, "subpartition of %s was fully consumed", p.key)
	}
	sp.reader = consumer
	return &pipelinedReader{tm: tm, p: p, sp: sp}, nil
}

type blockingReader struct {
	p    *resultPartition
	data []operators.Record
}

func (r *blockingReader) next(context.Context) ([]operators.Record, bool, error) {
	if r.p.isReleased() {
		return nil, false, status.Errorf(codes.Aborted, "partition %s released", r.p.key)
	}
	n := min(len(r.data), batchRecords)
	rs := r.data[:n]
	r.data = r.data[n:]
	return rs, len(r.data) == 0, nil
}

func (r *blockingReader) close() {}

type pipelinedReader struct {
	tm    *TaskManager
	p     *resultPartition
	sp    *subpartition
	batch []operators.Record
	timer *time.Timer // made when a batch first lingers
}

func (r *pipelinedReader) next(ctx context.Context) ([]operators.Record, bool, error) {
	if r.batch == nil {
		// A reader of a wide partition's small subpartition rarely fills a whole batch: start
		// at the subpartition's capacity (append grows it), which keeps 87,000 idle readers of
		// a 512-wide ALL_TO_ALL job on one TM from holding 8 KiB each.
		r.batch = make([]operators.Record, 0, min(batchRecords, max(r.sp.capacity, 1)))
	}
	batch := r.batch[:0]
	eop := false
	select {
	case rec, ok := <-r.sp.queue():
		if !ok {
			eop = true
		} else {
			batch = append(batch, rec)
		}
	case <-r.p.released:
		return nil, false, status.Errorf(codes.Aborted, "partition %s released by its producer", r.p.key)
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
	if !eop {
		if r.timer == nil {
			r.timer = time.NewTimer(time.Hour)
			r.timer.Stop()
		}
		eop = fill(r.sp.queue(), &batch, r.timer)
	}
	r.batch = batch
	if eop {
		r.sp.mu.Lock()
		r.sp.drained = true
		r.sp.mu.Unlock()
		if r.p.allDrained() {
			r.tm.parts.remove(r.p.key)
		}
	}
	return batch, eop, nil
}

func (r *pipelinedReader) close() {
	r.sp.mu.Lock()
	r.sp.reader = ""
	r.sp.mu.Unlock()
}

// fill adds records to batch until it is full, the linger time passed, or the channel closed
// (then it returns true).
func fill(ch <-chan operators.Record, batch *[]operators.Record, timer *time.Timer) bool {
	// Take what is already there without waiting.
	for len(*batch) < batchRecords {
		select {
		case r, ok := <-ch:
			if !ok {
				return true
			}
			*batch = append(*batch, r)
			continue
		default:
		}
		break
	}
	if len(*batch) >= batchRecords {
		return false
	}
	timer.Reset(batchLinger)
	defer timer.Stop()
	for len(*batch) < batchRecords {
		select {
		case r, ok := <-ch:
			if !ok {
				return true
			}
			*batch = append(*batch, r)
		case <-timer.C:
			return false
		}
	}
	return false
}

// toPB converts records for the wire, with one allocation per batch.
func toPB(rs []operators.Record) []*pb.Record {
	if len(rs) == 0 {
		return nil
	}
	buf := make([]pb.Record, len(rs))
	out := make([]*pb.Record, len(rs))
	for i, r := range rs {
		buf[i].Key, buf[i].Value, buf[i].Origin, buf[i].Seq = r.Key, r.Value, r.Origin, r.Seq
		out[i] = &buf[i]
	}
	return out
}

// fromPB converts received records.
func fromPB(rs []*pb.Record) []operators.Record {
	out := make([]operators.Record, len(rs))
	for i, r := range rs {
		out[i] = operators.Record{Key: r.GetKey(), Value: r.GetValue(), Origin: r.GetOrigin(), Seq: r.GetSeq()}
	}
	return out
}
