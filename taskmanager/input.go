package taskmanager

import (
	"context"
	"errors"
	"fmt"
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

// inputGate is one consumed result: a channel per producer partition.
type inputGate struct {
	resultID string
	channels []*inputChannel
}

// inputChannel reads one subpartition of one producer partition. Its descriptor may be partial
// (no producer yet) until UpdatePartitionInfo completes it. A channel of a shared list (a wide
// gate's) holds the list's descriptor, shared with the other gates of its batch and never
// changed (update replaces it), and its own subpartition.
type inputChannel struct {
	mu   sync.Mutex
	desc *pb.InputChannelDescriptor
	sub  int32 // the subpartition it reads
	// set and idx: the channelSet reading it, and its index there, told when the descriptor
	// changes (evUpdated).
	set *channelSet
	idx int
	// found: where the gates of one shared list keep the partition each of the list's local
	// channels was found (sharedLists.found): the consumers of a batch read the same producer
	// partitions, so each is looked up in the registry once, not once per consumer. nil for
	// an inline channel, and once update replaced the list's descriptor.
	found *atomic.Pointer[resultPartition]
}

// buildGates makes a task's input gates from a validated descriptor (validateTDD: shared
// references are in range).
func buildGates(tdd *pb.TaskDeploymentDescriptor, shared *sharedLists) []*inputGate {
	gates := make([]*inputGate, 0, len(tdd.GetInputs()))
	for _, g := range tdd.GetInputs() {
		ig := &inputGate{resultID: g.GetResultId()}
		if r := g.GetSharedChannels(); r != 0 {
			chs := shared.lists[r-1].GetChannels()
			found := shared.foundIn(int(r - 1))
			ig.channels = make([]*inputChannel, len(chs))
			all := make([]inputChannel, len(chs)) // one allocation for the gate's channels
			for i, c := range chs {
				all[i].desc, all[i].sub, all[i].found = c, g.GetSubpartitionIndex(), &found[i]
				ig.channels[i] = &all[i]
			}
			gates = append(gates, ig)
			continue
		}
		for _, c := range g.GetChannels() {
			d := proto.Clone(c).(*pb.InputChannelDescriptor)
			if d.GetResultId() == "" {
				d.ResultId = g.GetResultId()
			}
			ig.channels = append(ig.channels, &inputChannel{desc: d, sub: d.GetSubpartitionIndex()})
		}
		gates = append(gates, ig)
	}
	return gates
}

// findChannel returns the channel reading (result, partition), or nil.
func findChannel(gates []*inputGate, result string, partition int32) *inputChannel {
	for _, g := range gates {
		if g.resultID != result {
			continue
		}
		for _, c := range g.channels {
			if c.current().GetPartitionIndex() == partition {
				return c
			}
		}
	}
	return nil
}

func (c *inputChannel) current() *pb.InputChannelDescriptor {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.desc
}

// update replaces the descriptor and tells the channel's reader.
func (c *inputChannel) update(d *pb.InputChannelDescriptor) {
	d = proto.Clone(d).(*pb.InputChannelDescriptor)
	c.mu.Lock()
	if d.GetResultId() == "" {
		d.ResultId = c.desc.GetResultId()
	}
	c.desc, c.sub, c.found = d, d.GetSubpartitionIndex(), nil
	set, idx := c.set, c.idx
	c.mu.Unlock()
	if set != nil {
		set.in.push(inputEvent{kind: evUpdated, ch: idx})
	}
}

// watch makes set (nil: none) the reader told of updates, as its channel idx.
func (c *inputChannel) watch(set *channelSet, idx int) {
	c.mu.Lock()
	c.set, c.idx = set, idx
	c.mu.Unlock()
}

// attach is watch, returning what open needs (snapshot), under one lock.
func (c *inputChannel) attach(set *channelSet, idx int) (*pb.InputChannelDescriptor, int32, *atomic.Pointer[resultPartition]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.set, c.idx = set, idx
	return c.desc, c.sub, c.found
}

// snapshot is the channel's descriptor, subpartition and shared lookup slot.
func (c *inputChannel) snapshot() (*pb.InputChannelDescriptor, int32, *atomic.Pointer[resultPartition]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.desc, c.sub, c.found
}

var errProducerUnknown = errors.New("producer not yet known")

// ---- a task's inbox ----

// eventKind says what an inputEvent brings.
type eventKind uint8

const (
	evOpened  eventKind = iota + 1 // the producer accepted the channel
	evBatch                        // records of a remote channel (batch), the last with end_of_partition
	evReady                        // a local channel has something: poll it
	evLocal                        // a local channel's subscription answered (local or err)
	evRefused                      // the producer refused the channel (err); after the open: it failed there
	evBroken                       // the channel's stream broke (err)
	evUpdated                      // the channel's descriptor changed (UpdatePartitionInfo)
	evRetry                        // a backoff passed, or the wait for a producer ended: open again
)

// inputEvent is one thing that happened to channel ch of a channelSet, in its open gen.
type inputEvent struct {
	kind  eventKind
	ch    int
	gen   uint32
	batch *pb.RecordBatch
	local subpartitionReader
	err   error
}

// inbox is where every channel of one task delivers: the Exchange streams' readers, the local
// subpartitions' wake-ups, descriptor updates and timers push events, and the task's loop takes
// them all at once. Pushing never waits: what a channel may have in it is bounded by its
// credit (remote) or by one wake-up (local).
type inbox struct {
	// bytes counts the encoded batches delivered from Exchange streams: the consumer task's
	// (nil: not counted; set before any channel opens).
	bytes  *atomic.Int64
	mu     sync.Mutex
	events []inputEvent
	spare  []inputEvent
	closed bool
	signal chan struct{} // capacity 1: events are waiting
}

func newInbox() *inbox { return &inbox{signal: make(chan struct{}, 1)} }

// push adds an event; it reports false when the inbox was closed (the event is dropped).
func (q *inbox) push(ev inputEvent) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	q.events = append(q.events, ev)
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
	return true
}

// take returns every waiting event; the slice is reused by the call after next.
func (q *inbox) take() []inputEvent {
	q.mu.Lock()
	defer q.mu.Unlock()
	evs := q.events
	q.events, q.spare = q.spare[:0], evs
	return evs
}

// close drops every later push and returns what was still waiting.
func (q *inbox) close() []inputEvent {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	evs := q.events
	q.events = nil
	return evs
}

// ---- the channels of one task ----

// channelSet opens and reads a task's input channels without a goroutine per channel: every
// channel delivers into one inbox and the task's loop handles the events (handle). A remote
// channel rides its producer TM's Exchange stream (exchange.go); a local one, whose producer
// runs on this TM, is read straight from the subpartition by the task's loop when it wakes the
// inbox, without the network; a channel of an older producer has a goroutine reading a
// ReadPartition stream of its own.
type channelSet struct {
	tm       *TaskManager
	ctx      context.Context
	job      string
	consumer string
	retry    bool      // a task's: retry NotFound and Unavailable up to InputConnectTimeout
	deadline time.Time // of every channel's retries: InputConnectTimeout from the first add
	in       *inbox
	chans    []*channelState
	live     int // channels not ended
	closed   bool
	// groups collects add's remote opens (adding), by producer TM, result and subpartition:
	// each goes out as one group (exchangeClient.openGroup).
	groups []remoteGroup
	adding bool
}

// remoteGroup is the channels of one add to open on one producer TM's stream together.
type remoteGroup struct {
	addr, result string
	sub          int32
	opens        []pendingOpen
}

type chanPhase uint8

const (
	phaseWaiting chanPhase = iota // no producer known yet, or backing off
	phaseOpening                  // asked the producer
	phaseOpen
	phaseEnded
)

// channelState is one channel of a set; only the task's loop touches it.
// What a channel rarely needs (a retry, a wait for its producer, an older producer's stream) is
// in channelRare, made when first needed: a 512 x 512 job has 262,144 channelStates.
type channelState struct {
	in      *inputChannel
	desc    *pb.InputChannelDescriptor // as last opened
	gen     uint32                     // bumped at each open: events of an earlier one are stale
	wakeGen atomic.Uint32              // the open a local reader's wake-ups belong to
	mux     *muxChannel
	local   subpartitionReader
	set     *channelSet
	reader  pipelinedReader // a local channel's reader, when the producer was registered at its open
	rare    *channelRare
	idx     int32
	phase   chanPhase
}

type channelRare struct {
	legacy  *legacyChannel
	stop    func()        // ends a local subscription still waiting for its partition
	backoff time.Duration // the next retry's wait; 0: the first (minBackoff)
	timer   *time.Timer
	lastErr error
}

// r is the channel's channelRare, made if it has none.
func (cs *channelState) r() *channelRare {
	if cs.rare == nil {
		cs.rare = &channelRare{}
	}
	return cs.rare
}

// legacy is the channel's ReadPartition stream of an older producer, or nil.
func (cs *channelState) legacy() *legacyChannel {
	if cs.rare == nil {
		return nil
	}
	return cs.rare.legacy
}

func (cs *channelState) lastErr() error {
	if cs.rare == nil {
		return nil
	}
	return cs.rare.lastErr
}

// minBackoff is the first retry's wait of a refused channel; it doubles up to a second.
const minBackoff = 10 * time.Millisecond

func (tm *TaskManager) newChannelSet(ctx context.Context, job, consumer string, retry bool) *channelSet {
	return &channelSet{tm: tm, ctx: ctx, job: job, consumer: consumer, retry: retry, in: newInbox()}
}

// add makes the channels of the set and starts opening them.
func (s *channelSet) add(ics ...*inputChannel) {
	if s.deadline.IsZero() {
		s.deadline = time.Now().Add(s.tm.cfg.InputConnectTimeout)
	}
	states := make([]channelState, len(ics))
	s.adding = true
	s.chans = slices.Grow(s.chans, len(ics))
	for k, ic := range ics {
		i := len(s.chans)
		cs := &states[k]
		cs.in, cs.set, cs.idx = ic, s, int32(i)
		s.chans = append(s.chans, cs)
		s.live++
		d, sub, found := ic.attach(s, i)
		s.openWith(i, d, sub, found)
	}
	s.openGroups()
}

// collect puts a remote open into add's groups.
func (s *channelSet) collect(addr, result string, sub int32, o pendingOpen) {
	for k := range s.groups {
		if g := &s.groups[k]; g.addr == addr && g.result == result && g.sub == sub {
			g.opens = append(g.opens, o)
			return
		}
	}
	s.groups = append(s.groups, remoteGroup{addr: addr, result: result, sub: sub, opens: []pendingOpen{o}})
}

// openGroups sends add's groups, one per producer TM, result and subpartition.
func (s *channelSet) openGroups() {
	for _, g := range s.groups {
		x, err := s.tm.exchange(g.addr)
		var muxes []muxChannel
		if err == nil {
			muxes, err = x.openGroup(s.job, g.result, g.sub, s.consumer, g.opens, s.in, !s.retry)
		}
		for k, o := range g.opens {
			if err != nil {
				s.in.push(inputEvent{kind: evRefused, ch: o.i, gen: o.gen, err: err})
				continue
			}
			s.chans[o.i].mux = &muxes[k]
		}
	}
	s.groups, s.adding = nil, false
}

// open asks for channel i, if its producer is known.
func (s *channelSet) open(i int) {
	d, sub, found := s.chans[i].in.snapshot()
	s.openWith(i, d, sub, found)
}

// openWith is open with the channel's descriptor, subpartition and shared lookup slot.
func (s *channelSet) openWith(i int, d *pb.InputChannelDescriptor, sub int32, found *atomic.Pointer[resultPartition]) {
	cs := s.chans[i]
	if d.GetProducerAttemptId() == "" || d.GetProducerDataAddress() == "" {
		// UpdatePartitionInfo will say (evUpdated); until the deadline at most.
		cs.phase, cs.r().lastErr = phaseWaiting, errProducerUnknown
		s.retryAt(i, time.Until(s.deadline))
		return
	}
	cs.gen++
	cs.desc, cs.phase = d, phaseOpening
	gen := cs.gen
	request := func() *pb.ReadPartitionRequest {
		return &pb.ReadPartitionRequest{
			JobId:             s.job,
			ResultId:          d.GetResultId(),
			PartitionIndex:    d.GetPartitionIndex(),
			SubpartitionIndex: sub,
			ProducerAttemptId: d.GetProducerAttemptId(),
			ConsumerAttemptId: s.consumer,
		}
	}
	addr := d.GetProducerDataAddress()
	switch {
	case addr == s.tm.DataAddr():
		cs.wakeGen.Store(gen)
		wake := cs
		var p *resultPartition
		if found != nil {
			if p = found.Load(); p != nil && p.isReleased() {
				p = nil // released (and gone from the registry) since another gate found it
			}
		}
		if p == nil {
			if p = s.tm.parts.lookup(s.job, d.GetResultId(), d.GetPartitionIndex(), d.GetProducerAttemptId()); p != nil && found != nil {
				found.Store(p)
			}
		}
		if p != nil {
			// The producer is here already (the common case): open without an event, the
			// reader in the channel's own memory.
			local := pb.ReadPartitionRequest{JobId: s.job, ResultId: d.GetResultId(), PartitionIndex: d.GetPartitionIndex(),
				SubpartitionIndex: sub, ProducerAttemptId: d.GetProducerAttemptId(), ConsumerAttemptId: s.consumer}
			r, ready, err := s.tm.readerOf(p, &local, wake, &cs.reader)
			switch {
			case err != nil:
				s.in.push(inputEvent{kind: evLocal, ch: i, gen: gen, err: err})
			case ready:
				cs.local, cs.phase = r, phaseOpen
				s.in.push(inputEvent{kind: evReady, ch: i, gen: gen})
			default:
				cs.local, cs.phase = r, phaseOpen
			}
			return
		}
		cs.r().stop = s.tm.subscribeAsync(request(), wake, func(r subpartitionReader, err error) {
			if !s.in.push(inputEvent{kind: evLocal, ch: i, gen: gen, local: r, err: err}) && r != nil {
				r.close() // the task ended meanwhile
			}
		})
	case s.tm.legacyPeer(addr):
		cs.r().legacy = s.tm.openLegacy(s.ctx, addr, request(), s.in, i, gen)
	case s.adding:
		s.collect(addr, d.GetResultId(), sub, pendingOpen{i: i, gen: gen, part: d.GetPartitionIndex(), attempt: d.GetProducerAttemptId()})
	default:
		x, err := s.tm.exchange(addr)
		if err == nil {
			cs.mux, err = x.open(request(), s.in, i, gen, !s.retry)
		}
		if err != nil {
			s.in.push(inputEvent{kind: evRefused, ch: i, gen: gen, err: err})
		}
	}
}

// wake is the subpartition of a local channel saying it has something to take.
func (cs *channelState) wake() {
	cs.set.in.push(inputEvent{kind: evReady, ch: int(cs.idx), gen: cs.wakeGen.Load()})
}

// retryAt pushes evRetry for channel i after d.
func (s *channelSet) retryAt(i int, d time.Duration) {
	cs := s.chans[i]
	r := cs.r()
	if r.timer != nil {
		r.timer.Stop()
	}
	gen := cs.gen
	r.timer = time.AfterFunc(max(d, 0), func() { s.in.push(inputEvent{kind: evRetry, ch: i, gen: gen}) })
}

// handle applies one event; it returns the records it brings (in a fresh slice) and whether
// that channel ended, or the error that fails the task.
func (s *channelSet) handle(ev inputEvent) (records []operator.Record, ended bool, err error) {
	cs := s.chans[ev.ch]
	if cs.phase == phaseEnded {
		if ev.local != nil {
			ev.local.close()
		}
		return nil, false, nil
	}
	switch ev.kind {
	case evUpdated:
		if cs.phase == phaseWaiting {
			if cs.rare != nil {
				cs.rare.backoff = 0
			}
			s.open(ev.ch)
		}
		return nil, false, nil
	case evRetry:
		if ev.gen != cs.gen || cs.phase != phaseWaiting {
			return nil, false, nil
		}
		if cs.lastErr() == errProducerUnknown && time.Now().After(s.deadline) {
			return nil, false, s.unavailable(cs)
		}
		s.open(ev.ch)
		return nil, false, nil
	}
	if ev.gen != cs.gen {
		if ev.local != nil {
			ev.local.close()
		}
		return nil, false, nil // an earlier open's
	}
	d := cs.desc
	switch ev.kind {
	case evOpened:
		cs.phase = phaseOpen
	case evLocal:
		if cs.rare != nil {
			cs.rare.stop = nil
		}
		if ev.err != nil {
			return nil, false, s.refused(ev.ch, ev.err)
		}
		cs.local, cs.phase = ev.local, phaseOpen
		return s.pollLocal(ev.ch)
	case evReady:
		if cs.local != nil {
			return s.pollLocal(ev.ch)
		}
	case evBatch:
		cs.phase = phaseOpen
		if cs.mux != nil {
			cs.mux.took()
		} else if l := cs.legacy(); l != nil {
			l.took()
		}
		eop := ev.batch.GetEndOfPartition()
		if eop {
			s.end(cs, false)
		}
		return fromPB(ev.batch.GetRecords()), eop, nil
	case evRefused, evBroken:
		if cs.phase == phaseOpening && (cs.mux == nil || !cs.mux.opened.Load()) {
			return nil, false, s.refused(ev.ch, ev.err)
		}
		return nil, false, fmt.Errorf("input %s/%d: stream from producer %s at %s broke: %w",
			d.GetResultId(), d.GetPartitionIndex(), d.GetProducerAttemptId(), d.GetProducerDataAddress(), ev.err)
	}
	return nil, false, nil
}

// pollLocal takes a batch from local channel i; with more there it comes back to it after the
// other channels' events (a wake-up of its own), else the subpartition wakes it.
func (s *channelSet) pollLocal(i int) ([]operator.Record, bool, error) {
	cs := s.chans[i]
	rs, eop, err := cs.local.poll(nil, batchRecords)
	if err != nil {
		d := cs.desc
		return nil, false, fmt.Errorf("input %s/%d: local partition of producer %s broke: %w",
			d.GetResultId(), d.GetPartitionIndex(), d.GetProducerAttemptId(), err)
	}
	if eop {
		s.end(cs, false)
	} else if len(rs) > 0 {
		s.in.push(inputEvent{kind: evReady, ch: i, gen: cs.gen})
	}
	return rs, eop, nil
}

// refused handles a refused open: an older producer is read the old way; NotFound and
// Unavailable are retried with backoff up to the deadline (a task's set); anything else fails.
func (s *channelSet) refused(i int, err error) error {
	cs := s.chans[i]
	d := cs.desc
	viaLegacy := cs.legacy() != nil
	cs.mux, cs.local = nil, nil
	if cs.rare != nil {
		cs.rare.legacy = nil
	}
	code := status.Code(err)
	if code == codes.Unimplemented && d.GetProducerDataAddress() != s.tm.DataAddr() && !viaLegacy {
		// Every channel on the stream to an older producer gets this: each reads it the old way.
		s.tm.markLegacy(d.GetProducerDataAddress())
		s.open(i)
		return nil
	}
	if !s.retry {
		return err
	}
	r := cs.r()
	r.lastErr = err
	if code != codes.NotFound && code != codes.Unavailable {
		return fmt.Errorf("input %s/%d: producer %s at %s refused: %w",
			d.GetResultId(), d.GetPartitionIndex(), d.GetProducerAttemptId(), d.GetProducerDataAddress(), err)
	}
	if time.Now().After(s.deadline) {
		return s.unavailable(cs)
	}
	cs.phase = phaseWaiting
	if r.backoff == 0 {
		r.backoff = minBackoff
	}
	s.retryAt(i, r.backoff)
	r.backoff = min(2*r.backoff, time.Second)
	return nil
}

func (s *channelSet) unavailable(cs *channelState) error {
	d := cs.in.current()
	return fmt.Errorf("input %s/%d: producer %s at %q not available after %v: %w",
		d.GetResultId(), d.GetPartitionIndex(), d.GetProducerAttemptId(), d.GetProducerDataAddress(), s.tm.cfg.InputConnectTimeout, cs.lastErr())
}

// end marks a channel ended; tell says the producer must be told to stop sending.
func (s *channelSet) end(cs *channelState, tell bool) {
	if cs.phase == phaseEnded {
		return
	}
	if tell {
		switch {
		case cs.mux != nil:
			cs.mux.abort()
		case cs.legacy() != nil:
			cs.rare.legacy.close()
		}
	}
	if cs.local != nil {
		cs.local.close()
	}
	if r := cs.rare; r != nil {
		if r.stop != nil {
			r.stop()
		}
		if r.timer != nil {
			r.timer.Stop()
		}
	}
	cs.in.watch(nil, 0)
	cs.phase = phaseEnded
	s.live--
}

// close ends every channel left: the producers stop sending, local subpartitions are given up.
func (s *channelSet) close() {
	if s.closed {
		return
	}
	s.closed = true
	for _, cs := range s.chans {
		s.end(cs, true)
	}
	for _, ev := range s.in.close() {
		if ev.local != nil {
			ev.local.close()
		}
	}
}

// channelReader is one input channel read by a goroutine that waits for it: tools and tests
// (a task reads all its channels in its own loop, consume).
type channelReader interface {
	// next returns the channel's next records; eop marks the last batch.
	next(ctx context.Context) (records []operator.Record, eop bool, err error)
	// close releases the channel (the producer stops sending and frees the subpartition).
	close()
}

// openChannel opens the input channel d names for task t and waits until it is open: on this
// TM directly, or on the producer TM's Exchange stream. A refusal keeps its status code, and is
// not retried.
func (tm *TaskManager) openChannel(ctx context.Context, t *task, d *pb.InputChannelDescriptor) (channelReader, error) {
	s := tm.newChannelSet(ctx, t.tdd.GetJobId(), t.attempt(), false)
	s.add(&inputChannel{desc: d, sub: d.GetSubpartitionIndex()})
	r := &setReader{s: s}
	// Open, or its answer and end came together (a finished partition with nothing left).
	for s.chans[0].phase != phaseOpen && s.chans[0].phase != phaseEnded && len(r.records) == 0 && !r.eop {
		if err := r.wait(ctx); err != nil {
			s.close()
			return nil, err
		}
	}
	return r, nil
}

// setReader reads a channelSet of one channel for a goroutine that waits.
type setReader struct {
	s       *channelSet
	pending []inputEvent
	records []operator.Record
	eop     bool
}

// wait handles the next events; it stops at the first that brings records or the end.
func (r *setReader) wait(ctx context.Context) error {
	for len(r.pending) == 0 {
		select {
		case <-r.s.in.signal:
		case <-ctx.Done():
			return ctx.Err()
		}
		r.pending = append(r.pending, r.s.in.take()...)
	}
	for len(r.pending) > 0 {
		ev := r.pending[0]
		r.pending = r.pending[1:]
		rs, eop, err := r.s.handle(ev)
		if err != nil {
			return err
		}
		r.records, r.eop = append(r.records, rs...), r.eop || eop
		if len(r.records) > 0 || r.eop {
			return nil
		}
	}
	return nil
}

func (r *setReader) next(ctx context.Context) ([]operator.Record, bool, error) {
	for len(r.records) == 0 && !r.eop {
		if err := r.wait(ctx); err != nil {
			return nil, false, err
		}
	}
	rs, eop := r.records, r.eop
	r.records, r.eop = nil, false
	return rs, eop, nil
}

func (r *setReader) close() { r.s.close() }

// inFlight is the batches the producer sent that the reader has not taken (a remote channel).
func (r *setReader) inFlight() int {
	if m := r.s.chans[0].mux; m != nil {
		return int(m.inFlight.Load())
	}
	return 0
}
