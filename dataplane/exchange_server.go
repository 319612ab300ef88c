package dataplane

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/operator"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// Exchange serves every channel one consumer TM reads from this TM. Two goroutines per
// stream, whatever its channels: receive handles the consumer's controls, write sends. A
// channel is served without a goroutine of its own: its subpartition wakes it when records
// arrive (it joins the stream's ready list) and the writer takes from each ready channel that
// has credit, the batches of all of them in one message.
func (s *dataService) Exchange(stream pb.DataService_ExchangeServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	stop := context.AfterFunc(s.dp.ctx, cancel) // the TM stopping ends its streams
	defer stop()
	x := &exchangeServer{dp: s.dp, ctx: ctx, signal: make(chan struct{}, 1), chans: map[uint64]*serverChannel{},
		limit: min(maxExchangeBytes, s.dp.cfg.MaxMessageSize/2)}
	recvErr := make(chan error, 1)
	go func() { recvErr <- x.receive(stream) }()
	writeErr := make(chan error, 1)
	go func() { writeErr <- x.write(stream) }()
	var err error
	writerDone := false
	select {
	case err = <-recvErr:
	case err = <-writeErr:
		writerDone = true
	case <-ctx.Done():
	}
	// Why it ends, before our own cancel hides it: the consumer went or the TM stops (nothing
	// to say), or the stream failed (a protocol error, a failed send: returned to the consumer).
	quiet := errors.Is(err, io.EOF) || stream.Context().Err() != nil || s.dp.ctx.Err() != nil
	cancel()
	x.end()
	if !writerDone {
		// The writer sees the cancel at once unless it is inside a Send the consumer's flow
		// control holds: that one ends when the handler returns, so do not wait on it long.
		t := time.NewTimer(time.Second)
		select {
		case <-writeErr:
		case <-t.C:
		}
		t.Stop()
	}
	if quiet {
		return nil
	}
	if err != nil {
		s.dp.log.Warn("exchange stream from a consumer failed", "error", err)
	}
	return err
}

type exchangeServer struct {
	dp     *Plane
	ctx    context.Context
	signal chan struct{} // capacity 1: the ready list is not empty
	limit  int           // bytes per message
	// format is the record format the consumer reads (its requests say; RecordFormat).
	format atomic.Uint32

	mu     sync.Mutex
	chans  map[uint64]*serverChannel
	ready  []*serverChannel // channels with something to send, in the order they became ready
	closed bool             // the handler is ending: no more opens
	buf    []operator.Record
}

// serverChannel is one channel being served. Guarded by its exchangeServer's mu.
type serverChannel struct {
	x       *exchangeServer
	id      uint64
	r       subpartitionReader // nil until subscribed
	stop    func()             // ends the wait for the partition
	credit  int                // batches the consumer can take
	answer  *pb.ChannelBatch   // a refusal of the open, sent first
	accept  bool               // the open's answer is to be sent first: an empty batch
	grouped bool               // opened by a group: the answer is its id in opened
	reader  pipelinedReader    // the reader, when the partition was there at the open
	queued  bool               // in the ready list
	done    bool
}

func (x *exchangeServer) receive(stream pb.DataService_ExchangeServer) error {
	for {
		req, err := stream.Recv()
		if err != nil {
			return err
		}
		x.format.Store(req.GetRecordFormat()) // before the controls: an open's records are in it
		for _, c := range req.GetControls() {
			if err := x.control(c); err != nil {
				return err
			}
		}
	}
}

// control handles one channel control: open, credit, close. A protocol violation ends the
// stream (the consumer is broken, not one of its channels).
func (x *exchangeServer) control(c *pb.ChannelControl) error {
	id := c.GetChannel()
	x.mu.Lock()
	ch := x.chans[id]
	switch {
	case c.GetOpen() != nil:
		switch {
		case x.closed:
			x.mu.Unlock()
			return nil
		case ch != nil:
			x.mu.Unlock()
			return status.Errorf(codes.InvalidArgument, "exchange: channel %d opened twice", id)
		case len(x.chans) >= maxExchangeChannels:
			x.mu.Unlock()
			return status.Errorf(codes.ResourceExhausted, "exchange: more than %d channels on one stream", maxExchangeChannels)
		}
		x.dp.opensServed.single.Add(1)
		ch = &serverChannel{x: x, id: id}
		ch.grant(c.GetCredit())
		x.chans[id] = ch
		x.mu.Unlock()
		// Outside the lock: subscribed takes it.
		req := c.GetOpen()
		if p := x.dp.parts.lookup(req.GetJobId(), req.GetResultId(), req.GetPartitionIndex(), req.GetProducerAttemptId()); p != nil && req.GetProducerAttemptId() != "" {
			// The partition is here (the common case): no wait to set up.
			r, _, err := x.dp.readerOf(p, req, ch, &ch.reader)
			x.subscribed(ch, r, err)
			return nil
		}
		stop := x.dp.subscribeAsync(c.GetOpen(), ch, func(r subpartitionReader, err error) { x.subscribed(ch, r, err) })
		x.mu.Lock()
		if ch.r == nil && ch.answer == nil && !ch.done {
			ch.stop = stop
		}
		x.mu.Unlock()
		return nil
	case c.GetOpenGroup() != nil && !x.dp.cfg.ExchangeWithoutGroups:
		x.mu.Unlock()
		return x.openGroup(id, c.GetCredit(), c.GetOpenGroup())
	case ch == nil:
		// Credit or close for a channel that ended meanwhile (or, on a producer without
		// groups, a group it does not know): nothing to do.
	case c.GetClose():
		x.finishLocked(ch)
	default:
		ch.grant(c.GetCredit())
		x.readyLocked(ch)
	}
	x.mu.Unlock()
	return nil
}

// maxGroupChannels bounds the entries of one ChannelGroup (a consumer splits a wider one).
const maxGroupChannels = 4096

// openGroup opens the channels first, first+1, ... of a group: as many opens, with their
// common fields sent once, the channels' state in one allocation and the partitions looked up
// under one registry lock.
func (x *exchangeServer) openGroup(first uint64, credit int32, g *pb.ChannelGroup) error {
	parts, attempts := g.GetPartitionIndexes(), g.GetProducerAttemptIds()
	n := len(parts)
	switch {
	case n != len(attempts):
		return status.Errorf(codes.InvalidArgument, "exchange: channel group at %d has %d partitions and %d producer attempts", first, n, len(attempts))
	case n == 0 || n > maxGroupChannels:
		return status.Errorf(codes.InvalidArgument, "exchange: channel group at %d has %d channels, want 1-%d", first, n, maxGroupChannels)
	case first == 0 || first+uint64(n) < first:
		return status.Errorf(codes.InvalidArgument, "exchange: channel group at %d: ids out of range", first)
	}
	x.mu.Lock()
	switch {
	case x.closed:
		x.mu.Unlock()
		return nil
	case len(x.chans)+n > maxExchangeChannels:
		x.mu.Unlock()
		return status.Errorf(codes.ResourceExhausted, "exchange: more than %d channels on one stream", maxExchangeChannels)
	}
	for i := range n {
		if x.chans[first+uint64(i)] != nil {
			x.mu.Unlock()
			return status.Errorf(codes.InvalidArgument, "exchange: channel %d opened twice", first+uint64(i))
		}
	}
	x.dp.opensServed.group.Add(1)
	x.dp.opensServed.groupChannels.Add(int64(n))
	chs := make([]serverChannel, n)
	for i := range chs {
		ch := &chs[i]
		ch.x, ch.id, ch.grouped = x, first+uint64(i), true
		ch.grant(credit)
		x.chans[ch.id] = ch
	}
	x.mu.Unlock()
	found := make([]*Partition, n)
	x.dp.parts.lookupMany(g.GetJobId(), g.GetResultId(), parts, attempts, found)
	for i := range chs {
		ch := &chs[i]
		req := pb.ReadPartitionRequest{JobId: g.GetJobId(), ResultId: g.GetResultId(), PartitionIndex: parts[i],
			SubpartitionIndex: g.GetSubpartitionIndex(), ProducerAttemptId: attempts[i], ConsumerAttemptId: g.GetConsumerAttemptId()}
		if p := found[i]; p != nil && attempts[i] != "" {
			r, _, err := x.dp.readerOf(p, &req, ch, &ch.reader)
			x.subscribed(ch, r, err)
			continue
		}
		ask := &pb.ReadPartitionRequest{JobId: g.GetJobId(), ResultId: g.GetResultId(), PartitionIndex: parts[i],
			SubpartitionIndex: g.GetSubpartitionIndex(), ProducerAttemptId: attempts[i], ConsumerAttemptId: g.GetConsumerAttemptId()}
		stop := x.dp.subscribeAsync(ask, ch, func(r subpartitionReader, err error) { x.subscribed(ch, r, err) })
		x.mu.Lock()
		if ch.r == nil && ch.answer == nil && !ch.done {
			ch.stop = stop
		}
		x.mu.Unlock()
	}
	return nil
}

// grant adds n batches of credit; credit beyond twice the window is a consumer's mistake and
// is dropped (the channel then just runs with its window).
func (ch *serverChannel) grant(n int32) {
	ch.credit = min(ch.credit+int(max(n, 0)), 2*channelCredit)
}

// openAnswer is the batch that says a channel is open (shared: only read when marshalled).
var openAnswer = &pb.RecordBatch{}

// subscribed is the answer to a channel's open: the reader of its subpartition, or a refusal.
func (x *exchangeServer) subscribed(ch *serverChannel, r subpartitionReader, err error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if ch.done || x.closed {
		if r != nil {
			r.close()
		}
		return
	}
	ch.stop = nil
	if err != nil {
		st := status.Convert(err)
		ch.answer = &pb.ChannelBatch{Channel: ch.id, Code: int32(st.Code()), Error: st.Message()}
	} else {
		ch.r, ch.accept = r, true
	}
	x.readyLocked(ch)
}

// wake is the channel's subpartition saying it has something to take.
func (ch *serverChannel) wake() {
	ch.x.mu.Lock()
	ch.x.readyLocked(ch)
	ch.x.mu.Unlock()
}

func (x *exchangeServer) readyLocked(ch *serverChannel) {
	if ch.queued || ch.done {
		return
	}
	ch.queued = true
	x.ready = append(x.ready, ch)
	select {
	case x.signal <- struct{}{}:
	default:
	}
}

// finishLocked ends a channel: no more sends, its subpartition given up.
func (x *exchangeServer) finishLocked(ch *serverChannel) {
	if ch.done {
		return
	}
	ch.done = true
	delete(x.chans, ch.id)
	if ch.stop != nil {
		ch.stop()
	}
	if ch.r != nil {
		ch.r.close()
	}
}

// end finishes every channel: the handler returns.
func (x *exchangeServer) end() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.closed = true
	for _, ch := range x.chans {
		x.finishLocked(ch)
	}
	x.ready = nil
}

// hello is a producer's first message on every stream: what it serves.
var hello = &pb.ExchangeResponse{Hello: &pb.ExchangeHello{ChannelGroups: true}}

// write sends the hello, then what the ready channels have, those ready together in one
// message.
func (x *exchangeServer) write(stream pb.DataService_ExchangeServer) error {
	if !x.dp.cfg.ExchangeWithoutGroups {
		if err := stream.Send(hello); err != nil {
			return err
		}
	}
	for {
		select {
		case <-x.signal:
		case <-x.ctx.Done():
			return nil
		}
		for {
			msg := x.collect()
			if msg == nil {
				break
			}
			if err := stream.Send(msg); err != nil {
				return err
			}
		}
	}
}

// recordWireMax bounds one record's encoded size apart from its key's and value's bytes (the
// varint fields with their tags, the bytes fields' tags and lengths, the length prefix), so
// that a message's size is known without encoding it twice (recordsSize adds the bytes).
const recordWireMax = 80

// recordsSize is the bytes of the keys and values of rs.
func recordsSize(rs []operator.Record) int {
	n := 0
	for i := range rs {
		n += rs[i].Size()
	}
	return n
}

// collect takes one batch from each ready channel with credit, in turn, until the message is
// full; a channel that gave records goes to the back of the list (it may have more). A channel
// that had nothing is armed by its poll and not listed again until its subpartition wakes it;
// one without credit waits for the consumer's next credit. nil: nothing to send.
func (x *exchangeServer) collect() *pb.ExchangeResponse {
	x.mu.Lock()
	defer x.mu.Unlock()
	var msg *pb.ExchangeResponse
	records, size := 0, 0
	add := func(b *pb.ChannelBatch, n, bytes int) {
		if msg == nil {
			msg = &pb.ExchangeResponse{}
		}
		msg.Batches = append(msg.Batches, b)
		records, size = records+n, size+bytes
	}
	var accepts []pb.ChannelBatch // the open answers of this message, in one allocation
	for len(x.ready) > 0 && records < maxExchangeRecords && size < x.limit {
		ch := x.ready[0]
		x.ready[0] = nil
		x.ready = x.ready[1:]
		ch.queued = false
		if ch.done {
			continue
		}
		if a := ch.answer; a != nil { // a refusal
			ch.answer = nil
			add(a, 0, 16+len(a.GetError()))
			x.finishLocked(ch)
			continue
		}
		if ch.accept && ch.grouped {
			ch.accept = false
			if msg == nil {
				msg = &pb.ExchangeResponse{}
			}
			msg.Opened = append(msg.Opened, ch.id)
			size += 10
		}
		if ch.accept {
			ch.accept = false
			if len(accepts) == cap(accepts) {
				accepts = make([]pb.ChannelBatch, 0, min(len(x.ready)+1, 4096))
			}
			accepts = accepts[:len(accepts)+1]
			a := &accepts[len(accepts)-1]
			a.Channel, a.Batch = ch.id, openAnswer
			add(a, 0, 16)
		}
		if ch.r == nil || ch.credit <= 0 {
			continue
		}
		rs, eop, err := ch.r.poll(x.buf[:0], batchRecords)
		x.buf = rs[:0]
		if err != nil {
			st := status.Convert(err)
			add(&pb.ChannelBatch{Channel: ch.id, Code: int32(st.Code()), Error: st.Message()}, 0, 16+len(st.Message()))
			x.finishLocked(ch)
			continue
		}
		if len(rs) == 0 && !eop {
			continue // armed: its subpartition wakes it
		}
		records, err := toPB(rs, x.format.Load())
		if err != nil { // a record the consumer cannot read: its channel fails
			st := status.Convert(err)
			add(&pb.ChannelBatch{Channel: ch.id, Code: int32(st.Code()), Error: st.Message()}, 0, 16+len(st.Message()))
			x.finishLocked(ch)
			continue
		}
		ch.credit--
		cb := &pb.ChannelBatch{Channel: ch.id, Batch: &pb.RecordBatch{Records: records, EndOfPartition: eop}}
		if c := ch.r.partition().bytesOut; c != nil {
			c.Add(int64(proto.Size(cb)))
		}
		add(cb, len(rs), 16+len(rs)*recordWireMax+recordsSize(rs))
		if eop {
			x.finishLocked(ch)
		} else {
			x.readyLocked(ch)
		}
	}
	if len(x.ready) == 0 {
		x.ready = nil // let the backing array go
	}
	return msg
}
