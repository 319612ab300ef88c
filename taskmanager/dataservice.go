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

// serveSubpartition finds the subpartition req names and emits it until end of partition, the
// consumer goes (ctx) or the partition is released. A refusal before anything was emitted is
// a status error: NotFound while the partition is not (yet) here, which consumers retry.
func (tm *TaskManager) serveSubpartition(ctx context.Context, req *pb.ReadPartitionRequest, emit emitFunc) error {
	p := tm.parts.lookup(req.GetJobId(), req.GetResultId(), req.GetPartitionIndex(), req.GetProducerAttemptId())
	if p == nil || p.isReleased() {
		return status.Errorf(codes.NotFound, "partition %s/%s/%d of producer %s not found on %s",
			req.GetJobId(), req.GetResultId(), req.GetPartitionIndex(), req.GetProducerAttemptId(), tm.cfg.ID)
	}
	i := int(req.GetSubpartitionIndex())
	if i < 0 || i >= len(p.subs) {
		return status.Errorf(codes.InvalidArgument, "subpartition %d out of range [0,%d) for %s", i, len(p.subs), p.key)
	}
	if p.typ == pb.ResultType_RESULT_TYPE_BLOCKING {
		return readBlocking(p, p.subs[i], emit)
	}
	return tm.readPipelined(ctx, p, p.subs[i], req.GetConsumerAttemptId(), emit)
}

func readBlocking(p *resultPartition, sp *subpartition, emit emitFunc) error {
	if !p.isFinished() {
		return status.Errorf(codes.NotFound, "blocking partition %s is not consumable yet (producer not finished)", p.key)
	}
	sp.mu.Lock()
	data := sp.data // append-free after finish
	sp.mu.Unlock()
	if err := emit(nil, false); err != nil {
		return err
	}
	for len(data) > 0 {
		if p.isReleased() {
			return status.Errorf(codes.Aborted, "partition %s released", p.key)
		}
		n := min(len(data), batchRecords)
		if err := emit(data[:n], false); err != nil {
			return err
		}
		data = data[n:]
	}
	return emit(nil, true)
}

func (tm *TaskManager) readPipelined(ctx context.Context, p *resultPartition, sp *subpartition, consumer string, emit emitFunc) error {
	sp.mu.Lock()
	switch {
	case sp.reader != "":
		r := sp.reader
		sp.mu.Unlock()
		return status.Errorf(codes.FailedPrecondition, "subpartition of %s is already consumed by attempt %s", p.key, r)
	case sp.drained:
		sp.mu.Unlock()
		return status.Errorf(codes.FailedPrecondition, "subpartition of %s was fully consumed", p.key)
	}
	if consumer == "" {
		consumer = "?"
	}
	sp.reader = consumer
	sp.mu.Unlock()
	defer func() {
		sp.mu.Lock()
		sp.reader = ""
		sp.mu.Unlock()
	}()

	if err := emit(nil, false); err != nil {
		return err
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	// A reader of a wide partition's small subpartition rarely fills a whole batch: start at
	// the subpartition's capacity (append grows it), which keeps 87,000 idle readers of a
	// 512-wide ALL_TO_ALL job on one TM from holding 8 KiB each.
	batch := make([]operators.Record, 0, min(batchRecords, max(cap(sp.ch), 1)))
	for {
		batch = batch[:0]
		eop := false
		select {
		case r, ok := <-sp.ch:
			if !ok {
				eop = true
			} else {
				batch = append(batch, r)
			}
		case <-p.released:
			return status.Errorf(codes.Aborted, "partition %s released by its producer", p.key)
		case <-ctx.Done():
			return ctx.Err()
		}
		if !eop {
			eop = fill(sp.ch, &batch, timer)
		}
		if err := emit(batch, eop); err != nil {
			return err
		}
		if eop {
			sp.mu.Lock()
			sp.drained = true
			sp.mu.Unlock()
			if p.allDrained() {
				tm.parts.remove(p.key)
			}
			return nil
		}
	}
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
