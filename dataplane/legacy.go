package dataplane

import (
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// legacyRecheck is how long a producer found without Exchange is read a stream per channel
// before Exchange is tried again (it may have been upgraded).
const legacyRecheck = time.Minute

func (dp *Plane) legacyPeer(addr string) bool {
	dp.exMu.Lock()
	defer dp.exMu.Unlock()
	at, ok := dp.legacy[addr]
	if ok && time.Since(at) > legacyRecheck {
		delete(dp.legacy, addr)
		return false
	}
	return ok
}

// markLegacy remembers that the producer TM at addr answered Exchange UNIMPLEMENTED.
func (dp *Plane) markLegacy(addr string) {
	dp.exMu.Lock()
	defer dp.exMu.Unlock()
	if _, ok := dp.legacy[addr]; !ok {
		dp.log.Info("producer TaskManager has no Exchange stream (an older build): reading its channels one stream each", "addr", addr)
		dp.legacy[addr] = time.Now()
	}
}

// legacyChannel is a channel on a ReadPartition stream of its own: what a producer of an older
// build serves. A goroutine reads it into the task's inbox, at most channelCredit batches ahead
// of the task.
type legacyChannel struct {
	cancel context.CancelFunc
	credit chan struct{} // a token per batch in the inbox
}

// openLegacy starts reading the channel req names from addr on a stream of its own.
func (dp *Plane) openLegacy(ctx context.Context, addr string, req *pb.ReadPartitionRequest, in *inbox, idx int, gen uint32) *legacyChannel {
	sctx, cancel := context.WithCancel(ctx)
	l := &legacyChannel{cancel: cancel, credit: make(chan struct{}, channelCredit)}
	push := func(ev Event) bool {
		ev.ch, ev.gen = idx, gen
		if ev.kind == evBatch {
			select {
			case l.credit <- struct{}{}:
			case <-sctx.Done():
				return false
			}
		}
		in.push(ev)
		return true
	}
	dp.wg.Add(1)
	go func() {
		defer dp.wg.Done()
		defer cancel()
		stream, err := dp.legacyStream(sctx, addr, req)
		if err != nil {
			push(Event{kind: evRefused, err: err})
			return
		}
		push(Event{kind: evOpened})
		for {
			b, err := stream.Recv()
			if err != nil {
				if sctx.Err() != nil {
					return
				}
				if errors.Is(err, io.EOF) {
					err = errors.New("stream ended without end_of_partition")
				}
				push(Event{kind: evBroken, err: err})
				return
			}
			if len(b.GetRecords()) == 0 && !b.GetEndOfPartition() {
				continue
			}
			if !push(Event{kind: evBatch, batch: b}) || b.GetEndOfPartition() {
				return
			}
		}
	}()
	return l
}

// legacyStream opens a ReadPartition stream and reads its confirmation.
func (dp *Plane) legacyStream(ctx context.Context, addr string, req *pb.ReadPartitionRequest) (pb.DataService_ReadPartitionClient, error) {
	conn, err := dp.cfg.Dial(addr)
	if err != nil {
		return nil, err
	}
	if f := dp.recordFormat(); req.GetRecordFormat() != f {
		req = proto.Clone(req).(*pb.ReadPartitionRequest)
		req.RecordFormat = f
	}
	stream, err := pb.NewDataServiceClient(conn).ReadPartition(ctx, req)
	if err != nil {
		return nil, err
	}
	first, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	if len(first.GetRecords()) > 0 || first.GetEndOfPartition() {
		return nil, status.Error(codes.Internal, "protocol error: first batch must be empty")
	}
	return stream, nil
}

// took is the task taking one batch.
func (l *legacyChannel) took() { <-l.credit }

func (l *legacyChannel) close() { l.cancel() }
