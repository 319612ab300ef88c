package dataplane

import (
	"context"
	"time"

	"github.com/jmcluster/jmcluster/operator"
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
	dp *Plane
}

// ReadPartition streams one subpartition on its own stream (the Exchange stream carries every
// channel between two TaskManagers on one; this stays for tools and older consumers). The
// first message is an empty batch confirming the subscription, so a consumer can tell "not
// there yet" (retry) from "broke after connecting" (fail).
func (s *dataService) ReadPartition(req *pb.ReadPartitionRequest, stream pb.DataService_ReadPartitionServer) error {
	format := req.GetRecordFormat()
	return s.dp.serveSubpartition(stream.Context(), req, func(rs []operator.Record, eop bool) error {
		records, err := toPB(rs, format)
		if err != nil {
			return err
		}
		return stream.Send(&pb.RecordBatch{Records: records, EndOfPartition: eop})
	})
}

// emitFunc delivers one batch of a channel to its consumer: first an empty one (the channel is
// open), then records, the last with eop. It may block (flow control); the records are the
// caller's buffer, reused after it returns.
type emitFunc func(records []operator.Record, eop bool) error

// serveSubpartition subscribes to the subpartition req names and emits it until end of
// partition, the consumer goes (ctx) or the partition is released, waiting in the caller's
// goroutine (ReadPartition's stream: one goroutine per channel, which the Exchange stream
// does without). A refusal before anything was emitted is a status error: NotFound while the
// partition is not (yet) here, which consumers retry.
func (dp *Plane) serveSubpartition(ctx context.Context, req *pb.ReadPartitionRequest, emit emitFunc) error {
	w := &waitingReader{ready: make(chan struct{}, 1)}
	r, err := dp.subscribe(ctx, req, w)
	if err != nil {
		return err
	}
	w.r = r
	defer r.close()
	if err := emit(nil, false); err != nil {
		return err
	}
	for {
		rs, eop, err := w.next(ctx)
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
