package dataplane

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

	"github.com/jmcluster/jmcluster/transport/pb"
)

// exchange is the Exchange stream to the TM at addr, made when there is none or the last one
// broke. It never waits: the stream is opened by its own goroutine, and controls sent before
// it is open go out once it is (or their channels fail with the reason it could not open).
func (dp *Plane) exchange(addr string) (*exchangeClient, error) {
	dp.exMu.Lock()
	defer dp.exMu.Unlock()
	if x := dp.exchanges[addr]; x != nil {
		return x, nil
	}
	if dp.ctx.Err() != nil {
		return nil, ErrStopped
	}
	ctx, cancel := context.WithCancel(dp.ctx)
	x := &exchangeClient{dp: dp, addr: addr, ctx: ctx, cancel: cancel, signal: make(chan struct{}, 1), chans: map[uint64]*muxChannel{},
		helloSeen: make(chan struct{})}
	dp.exchanges[addr] = x
	dp.wg.Add(1)
	go func() { defer dp.wg.Done(); x.run() }()
	return x, nil
}

// exchangeClient is this TM's stream to one producer TM and the channels open on it.
type exchangeClient struct {
	dp     *Plane
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
	idx int    // the channel's index in its ChannelSet
	gen uint32 // the channel's open, in its ChannelSet

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
	conn, err := x.dp.cfg.Dial(x.addr)
	if err != nil {
		x.broken(fmt.Errorf("exchange stream to %s: %w", x.addr, err))
		return
	}
	stream, err := pb.NewDataServiceClient(conn).Exchange(x.ctx)
	if err != nil {
		x.broken(fmt.Errorf("exchange stream to %s could not open: %w", x.addr, err))
		return
	}
	x.dp.wg.Add(1)
	go func() { defer x.dp.wg.Done(); x.read(stream) }()
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
			msg := &pb.ExchangeRequest{RecordFormat: x.dp.recordFormat()}
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
	ev := Event{ch: c.idx, gen: c.gen}
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
	x.dp.exMu.Lock()
	if x.dp.exchanges[x.addr] == x {
		delete(x.dp.exchanges, x.addr)
	}
	x.dp.exMu.Unlock()
	for _, c := range chans {
		c.in.push(Event{kind: evBroken, ch: c.idx, gen: c.gen, err: err})
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
