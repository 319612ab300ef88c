package taskmanager

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/operator"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// The data plane between two TaskManagers: every input channel a consumer TM reads from one
// producer TM travels on one Exchange stream, tagged by channel id, with credit-based flow
// control (Flink's network stack is the model). The consumer grants each channel
// channelCredit batches when it opens it and returns credit as its task takes batches; the
// producer sends a channel's batches only against its credit. A slow consumer therefore holds
// back only its own channel: the others on the stream keep flowing, and neither side buffers
// more than channelCredit batches per channel. A broken stream fails exactly the channels it
// carried (their tasks fail; the rest of the TM is untouched); the next channel to that TM opens
// a new stream. A channel whose producer runs on this TM does not touch the network
// (channelSet, input.go).

const (
	// channelCredit is the batches a consumer lets a channel have in flight: at most
	// channelCredit x batchRecords records per channel are buffered between the subpartition
	// and the task.
	channelCredit = 8
	// creditReturn: the consumer returns credit once it took this many batches.
	creditReturn = channelCredit / 2
	// maxExchangeRecords bounds the records of one Exchange message (many channels' batches
	// go out together when they are ready together), far below the message size limit.
	maxExchangeRecords = 4096
	// maxExchangeBytes bounds an Exchange message's batches in bytes too (and half the TM's
	// message size limit, when that is smaller).
	maxExchangeBytes = 1 << 20
	// maxExchangeChannels bounds the channels open on one stream.
	maxExchangeChannels = 1 << 20
)

// legacyRecheck is how long a producer found without Exchange is read a stream per channel
// before Exchange is tried again (it may have been upgraded).
const legacyRecheck = time.Minute

func (tm *TaskManager) legacyPeer(addr string) bool {
	tm.exMu.Lock()
	defer tm.exMu.Unlock()
	at, ok := tm.legacy[addr]
	if ok && time.Since(at) > legacyRecheck {
		delete(tm.legacy, addr)
		return false
	}
	return ok
}

// markLegacy remembers that the producer TM at addr answered Exchange UNIMPLEMENTED.
func (tm *TaskManager) markLegacy(addr string) {
	tm.exMu.Lock()
	defer tm.exMu.Unlock()
	if _, ok := tm.legacy[addr]; !ok {
		tm.log.Info("producer TaskManager has no Exchange stream (an older build): reading its channels one stream each", "addr", addr)
		tm.legacy[addr] = time.Now()
	}
}

// ---- the producer side ----

// Exchange serves every channel one consumer TM reads from this TM. Two goroutines per
// stream, whatever its channels: receive handles the consumer's controls, write sends. A
// channel is served without a goroutine of its own: its subpartition wakes it when records
// arrive (it joins the stream's ready list) and the writer takes from each ready channel that
// has credit, the batches of all of them in one message.
func (s *dataService) Exchange(stream pb.DataService_ExchangeServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	stop := context.AfterFunc(s.tm.ctx, cancel) // the TM stopping ends its streams
	defer stop()
	x := &exchangeServer{tm: s.tm, ctx: ctx, signal: make(chan struct{}, 1), chans: map[uint64]*serverChannel{},
		limit: min(maxExchangeBytes, s.tm.cfg.MaxMessageSize/2)}
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
	quiet := errors.Is(err, io.EOF) || stream.Context().Err() != nil || s.tm.ctx.Err() != nil
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
		s.tm.log.Warn("exchange stream from a consumer failed", "error", err)
	}
	return err
}

type exchangeServer struct {
	tm     *TaskManager
	ctx    context.Context
	signal chan struct{} // capacity 1: the ready list is not empty
	limit  int           // bytes per message

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
		x.tm.opensServed.single.Add(1)
		ch = &serverChannel{x: x, id: id}
		ch.grant(c.GetCredit())
		x.chans[id] = ch
		x.mu.Unlock()
		// Outside the lock: subscribed takes it.
		req := c.GetOpen()
		if p := x.tm.parts.lookup(req.GetJobId(), req.GetResultId(), req.GetPartitionIndex(), req.GetProducerAttemptId()); p != nil && req.GetProducerAttemptId() != "" {
			// The partition is here (the common case): no wait to set up.
			r, _, err := x.tm.readerOf(p, req, ch, &ch.reader)
			x.subscribed(ch, r, err)
			return nil
		}
		stop := x.tm.subscribeAsync(c.GetOpen(), ch, func(r subpartitionReader, err error) { x.subscribed(ch, r, err) })
		x.mu.Lock()
		if ch.r == nil && ch.answer == nil && !ch.done {
			ch.stop = stop
		}
		x.mu.Unlock()
		return nil
	case c.GetOpenGroup() != nil && !x.tm.cfg.ExchangeWithoutGroups:
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
	x.tm.opensServed.group.Add(1)
	x.tm.opensServed.groupChannels.Add(int64(n))
	chs := make([]serverChannel, n)
	for i := range chs {
		ch := &chs[i]
		ch.x, ch.id, ch.grouped = x, first+uint64(i), true
		ch.grant(credit)
		x.chans[ch.id] = ch
	}
	x.mu.Unlock()
	found := make([]*resultPartition, n)
	x.tm.parts.lookupMany(g.GetJobId(), g.GetResultId(), parts, attempts, found)
	for i := range chs {
		ch := &chs[i]
		req := pb.ReadPartitionRequest{JobId: g.GetJobId(), ResultId: g.GetResultId(), PartitionIndex: parts[i],
			SubpartitionIndex: g.GetSubpartitionIndex(), ProducerAttemptId: attempts[i], ConsumerAttemptId: g.GetConsumerAttemptId()}
		if p := found[i]; p != nil && attempts[i] != "" {
			r, _, err := x.tm.readerOf(p, &req, ch, &ch.reader)
			x.subscribed(ch, r, err)
			continue
		}
		ask := &pb.ReadPartitionRequest{JobId: g.GetJobId(), ResultId: g.GetResultId(), PartitionIndex: parts[i],
			SubpartitionIndex: g.GetSubpartitionIndex(), ProducerAttemptId: attempts[i], ConsumerAttemptId: g.GetConsumerAttemptId()}
		stop := x.tm.subscribeAsync(ask, ch, func(r subpartitionReader, err error) { x.subscribed(ch, r, err) })
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
	if !x.tm.cfg.ExchangeWithoutGroups {
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

// recordWireMax bounds one record's encoded size (four varint fields with their tags and the
// length prefix), so that a message's size is known without encoding it twice.
const recordWireMax = 48

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
		ch.credit--
		cb := &pb.ChannelBatch{Channel: ch.id, Batch: &pb.RecordBatch{Records: toPB(rs), EndOfPartition: eop}}
		if c := ch.r.partition().bytesOut; c != nil {
			c.Add(int64(proto.Size(cb)))
		}
		add(cb, len(rs), 16+len(rs)*recordWireMax)
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

// ---- the consumer side ----

// exchange is the Exchange stream to the TM at addr, made when there is none or the last one
// broke. It never waits: the stream is opened by its own goroutine, and controls sent before
// it is open go out once it is (or their channels fail with the reason it could not open).
func (tm *TaskManager) exchange(addr string) (*exchangeClient, error) {
	tm.exMu.Lock()
	defer tm.exMu.Unlock()
	if x := tm.exchanges[addr]; x != nil {
		return x, nil
	}
	if tm.ctx.Err() != nil {
		return nil, ErrStopped
	}
	ctx, cancel := context.WithCancel(tm.ctx)
	x := &exchangeClient{tm: tm, addr: addr, ctx: ctx, cancel: cancel, signal: make(chan struct{}, 1), chans: map[uint64]*muxChannel{},
		helloSeen: make(chan struct{})}
	tm.exchanges[addr] = x
	tm.wg.Add(1)
	go func() { defer tm.wg.Done(); x.run() }()
	return x, nil
}

// exchangeClient is this TM's stream to one producer TM and the channels open on it.
type exchangeClient struct {
	tm     *TaskManager
	addr   string
	ctx    context.Context
	cancel context.CancelFunc
	signal chan struct{} // capacity 1: controls are pending

	// groups: the producer's hello announced channel groups (set by the reader before
	// helloSeen closes, or never). helloSeen closes at the stream's first message.
	groups    atomic.Bool
	helloSeen chan struct{}

	mu       sync.Mutex
	controls []*pb.ChannelControl // to the writer
	chans    map[uint64]*muxChannel
	nextID   uint64
	err      error // why the stream ended; set once
}

// muxChannel is one input channel on an Exchange stream. What the producer sends for it goes
// straight into its task's inbox (as many batches as its credit, so the stream's reader never
// waits for a task); the task returns the credit as it takes them.
type muxChannel struct {
	id  uint64
	x   *exchangeClient
	in  *inbox
	idx int    // the channel's index in its channelSet
	gen uint32 // the channel's open, in its channelSet

	opened   atomic.Bool  // the producer answered the open
	announce bool         // the open's answer goes to the inbox too (evOpened)
	inFlight atomic.Int32 // batches in the inbox the task has not taken
	taken    int          // batches taken since credit was last returned (the task only)
}

// open asks the producer for the channel req names; what it answers arrives in in.
// announce asks for an evOpened when the producer accepts (a task does without: a channel it
// reads is open once its first batch arrives, and needs no event per channel).
func (x *exchangeClient) open(req *pb.ReadPartitionRequest, in *inbox, idx int, gen uint32, announce bool) (*muxChannel, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.err != nil {
		return nil, x.err
	}
	x.nextID++
	c := &muxChannel{id: x.nextID, x: x, in: in, idx: idx, gen: gen, announce: announce}
	x.chans[c.id] = c
	x.sendLocked(&pb.ChannelControl{Channel: c.id, Open: req, Credit: channelCredit})
	return c, nil
}

// pendingOpen is one channel of a group to open: channel i of its set, in its open gen, on
// partition part of producer attempt.
type pendingOpen struct {
	i       int
	gen     uint32
	part    int32
	attempt string
}

// openGroup is open for channels of one consumer to partitions of one result at one
// subpartition: their muxChannels in one allocation, their opens one control per
// maxGroupChannels, sent as such when the producer announced channel groups, as one open
// each otherwise (the writer decides: write).
func (x *exchangeClient) openGroup(job, result string, sub int32, consumer string, opens []pendingOpen, in *inbox, announce bool) ([]muxChannel, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.err != nil {
		return nil, x.err
	}
	cs := make([]muxChannel, len(opens))
	for start := 0; start < len(opens); start += maxGroupChannels {
		end := min(start+maxGroupChannels, len(opens))
		g := &pb.ChannelGroup{JobId: job, ResultId: result, SubpartitionIndex: sub, ConsumerAttemptId: consumer,
			PartitionIndexes: make([]int32, end-start), ProducerAttemptIds: make([]string, end-start)}
		first := x.nextID + 1
		for k := start; k < end; k++ {
			x.nextID++
			c := &cs[k]
			c.id, c.x, c.in, c.idx, c.gen, c.announce = x.nextID, x, in, opens[k].i, opens[k].gen, announce
			x.chans[c.id] = c
			g.PartitionIndexes[k-start], g.ProducerAttemptIds[k-start] = opens[k].part, opens[k].attempt
		}
		x.sendLocked(&pb.ChannelControl{Channel: first, Credit: channelCredit, OpenGroup: g})
	}
	return cs, nil
}

// ungroup is a group's opens one control each: what a producer without groups is sent.
func ungroup(dst []*pb.ChannelControl, c *pb.ChannelControl) []*pb.ChannelControl {
	g := c.GetOpenGroup()
	for i, part := range g.GetPartitionIndexes() {
		dst = append(dst, &pb.ChannelControl{Channel: c.GetChannel() + uint64(i), Credit: c.GetCredit(), Open: &pb.ReadPartitionRequest{
			JobId: g.GetJobId(), ResultId: g.GetResultId(), PartitionIndex: part, SubpartitionIndex: g.GetSubpartitionIndex(),
			ProducerAttemptId: g.GetProducerAttemptIds()[i], ConsumerAttemptId: g.GetConsumerAttemptId()}})
	}
	return dst
}

// helloWait is how long a stream's first controls wait for the producer's hello: a producer
// of this build sends it first, at once; one of an older build sends none, and its channels
// are opened one control each after this wait (once per stream).
const helloWait = 100 * time.Millisecond

func (x *exchangeClient) sendLocked(c *pb.ChannelControl) {
	if x.err != nil {
		return
	}
	x.controls = append(x.controls, c)
	select {
	case x.signal <- struct{}{}:
	default:
	}
}

func (x *exchangeClient) send(c *pb.ChannelControl) {
	x.mu.Lock()
	x.sendLocked(c)
	x.mu.Unlock()
}

// run opens the stream, then reads it (in a goroutine of its own) and writes the controls
// until it ends.
func (x *exchangeClient) run() {
	conn, err := x.tm.conns.peer(x.addr)
	if err != nil {
		x.broken(fmt.Errorf("exchange stream to %s: %w", x.addr, err))
		return
	}
	stream, err := pb.NewDataServiceClient(conn).Exchange(x.ctx)
	if err != nil {
		x.broken(fmt.Errorf("exchange stream to %s could not open: %w", x.addr, err))
		return
	}
	x.tm.wg.Add(1)
	go func() { defer x.tm.wg.Done(); x.read(stream) }()
	x.write(stream)
}

// maxControlBytes bounds one ExchangeRequest's controls (opens carry ids).
const maxControlBytes = 512 << 10

// write sends the pending controls, those pending together in one message. The first wait
// for the producer's hello (up to helloWait): what it announces decides how groups go out.
func (x *exchangeClient) write(stream pb.DataService_ExchangeClient) {
	t := time.NewTimer(helloWait)
	select {
	case <-x.helloSeen:
	case <-t.C:
	case <-x.ctx.Done():
	}
	t.Stop()
	var pending, flat []*pb.ChannelControl
	for {
		select {
		case <-x.signal:
		case <-x.ctx.Done():
			return
		}
		x.mu.Lock()
		pending, x.controls = x.controls, pending[:0]
		x.mu.Unlock()
		if !x.groups.Load() && slices.ContainsFunc(pending, func(c *pb.ChannelControl) bool { return c.GetOpenGroup() != nil }) {
			flat = flat[:0]
			for _, c := range pending {
				if c.GetOpenGroup() != nil {
					flat = ungroup(flat, c)
				} else {
					flat = append(flat, c)
				}
			}
			pending, flat = flat, pending
			clear(flat)
		}
		for len(pending) > 0 {
			msg := &pb.ExchangeRequest{}
			size := 0
			for len(pending) > 0 && size < maxControlBytes {
				size += proto.Size(pending[0]) + 4
				msg.Controls = append(msg.Controls, pending[0])
				pending[0] = nil
				pending = pending[1:]
			}
			if err := stream.Send(msg); err != nil {
				// read sees the stream's end and fails the channels.
				x.cancel()
				return
			}
		}
	}
}

// read hands each batch to its channel's inbox until the stream ends, then fails every
// channel left.
func (x *exchangeClient) read(stream pb.DataService_ExchangeClient) {
	first := true
	var opened []*muxChannel
	for {
		msg, err := stream.Recv()
		if first {
			// A hello, or (an older producer) the first answer, or the end: the writer
			// stops waiting.
			first = false
			x.groups.Store(msg.GetHello().GetChannelGroups())
			close(x.helloSeen)
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = status.Error(codes.Unavailable, "the producer ended the stream")
			}
			x.broken(fmt.Errorf("exchange stream to %s broke: %w", x.addr, err))
			return
		}
		if ids := msg.GetOpened(); len(ids) > 0 {
			opened = opened[:0]
			x.mu.Lock()
			for _, id := range ids {
				if c := x.chans[id]; c != nil {
					opened = append(opened, c)
				}
			}
			x.mu.Unlock()
			for _, c := range opened {
				x.deliver(c, openedBatch)
			}
			clear(opened)
		}
		for _, b := range msg.GetBatches() {
			x.mu.Lock()
			c := x.chans[b.GetChannel()]
			x.mu.Unlock()
			if c == nil {
				continue // closed by the consumer meanwhile
			}
			x.deliver(c, b)
		}
	}
}

// openedBatch stands for the answer of a channel listed in ExchangeResponse.opened.
var openedBatch = &pb.ChannelBatch{}

// deliver puts one batch of c into its task's inbox: the open's answer, records, the end, a
// refusal. A producer breaking the protocol (records before the answer, more than the credit)
// fails the channel and is told to stop it.
func (x *exchangeClient) deliver(c *muxChannel, b *pb.ChannelBatch) {
	ev := inputEvent{ch: c.idx, gen: c.gen}
	switch {
	case b.GetCode() != 0:
		c.forget()
		ev.kind, ev.err = evRefused, status.Error(codes.Code(b.GetCode()), b.GetError())
	case !c.opened.Load():
		if len(b.GetBatch().GetRecords()) > 0 || b.GetBatch().GetEndOfPartition() {
			c.abort()
			ev.kind, ev.err = evRefused, status.Error(codes.Internal, "protocol error: the first batch of a channel must be empty")
			break
		}
		c.opened.Store(true)
		if !c.announce {
			return
		}
		ev.kind = evOpened
	case c.inFlight.Add(1) > channelCredit:
		c.abort()
		ev.kind, ev.err = evBroken, status.Errorf(codes.Internal, "protocol error: producer %s sent channel %d more than its credit", x.addr, c.id)
	default:
		ev.kind, ev.batch = evBatch, b.GetBatch()
		if c.in.bytes != nil {
			c.in.bytes.Add(int64(proto.Size(b)))
		}
		if b.GetBatch().GetEndOfPartition() {
			c.forget()
		}
	}
	c.in.push(ev)
}

// broken ends the stream: every channel on it fails with err, and the next open makes a new one.
func (x *exchangeClient) broken(err error) {
	x.mu.Lock()
	if x.err == nil {
		x.err = err
	}
	chans := x.chans
	x.chans = map[uint64]*muxChannel{}
	x.controls = nil
	x.mu.Unlock()
	x.cancel()
	x.tm.exMu.Lock()
	if x.tm.exchanges[x.addr] == x {
		delete(x.tm.exchanges, x.addr)
	}
	x.tm.exMu.Unlock()
	for _, c := range chans {
		c.in.push(inputEvent{kind: evBroken, ch: c.idx, gen: c.gen, err: err})
	}
}

// forget drops the channel from the stream without telling the producer (it ended there).
func (c *muxChannel) forget() {
	c.x.mu.Lock()
	delete(c.x.chans, c.id)
	c.x.mu.Unlock()
}

// abort drops the channel and tells the producer to stop it.
func (c *muxChannel) abort() {
	c.x.mu.Lock()
	delete(c.x.chans, c.id)
	c.x.sendLocked(&pb.ChannelControl{Channel: c.id, Close: true})
	c.x.mu.Unlock()
}

// took is the task taking one of the channel's batches: credit goes back every creditReturn.
func (c *muxChannel) took() {
	c.inFlight.Add(-1)
	if c.taken++; c.taken >= creditReturn {
		c.x.send(&pb.ChannelControl{Channel: c.id, Credit: int32(c.taken)})
		c.taken = 0
	}
}

// ---- a channel of an older producer ----

// legacyChannel is a channel on a ReadPartition stream of its own: what a producer of an older
// build serves. A goroutine reads it into the task's inbox, at most channelCredit batches ahead
// of the task.
type legacyChannel struct {
	cancel context.CancelFunc
	credit chan struct{} // a token per batch in the inbox
}

// openLegacy starts reading the channel req names from addr on a stream of its own.
func (tm *TaskManager) openLegacy(ctx context.Context, addr string, req *pb.ReadPartitionRequest, in *inbox, idx int, gen uint32) *legacyChannel {
	sctx, cancel := context.WithCancel(ctx)
	l := &legacyChannel{cancel: cancel, credit: make(chan struct{}, channelCredit)}
	push := func(ev inputEvent) bool {
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
	tm.wg.Add(1)
	go func() {
		defer tm.wg.Done()
		defer cancel()
		stream, err := tm.legacyStream(sctx, addr, req)
		if err != nil {
			push(inputEvent{kind: evRefused, err: err})
			return
		}
		push(inputEvent{kind: evOpened})
		for {
			b, err := stream.Recv()
			if err != nil {
				if sctx.Err() != nil {
					return
				}
				if errors.Is(err, io.EOF) {
					err = errors.New("stream ended without end_of_partition")
				}
				push(inputEvent{kind: evBroken, err: err})
				return
			}
			if len(b.GetRecords()) == 0 && !b.GetEndOfPartition() {
				continue
			}
			if !push(inputEvent{kind: evBatch, batch: b}) || b.GetEndOfPartition() {
				return
			}
		}
	}()
	return l
}

// legacyStream opens a ReadPartition stream and reads its confirmation.
func (tm *TaskManager) legacyStream(ctx context.Context, addr string, req *pb.ReadPartitionRequest) (pb.DataService_ReadPartitionClient, error) {
	conn, err := tm.conns.peer(addr)
	if err != nil {
		return nil, err
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
