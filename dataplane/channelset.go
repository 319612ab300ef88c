package dataplane

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/operator"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// ChannelSet opens and reads a task's input channels without a goroutine per channel: every
// channel delivers into one inbox and the task's loop handles the events (Handle). A remote
// channel rides its producer TM's Exchange stream (exchange_client.go); a local one, whose producer
// runs on this TM, is read straight from the subpartition by the task's loop when it wakes the
// inbox, without the network; a channel of an older producer has a goroutine reading a
// ReadPartition stream of its own.
type ChannelSet struct {
	dp       *Plane
	ctx      context.Context
	job      string
	consumer string
	retry    bool      // a task's: retry NotFound and Unavailable up to InputConnectTimeout
	deadline time.Time // of every channel's retries: InputConnectTimeout from the first Add
	in       *inbox
	chans    []*channelState
	live     int // channels not ended
	closed   bool
	// groups collects Add's remote opens (adding), by producer TM, result and subpartition:
	// each goes out as one group (exchangeClient.openGroup).
	groups []remoteGroup
	adding bool
}

// remoteGroup is the channels of one Add to open on one producer TM's stream together.
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
	in      *InputChannel
	desc    *pb.InputChannelDescriptor // as last opened
	gen     uint32                     // bumped at each open: events of an earlier one are stale
	wakeGen atomic.Uint32              // the open a local reader's wake-ups belong to
	mux     *muxChannel
	local   subpartitionReader
	set     *ChannelSet
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

// NewChannelSet makes the channel set of consumer attempt consumer of job; ctx bounds the
// streams of its older producers. retry is a task's: NotFound and Unavailable are retried up
// to InputConnectTimeout (a tool's refusal keeps its code).
func (dp *Plane) NewChannelSet(ctx context.Context, job, consumer string, retry bool) *ChannelSet {
	return &ChannelSet{dp: dp, ctx: ctx, job: job, consumer: consumer, retry: retry, in: newInbox()}
}

// CountBytes counts the encoded batches the set's channels receive from Exchange streams in c
// (the consumer task's); called before any channel opens.
func (s *ChannelSet) CountBytes(c *atomic.Int64) { s.in.bytes = c }

// AddGates adds the channels of a task's gates. A few tasks open their channels at a time: a
// wide job's hundreds of consumers opening hundreds of channels each at once only contend with
// each other (the registry, the streams' locks) and with the RUNNING reports of the tasks
// deployed with them. It fails only when ctx ends while it waits its turn.
func (s *ChannelSet) AddGates(ctx context.Context, gates []*InputGate) error {
	select {
	case s.dp.openers <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.dp.openers }()
	for _, g := range gates {
		s.Add(g.channels...)
	}
	return nil
}

// Signal is ready when events are waiting (Take).
func (s *ChannelSet) Signal() <-chan struct{} { return s.in.signal }

// Take returns every waiting event, for Handle; the slice is reused by the call after next.
func (s *ChannelSet) Take() []Event { return s.in.take() }

// Live is the number of channels that have not ended.
func (s *ChannelSet) Live() int { return s.live }

// Add makes the channels of the set and starts opening them.
func (s *ChannelSet) Add(ics ...*InputChannel) {
	if s.deadline.IsZero() {
		s.deadline = time.Now().Add(s.dp.cfg.InputConnectTimeout)
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

// collect puts a remote open into Add's groups.
func (s *ChannelSet) collect(addr, result string, sub int32, o pendingOpen) {
	for k := range s.groups {
		if g := &s.groups[k]; g.addr == addr && g.result == result && g.sub == sub {
			g.opens = append(g.opens, o)
			return
		}
	}
	s.groups = append(s.groups, remoteGroup{addr: addr, result: result, sub: sub, opens: []pendingOpen{o}})
}

// openGroups sends Add's groups, one per producer TM, result and subpartition.
func (s *ChannelSet) openGroups() {
	for _, g := range s.groups {
		x, err := s.dp.exchange(g.addr)
		var muxes []muxChannel
		if err == nil {
			muxes, err = x.openGroup(s.job, g.result, g.sub, s.consumer, g.opens, s.in, !s.retry)
		}
		for k, o := range g.opens {
			if err != nil {
				s.in.push(Event{kind: evRefused, ch: o.i, gen: o.gen, err: err})
				continue
			}
			s.chans[o.i].mux = &muxes[k]
		}
	}
	s.groups, s.adding = nil, false
}

// open asks for channel i, if its producer is known.
func (s *ChannelSet) open(i int) {
	d, sub, found := s.chans[i].in.snapshot()
	s.openWith(i, d, sub, found)
}

// openWith is open with the channel's descriptor, subpartition and shared lookup slot.
func (s *ChannelSet) openWith(i int, d *pb.InputChannelDescriptor, sub int32, found *atomic.Pointer[Partition]) {
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
	case addr == s.dp.cfg.DataAddr:
		cs.wakeGen.Store(gen)
		wake := cs
		var p *Partition
		if found != nil {
			if p = found.Load(); p != nil && p.isReleased() {
				p = nil // released (and gone from the registry) since another gate found it
			}
		}
		if p == nil {
			if p = s.dp.parts.lookup(s.job, d.GetResultId(), d.GetPartitionIndex(), d.GetProducerAttemptId()); p != nil && found != nil {
				found.Store(p)
			}
		}
		if p != nil {
			// The producer is here already (the common case): open without an event, the
			// reader in the channel's own memory.
			local := pb.ReadPartitionRequest{JobId: s.job, ResultId: d.GetResultId(), PartitionIndex: d.GetPartitionIndex(),
				SubpartitionIndex: sub, ProducerAttemptId: d.GetProducerAttemptId(), ConsumerAttemptId: s.consumer}
			r, ready, err := s.dp.readerOf(p, &local, wake, &cs.reader)
			switch {
			case err != nil:
				s.in.push(Event{kind: evLocal, ch: i, gen: gen, err: err})
			case ready:
				cs.local, cs.phase = r, phaseOpen
				s.in.push(Event{kind: evReady, ch: i, gen: gen})
			default:
				cs.local, cs.phase = r, phaseOpen
			}
			return
		}
		cs.r().stop = s.dp.subscribeAsync(request(), wake, func(r subpartitionReader, err error) {
			if !s.in.push(Event{kind: evLocal, ch: i, gen: gen, local: r, err: err}) && r != nil {
				r.close() // the task ended meanwhile
			}
		})
	case s.dp.legacyPeer(addr):
		cs.r().legacy = s.dp.openLegacy(s.ctx, addr, request(), s.in, i, gen)
	case s.adding:
		s.collect(addr, d.GetResultId(), sub, pendingOpen{i: i, gen: gen, part: d.GetPartitionIndex(), attempt: d.GetProducerAttemptId()})
	default:
		x, err := s.dp.exchange(addr)
		if err == nil {
			cs.mux, err = x.open(request(), s.in, i, gen, !s.retry)
		}
		if err != nil {
			s.in.push(Event{kind: evRefused, ch: i, gen: gen, err: err})
		}
	}
}

// wake is the subpartition of a local channel saying it has something to take.
func (cs *channelState) wake() {
	cs.set.in.push(Event{kind: evReady, ch: int(cs.idx), gen: cs.wakeGen.Load()})
}

// retryAt pushes evRetry for channel i after d.
func (s *ChannelSet) retryAt(i int, d time.Duration) {
	cs := s.chans[i]
	r := cs.r()
	if r.timer != nil {
		r.timer.Stop()
	}
	gen := cs.gen
	r.timer = time.AfterFunc(max(d, 0), func() { s.in.push(Event{kind: evRetry, ch: i, gen: gen}) })
}

// Handle applies one event; it returns the records it brings (in a fresh slice) and whether
// that channel ended, or the error that fails the task.
func (s *ChannelSet) Handle(ev Event) (records []operator.Record, ended bool, err error) {
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
func (s *ChannelSet) pollLocal(i int) ([]operator.Record, bool, error) {
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
		s.in.push(Event{kind: evReady, ch: i, gen: cs.gen})
	}
	return rs, eop, nil
}

// refused handles a refused open: an older producer is read the old way; NotFound and
// Unavailable are retried with backoff up to the deadline (a task's set); anything else fails.
func (s *ChannelSet) refused(i int, err error) error {
	cs := s.chans[i]
	d := cs.desc
	viaLegacy := cs.legacy() != nil
	cs.mux, cs.local = nil, nil
	if cs.rare != nil {
		cs.rare.legacy = nil
	}
	code := status.Code(err)
	if code == codes.Unimplemented && d.GetProducerDataAddress() != s.dp.cfg.DataAddr && !viaLegacy {
		// Every channel on the stream to an older producer gets this: each reads it the old way.
		s.dp.markLegacy(d.GetProducerDataAddress())
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

func (s *ChannelSet) unavailable(cs *channelState) error {
	d := cs.in.current()
	return fmt.Errorf("input %s/%d: producer %s at %q not available after %v: %w",
		d.GetResultId(), d.GetPartitionIndex(), d.GetProducerAttemptId(), d.GetProducerDataAddress(), s.dp.cfg.InputConnectTimeout, cs.lastErr())
}

// end marks a channel ended; tell says the producer must be told to stop sending.
func (s *ChannelSet) end(cs *channelState, tell bool) {
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

// Close ends every channel left: the producers stop sending, local subpartitions are given up.
func (s *ChannelSet) Close() {
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
