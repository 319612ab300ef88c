package taskmanager

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/taskmanager/operators"
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
// (localChannel).

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

// channelReader is one open input channel, remote (muxChannel) or local (localChannel).
type channelReader interface {
	// next returns the channel's next records; eop marks the last batch.
	next(ctx context.Context) (records []operators.Record, eop bool, err error)
	// close releases the channel (the producer stops sending and frees the subpartition).
	close()
}

// openChannel opens the input channel d names for task t: on this TM directly, or on the
// producer TM's Exchange stream. A refusal keeps its status code (NotFound and Unavailable are
// retried by connect).
func (tm *TaskManager) openChannel(ctx context.Context, t *task, d *pb.InputChannelDescriptor) (channelReader, error) {
	req := &pb.ReadPartitionRequest{
		JobId:             t.tdd.GetJobId(),
		ResultId:          d.GetResultId(),
		PartitionIndex:    d.GetPartitionIndex(),
		SubpartitionIndex: d.GetSubpartitionIndex(),
		ProducerAttemptId: d.GetProducerAttemptId(),
		ConsumerAttemptId: t.attempt(),
	}
	addr := d.GetProducerDataAddress()
	if addr == tm.DataAddr() {
		return asReader(tm.openLocal(ctx, req))
	}
	if tm.legacyPeer(addr) {
		return asReader(tm.openLegacy(ctx, addr, req))
	}
	x, err := tm.exchange(addr)
	if err != nil {
		return nil, err
	}
	r, err := x.open(ctx, req)
	if err == nil {
		return r, nil
	}
	if status.Code(err) == codes.Unimplemented {
		// A producer of an older build, without Exchange: a stream per channel, as it serves.
		tm.log.Info("producer TaskManager has no Exchange stream (an older build): reading its channels one stream each", "addr", addr)
		tm.exMu.Lock()
		tm.legacy[addr] = time.Now()
		tm.exMu.Unlock()
		return asReader(tm.openLegacy(ctx, addr, req))
	}
	return nil, err
}

// asReader returns a nil channelReader, not a typed nil pointer, with an error.
func asReader[R channelReader](r R, err error) (channelReader, error) {
	if err != nil {
		return nil, err
	}
	return r, nil
}

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

// legacyChannel is a channel on a ReadPartition stream of its own: what a producer of an older
// build serves. Its flow control is the stream's (HTTP/2 windows).
type legacyChannel struct {
	stream pb.DataService_ReadPartitionClient
	cancel context.CancelFunc
}

func (tm *TaskManager) openLegacy(ctx context.Context, addr string, req *pb.ReadPartitionRequest) (*legacyChannel, error) {
	conn, err := tm.conns.peer(addr)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(tm.ctx)
	stop := context.AfterFunc(ctx, cancel) // until it is open, the caller's context bounds it
	defer stop()
	stream, err := pb.NewDataServiceClient(conn).ReadPartition(sctx, req)
	if err == nil {
		var first *pb.RecordBatch
		if first, err = stream.Recv(); err == nil {
			if len(first.GetRecords()) > 0 || first.GetEndOfPartition() {
				err = status.Error(codes.Internal, "protocol error: first batch must be empty")
			} else {
				return &legacyChannel{stream: stream, cancel: cancel}, nil
			}
		}
	}
	cancel()
	return nil, err
}

func (l *legacyChannel) next(ctx context.Context) ([]operators.Record, bool, error) {
	stop := context.AfterFunc(ctx, l.cancel)
	defer stop()
	b, err := l.stream.Recv()
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = errors.New("stream ended without end_of_partition")
		}
		return nil, false, err
	}
	return fromPB(b.GetRecords()), b.GetEndOfPartition(), nil
}

func (l *legacyChannel) close() { l.cancel() }

// ---- the producer side ----

// Exchange serves every channel one consumer TM reads from this TM.
func (s *dataService) Exchange(stream pb.DataService_ExchangeServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	stop := context.AfterFunc(s.tm.ctx, cancel) // the TM stopping ends its streams
	defer stop()
	x := &exchangeServer{tm: s.tm, ctx: ctx, out: make(chan *pb.ChannelBatch, 1024), chans: map[uint64]*serverChannel{}}
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
	x.mu.Lock()
	x.closed = true // no channel opens from here on: wg.Wait below has its final count
	x.mu.Unlock()
	cancel()
	x.wg.Wait()
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
	tm  *TaskManager
	ctx context.Context
	out chan *pb.ChannelBatch // to the writer

	mu     sync.Mutex
	chans  map[uint64]*serverChannel
	closed bool           // the handler is ending: no more opens
	wg     sync.WaitGroup // the channels' goroutines
}

// serverChannel is one channel being served: its goroutine takes a credit token per batch.
type serverChannel struct {
	cancel context.CancelFunc
	credit chan struct{}
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
	defer x.mu.Unlock()
	ch := x.chans[id]
	switch {
	case c.GetOpen() != nil:
		if x.closed {
			return nil
		}
		if ch != nil {
			return status.Errorf(codes.InvalidArgument, "exchange: channel %d opened twice", id)
		}
		if len(x.chans) >= maxExchangeChannels {
			return status.Errorf(codes.ResourceExhausted, "exchange: more than %d channels on one stream", maxExchangeChannels)
		}
		ctx, cancel := context.WithCancel(x.ctx)
		ch = &serverChannel{cancel: cancel, credit: make(chan struct{}, 2*channelCredit)}
		x.chans[id] = ch
		ch.grant(c.GetCredit())
		x.wg.Add(1)
		go x.serve(ctx, id, ch, c.GetOpen())
	case ch == nil:
		// Credit or close for a channel that ended meanwhile: nothing to do.
	case c.GetClose():
		ch.cancel()
	default:
		ch.grant(c.GetCredit())
	}
	return nil
}

// grant adds n credit tokens; credit beyond what the window can hold is a consumer's mistake
// and is dropped (the channel then just runs with its window).
func (ch *serverChannel) grant(n int32) {
	for range max(n, 0) {
		select {
		case ch.credit <- struct{}{}:
		default:
			return
		}
	}
}

// serve emits one channel's subpartition against its credit, then says why it ended if the
// consumer did not ask for the end.
func (x *exchangeServer) serve(ctx context.Context, id uint64, ch *serverChannel, req *pb.ReadPartitionRequest) {
	defer x.wg.Done()
	defer func() {
		x.mu.Lock()
		delete(x.chans, id)
		x.mu.Unlock()
		ch.cancel()
	}()
	err := x.tm.serveSubpartition(ctx, req, func(rs []operators.Record, eop bool) error {
		if len(rs) > 0 || eop {
			select {
			case <-ch.credit:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return x.send(&pb.ChannelBatch{Channel: id, Batch: &pb.RecordBatch{Records: toPB(rs), EndOfPartition: eop}})
	})
	if err != nil && ctx.Err() == nil {
		st := status.Convert(err)
		_ = x.send(&pb.ChannelBatch{Channel: id, Code: int32(st.Code()), Error: st.Message()})
	}
}

func (x *exchangeServer) send(b *pb.ChannelBatch) error {
	select {
	case x.out <- b:
		return nil
	case <-x.ctx.Done():
		return x.ctx.Err()
	}
}

// write sends the channels' batches, those ready together in one message.
func (x *exchangeServer) write(stream pb.DataService_ExchangeServer) error {
	for {
		var b *pb.ChannelBatch
		select {
		case b = <-x.out:
		case <-x.ctx.Done():
			return nil
		}
		msg := &pb.ExchangeResponse{Batches: []*pb.ChannelBatch{b}}
		records, size := len(b.GetBatch().GetRecords()), proto.Size(b)
		limit := min(maxExchangeBytes, x.tm.cfg.MaxMessageSize/2)
	more:
		for records < maxExchangeRecords && size < limit {
			select {
			case b := <-x.out:
				msg.Batches = append(msg.Batches, b)
				records, size = records+len(b.GetBatch().GetRecords()), size+proto.Size(b)
			default:
				break more
			}
		}
		if err := stream.Send(msg); err != nil {
			return err
		}
	}
}

// ---- the consumer side ----

// exchange is the Exchange stream to the TM at addr, opened when there is none or the last one
// broke.
func (tm *TaskManager) exchange(addr string) (*exchangeClient, error) {
	tm.exMu.Lock()
	x := tm.exchanges[addr]
	stopped := tm.ctx.Err() != nil
	tm.exMu.Unlock()
	switch {
	case x != nil:
		return x, nil
	case stopped:
		return nil, ErrStopped
	}
	// Opened without the lock: opening can wait for a connection that is still being made,
	// and other producers' channels (and broken streams' cleanup) must not wait with it.
	conn, err := tm.conns.peer(addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(tm.ctx)
	stream, err := pb.NewDataServiceClient(conn).Exchange(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	tm.exMu.Lock()
	defer tm.exMu.Unlock()
	if other := tm.exchanges[addr]; other != nil { // another channel opened one meanwhile
		cancel()
		return other, nil
	}
	x = &exchangeClient{tm: tm, addr: addr, stream: stream, ctx: ctx, cancel: cancel,
		out: make(chan *pb.ChannelControl, 1024), chans: map[uint64]*muxChannel{}}
	tm.exchanges[addr] = x
	tm.wg.Add(2)
	go func() { defer tm.wg.Done(); x.read() }()
	go func() { defer tm.wg.Done(); x.write() }()
	return x, nil
}

// exchangeClient is this TM's stream to one producer TM and the channels open on it.
type exchangeClient struct {
	tm     *TaskManager
	addr   string
	stream pb.DataService_ExchangeClient
	ctx    context.Context
	cancel context.CancelFunc
	out    chan *pb.ChannelControl // to the writer

	mu     sync.Mutex
	chans  map[uint64]*muxChannel
	nextID uint64
	err    error // why the stream ended; set once
}

// muxChannel is one input channel on an Exchange stream.
type muxChannel struct {
	id uint64
	x  *exchangeClient
	// in holds what the producer sent and the task has not taken: at most channelCredit
	// batches, the open's answer and a refusal.
	in       chan *pb.ChannelBatch
	dead     chan struct{} // closed when the stream broke or the producer broke the protocol
	err      error         // why, set before dead closes
	deadOnce sync.Once
	taken    int // batches taken since credit was last returned (the task's goroutine only)
	ended    bool
}

// open opens a channel on the stream and waits for the producer's answer.
func (x *exchangeClient) open(ctx context.Context, req *pb.ReadPartitionRequest) (*muxChannel, error) {
	x.mu.Lock()
	if x.err != nil {
		err := x.err
		x.mu.Unlock()
		return nil, err
	}
	x.nextID++
	c := &muxChannel{id: x.nextID, x: x, in: make(chan *pb.ChannelBatch, channelCredit+2), dead: make(chan struct{})}
	x.chans[c.id] = c
	x.mu.Unlock()
	if err := x.send(&pb.ChannelControl{Channel: c.id, Open: req, Credit: channelCredit}); err != nil {
		c.forget()
		return nil, err
	}
	select {
	case b := <-c.in:
		if b.GetCode() != 0 {
			c.forget()
			return nil, status.Error(codes.Code(b.GetCode()), b.GetError())
		}
		if len(b.GetBatch().GetRecords()) > 0 || b.GetBatch().GetEndOfPartition() {
			c.close()
			return nil, status.Error(codes.Internal, "protocol error: the first batch of a channel must be empty")
		}
		return c, nil
	case <-c.dead:
		c.forget()
		return nil, c.err
	case <-ctx.Done():
		c.close()
		return nil, ctx.Err()
	}
}

func (x *exchangeClient) send(c *pb.ChannelControl) error {
	select {
	case x.out <- c:
		return nil
	case <-x.ctx.Done():
		x.mu.Lock()
		defer x.mu.Unlock()
		if x.err != nil {
			return x.err
		}
		return status.Error(codes.Unavailable, "exchange stream closed")
	}
}

// read hands each batch to its channel until the stream ends, then fails every channel left.
func (x *exchangeClient) read() {
	for {
		msg, err := x.stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = status.Error(codes.Unavailable, "the producer ended the stream")
			}
			x.broken(fmt.Errorf("exchange stream to %s broke: %w", x.addr, err))
			return
		}
		for _, b := range msg.GetBatches() {
			x.mu.Lock()
			c := x.chans[b.GetChannel()]
			x.mu.Unlock()
			if c == nil {
				continue // closed by the consumer meanwhile
			}
			select {
			case c.in <- b:
			default:
				c.fail(status.Errorf(codes.Internal, "protocol error: producer %s sent channel %d more than its credit", x.addr, c.id))
			}
		}
	}
}

// broken ends the stream: every channel on it fails with err, and the next open makes a new one.
func (x *exchangeClient) broken(err error) {
	x.mu.Lock()
	if x.err == nil {
		x.err = err
	}
	chans := x.chans
	x.chans = map[uint64]*muxChannel{}
	x.mu.Unlock()
	x.cancel()
	x.tm.exMu.Lock()
	if x.tm.exchanges[x.addr] == x {
		delete(x.tm.exchanges, x.addr)
	}
	x.tm.exMu.Unlock()
	for _, c := range chans {
		c.fail(err)
	}
}

// write sends the channels' controls, those pending together in one message.
func (x *exchangeClient) write() {
	for {
		var c *pb.ChannelControl
		select {
		case c = <-x.out:
		case <-x.ctx.Done():
			return
		}
		msg := &pb.ExchangeRequest{Controls: []*pb.ChannelControl{c}}
	more:
		for len(msg.Controls) < 1024 {
			select {
			case c := <-x.out:
				msg.Controls = append(msg.Controls, c)
			default:
				break more
			}
		}
		if err := x.stream.Send(msg); err != nil {
			// read sees the stream's end and fails the channels.
			x.cancel()
			return
		}
	}
}

func (c *muxChannel) fail(err error) {
	c.deadOnce.Do(func() {
		c.err = err
		close(c.dead)
	})
}

// forget drops the channel from the stream without telling the producer (it ended there).
func (c *muxChannel) forget() {
	c.x.mu.Lock()
	delete(c.x.chans, c.id)
	c.x.mu.Unlock()
}

func (c *muxChannel) next(ctx context.Context) ([]operators.Record, bool, error) {
	var b *pb.ChannelBatch
	select {
	case b = <-c.in:
	default:
		select {
		case b = <-c.in:
		case <-c.dead:
			return nil, false, c.err
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
	if b.GetCode() != 0 {
		c.ended = true
		c.forget()
		return nil, false, status.Error(codes.Code(b.GetCode()), b.GetError())
	}
	eop := b.GetBatch().GetEndOfPartition()
	if eop {
		c.ended = true
		c.forget()
	} else if len(b.GetBatch().GetRecords()) == 0 {
		// An empty batch uses no credit.
	} else if c.taken++; c.taken >= creditReturn {
		_ = c.x.send(&pb.ChannelControl{Channel: c.id, Credit: int32(c.taken)})
		c.taken = 0
	}
	return fromPB(b.GetBatch().GetRecords()), eop, nil
}

// close tells the producer to stop, unless the channel ended.
func (c *muxChannel) close() {
	if c.ended {
		return
	}
	c.ended = true
	c.forget()
	// A channel failed by the producer breaking the protocol still holds a sender there: tell
	// it to stop, unless the stream itself broke (then nothing is left to tell).
	c.x.mu.Lock()
	broken := c.x.err != nil
	c.x.mu.Unlock()
	if !broken {
		_ = c.x.send(&pb.ChannelControl{Channel: c.id, Close: true})
	}
}

// ---- a channel inside this TM ----

// localChannel reads a subpartition of this TM without the network: the consumer's goroutine
// reads the subpartition itself (the reader a remote channel's sender uses), so the
// subpartition's buffer is its only flow control.
type localChannel struct {
	r subpartitionReader
}

func (tm *TaskManager) openLocal(ctx context.Context, req *pb.ReadPartitionRequest) (*localChannel, error) {
	r, err := tm.subscribe(ctx, req)
	if err != nil {
		return nil, err
	}
	return &localChannel{r: r}, nil
}

// next hands the task its own copy: the reader reuses its buffer.
func (l *localChannel) next(ctx context.Context) ([]operators.Record, bool, error) {
	rs, eop, err := l.r.next(ctx)
	return slices.Clone(rs), eop, err
}

func (l *localChannel) close() { l.r.close() }
