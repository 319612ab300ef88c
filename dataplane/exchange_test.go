package dataplane

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/operator"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// partitionOn adds a PIPELINED FORWARD partition of producer attempt to dp.
func partitionOn(n *node, result, attempt string) *Partition {
	p := newPartition(PartitionKey{job: "j", result: result, index: 0, attempt: attempt}, produces(result, 0, 1, forward, pipelined))
	n.parts.add(p)
	return p
}

func readReq(result, attempt string) *pb.ReadPartitionRequest {
	return &pb.ReadPartitionRequest{JobId: "j", ResultId: result, ProducerAttemptId: attempt, ConsumerAttemptId: "c-" + attempt}
}

// produce writes n records into p from its own goroutine, then finishes it; the error (nil
// when all went in) arrives on the channel.
func produce(p *Partition, n int) <-chan error {
	done := make(chan error, 1)
	go func() {
		for i := range n {
			if err := p.Add(context.Background(), operator.NumericRecord(int64(i), 1, 0, int64(i))); err != nil {
				done <- err
				return
			}
		}
		p.Finish()
		done <- nil
	}()
	return done
}

// openOn opens the channel req names on the producer TM at addr, for a reader that waits.
func openOn(ctx context.Context, cons *node, addr string, req *pb.ReadPartitionRequest) (*setReader, error) {
	r, err := cons.openChannel(ctx, req.GetJobId(), req.GetConsumerAttemptId(), &pb.InputChannelDescriptor{ResultId: req.GetResultId(), PartitionIndex: req.GetPartitionIndex(),
		SubpartitionIndex: req.GetSubpartitionIndex(), ProducerAttemptId: req.GetProducerAttemptId(), ProducerDataAddress: addr})
	if err != nil {
		return nil, err
	}
	return r.(*setReader), nil
}

// drain reads r to its end and returns the records read.
func drain(ctx context.Context, r channelReader) (int, error) {
	n := 0
	for {
		rs, eop, err := r.next(ctx)
		if err != nil {
			return n, err
		}
		n += len(rs)
		if eop {
			return n, nil
		}
	}
}

// TestSlowChannelDoesNotStallItsStream: two channels from one producer TM share one Exchange
// stream. The consumer never reads the first; the second still delivers every record, the
// first's producer is held back by its credit (its subpartition stays full, nothing more than
// the channel's window travels), and once the consumer reads the first it delivers too.
func TestSlowChannelDoesNotStallItsStream(t *testing.T) {
	prod, cons := newNode(t, "producer", nil), newNode(t, "consumer", nil)
	slowP, fastP := partitionOn(prod, "slow", "a1"), partitionOn(prod, "fast", "a2")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	x, err := cons.exchange(prod.DataAddr())
	if err != nil {
		t.Fatal(err)
	}
	slow, err := openOn(ctx, cons, x.addr, readReq("slow", "a1"))
	if err != nil {
		t.Fatal(err)
	}
	fast, err := openOn(ctx, cons, x.addr, readReq("fast", "a2"))
	if err != nil {
		t.Fatal(err)
	}
	if x2, _ := cons.exchange(prod.DataAddr()); x2 != x {
		t.Fatal("a second stream was opened to the same producer TM")
	}

	const records = 200_000 // far more than a subpartition buffer plus a channel's window
	slowDone, fastDone := produce(slowP, records), produce(fastP, records)
	if n, err := drain(ctx, fast); err != nil || n != records {
		t.Fatalf("the fast channel delivered %d of %d records while the slow one was not read: %v", n, records, err)
	}
	if err := <-fastDone; err != nil {
		t.Fatal(err)
	}
	// The slow channel's producer is blocked on a full subpartition: its credit ran out.
	waitFor(t, 10*time.Second, "the slow channel's producer to be held back", func() (bool, string) {
		inFlight, sp := slow.inFlight(), slowP.subs[0]
		full := sp.buffered() == int(sp.capacity)
		return full && inFlight <= channelCredit, fmt.Sprintf("subpartition %d/%d, %d batches at the consumer (window %d)",
			sp.buffered(), sp.capacity, inFlight, channelCredit)
	})
	select {
	case err := <-slowDone:
		t.Fatalf("the slow producer finished (%v) though its consumer read nothing", err)
	default:
	}
	if n, err := drain(ctx, slow); err != nil || n != records {
		t.Fatalf("the slow channel delivered %d of %d records once read: %v", n, records, err)
	}
	if err := <-slowDone; err != nil {
		t.Fatal(err)
	}
}

// TestBrokenStreamFailsExactlyItsChannels: when the stream to one producer TM breaks (that TM
// dies), every channel on it fails and no other: a channel from a second producer TM keeps
// delivering, and a channel opened later to a new producer at a new stream works.
func TestBrokenStreamFailsExactlyItsChannels(t *testing.T) {
	dying, other, cons := newNode(t, "dying", nil), newNode(t, "other", nil), newNode(t, "consumer", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var onDying []channelReader
	for i := range 3 {
		partitionOn(dying, fmt.Sprint("d", i), fmt.Sprint("a", i))
		x, err := cons.exchange(dying.DataAddr())
		if err != nil {
			t.Fatal(err)
		}
		r, err := openOn(ctx, cons, x.addr, readReq(fmt.Sprint("d", i), fmt.Sprint("a", i)))
		if err != nil {
			t.Fatal(err)
		}
		onDying = append(onDying, r)
	}
	otherP := partitionOn(other, "o", "b1")
	xo, err := cons.exchange(other.DataAddr())
	if err != nil {
		t.Fatal(err)
	}
	survivor, err := openOn(ctx, cons, xo.addr, readReq("o", "b1"))
	if err != nil {
		t.Fatal(err)
	}

	dying.Kill()
	for i, r := range onDying {
		_, err := drain(ctx, r)
		if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "exchange stream to "+dying.DataAddr()+" broke") {
			t.Fatalf("channel %d on the broken stream: %v; want the stream's failure", i, err)
		}
	}
	done := produce(otherP, 10_000)
	if n, err := drain(ctx, survivor); err != nil || n != 10_000 {
		t.Fatalf("the channel from the other TM delivered %d of 10000: %v", n, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The broken stream is gone: opening again to the dead address fails as unavailable (a
	// consumer retries that), not with the old stream's error.
	x, err := cons.exchange(dying.DataAddr())
	if err == nil {
		_, err = openOn(ctx, cons, x.addr, readReq("d0", "a0"))
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("open to the dead TM after the break: %v; want Unavailable", err)
	}
}

// TestExchangeRefusalsKeepTheirCodes: a channel for a partition not (yet) on the producer is
// refused NotFound (retried by consumers), a second reader of a PIPELINED subpartition
// FailedPrecondition, and the stream carries on for the other channels.
func TestExchangeRefusalsKeepTheirCodes(t *testing.T) {
	prod, cons := newNode(t, "producer", nil), newNode(t, "consumer", nil)
	p := partitionOn(prod, "r", "a1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	x, err := cons.exchange(prod.DataAddr())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := openOn(ctx, cons, x.addr, readReq("missing", "zz")); status.Code(err) != codes.NotFound {
		t.Fatalf("open of a missing partition: %v; want NotFound", err)
	}
	first, err := openOn(ctx, cons, x.addr, readReq("r", "a1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := openOn(ctx, cons, x.addr, readReq("r", "a1")); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a second reader: %v; want FailedPrecondition", err)
	}
	done := produce(p, 5000)
	if n, err := drain(ctx, first); err != nil || n != 5000 {
		t.Fatalf("after the refusals the channel delivered %d of 5000: %v", n, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestLocalChannelSkipsTheNetwork: a channel whose producer is on the same TM is read in
// memory (no Exchange stream is opened) with the same semantics: every record, end of
// partition, and a refusal keeps its code.
func TestLocalChannelSkipsTheNetwork(t *testing.T) {
	dp := newNode(t, "solo", nil)
	p := partitionOn(dp, "r", "a1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := dp.openChannel(ctx, "j", "c1", channel("r", 0, 0, "a1", dp.cfg.DataAddr))
	if err != nil {
		t.Fatal(err)
	}
	if r.(*setReader).s.chans[0].local == nil {
		t.Fatalf("a channel to this TM's own address is %T, want a local channel", r)
	}
	done := produce(p, 50_000)
	if n, err := drain(ctx, r); err != nil || n != 50_000 {
		t.Fatalf("the local channel delivered %d of 50000: %v", n, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	dp.exMu.Lock()
	streams := len(dp.exchanges)
	dp.exMu.Unlock()
	if streams != 0 {
		t.Fatalf("%d Exchange streams opened for a local channel", streams)
	}
	if _, err := dp.openChannel(ctx, "j", "c1", channel("none", 0, 0, "zz", dp.cfg.DataAddr)); status.Code(err) != codes.NotFound {
		t.Fatalf("a local channel to a missing partition: %v; want NotFound", err)
	}
}

// legacyData is the DataService of an older build: ReadPartition only (Exchange unimplemented),
// served from a real TM's partitions.
type legacyData struct {
	pb.UnimplementedDataServiceServer
	dp *Plane
}

func (l legacyData) ReadPartition(req *pb.ReadPartitionRequest, stream pb.DataService_ReadPartitionServer) error {
	return (&dataService{dp: l.dp}).ReadPartition(req, stream)
}

// legacyProducer serves prod's partitions as a TM of an older build would, on a server of
// its own, and returns its address.
func legacyProducer(t *testing.T, prod *node) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterDataServiceServer(srv, legacyData{dp: prod.Plane})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// TestProducerWithoutExchangeIsReadAStreamPerChannel: a producer TM of an older build serves
// ReadPartition but not Exchange; a consumer's channel to it falls back to a stream of its own
// and delivers every record, and later channels to it go there directly.
func TestProducerWithoutExchangeIsReadAStreamPerChannel(t *testing.T) {
	prod, cons := newNode(t, "old-producer", nil), newNode(t, "consumer", nil)
	addr := legacyProducer(t, prod)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 2 {
		p := partitionOn(prod, fmt.Sprint("r", i), fmt.Sprint("a", i))
		r, err := cons.openChannel(ctx, "j", "c1", channel(fmt.Sprint("r", i), 0, 0, fmt.Sprint("a", i), addr))
		if err != nil {
			t.Fatalf("channel %d to the older producer: %v", i, err)
		}
		if r.(*setReader).s.chans[0].legacy() == nil {
			t.Fatalf("channel %d to a producer without Exchange is %T, want a stream of its own", i, r)
		}
		done := produce(p, 20_000)
		if n, err := drain(ctx, r); err != nil || n != 20_000 {
			t.Fatalf("channel %d delivered %d of 20000: %v", i, n, err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		r.close()
	}
	if !cons.legacyPeer(addr) {
		t.Fatal("the older producer is not remembered")
	}
}

// readSet reads every channel of s to its end and returns the records per channel.
func readSet(ctx context.Context, t *testing.T, s *ChannelSet) []int {
	t.Helper()
	got := make([]int, len(s.chans))
	for s.live > 0 {
		select {
		case <-s.in.signal:
		case <-ctx.Done():
			t.Fatalf("%d of %d channels not ended: %v", s.live, len(s.chans), ctx.Err())
		}
		for _, ev := range s.in.take() {
			ch := ev.ch
			rs, _, err := s.Handle(ev)
			if err != nil {
				t.Fatalf("channel %d: %v", ch, err)
			}
			got[ch] += len(rs)
		}
	}
	return got
}

// groupedProducer adds n PIPELINED ALL_TO_ALL partitions of result r (partition i of attempt
// a<i>, subs subpartitions each) to prod, and the consumer's channels to subpartition sub of
// each.
func groupedProducer(prod *node, r string, n int, subs, sub int32) ([]*Partition, []*InputChannel) {
	var ps []*Partition
	var ics []*InputChannel
	for i := range n {
		a := fmt.Sprint("a", i)
		p := newPartition(PartitionKey{job: "j", result: r, index: int32(i), attempt: a},
			produces(r, int32(i), subs, pb.Distribution_DISTRIBUTION_ALL_TO_ALL, pb.ResultType_RESULT_TYPE_PIPELINED))
		prod.parts.add(p)
		ps = append(ps, p)
		d := channel(r, int32(i), sub, a, prod.DataAddr())
		ics = append(ics, &InputChannel{desc: d, sub: sub})
	}
	return ps, ics
}

// produceTo writes n records of key k into subpartition sub of each of ps (RouteKey picks
// it), then finishes them.
func produceTo(t *testing.T, ps []*Partition, subs, sub int32, n int) {
	t.Helper()
	var key int64
	for RouteKey(operator.Int64Bytes(key), int(subs)) != int(sub) {
		key++
	}
	for _, p := range ps {
		go func() {
			for i := range n {
				if err := p.Add(context.Background(), operator.NumericRecord(key, 1, 0, int64(i))); err != nil {
					return
				}
			}
			p.Finish()
		}()
	}
}

// TestChannelGroupOpensAConsumersChannelsWithOneControl: a consumer's channels to one
// producer TM (one result, one subpartition, 600 partitions) are opened by one group control,
// since the producer's hello announced groups, and every channel delivers all its records.
func TestChannelGroupOpensAConsumersChannelsWithOneControl(t *testing.T) {
	prod, cons := newNode(t, "producer", nil), newNode(t, "consumer", nil)
	const n, subs, sub, records = 600, 4, 3, 700
	ps, ics := groupedProducer(prod, "r", n, subs, sub)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The stream first, and its hello: what the writer sends before the hello arrives (after
	// helloWait on a loaded machine) goes one control a channel.
	x, err := cons.exchange(prod.DataAddr())
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the producer's hello announcing channel groups", func() (bool, string) {
		return x.groups.Load(), ""
	})
	s := cons.NewChannelSet(ctx, "j", "c1", true)
	defer s.Close()
	s.Add(ics...)
	produceTo(t, ps, subs, sub, records)
	for i, got := range readSet(ctx, t, s) {
		if got != records {
			t.Fatalf("channel %d delivered %d of %d records", i, got, records)
		}
	}
	if g, c, one := prod.opensServed.group.Load(), prod.opensServed.groupChannels.Load(), prod.opensServed.single.Load(); g != 1 || c != n || one != 0 {
		t.Fatalf("producer served %d groups of %d channels and %d single opens; want 1 group of %d, no single open", g, c, one, n)
	}
}

// TestProducerWithoutGroupsServesAGroupingConsumer: a producer TM of a build before channel
// groups (no hello; it ignores open_group) still serves a consumer of this build: the
// consumer waits for a hello that does not come, then opens each channel with a control of
// its own, and every channel delivers. A later group to it goes out one control a channel at
// once. A group the older producer is sent anyway opens nothing there.
func TestProducerWithoutGroupsServesAGroupingConsumer(t *testing.T) {
	prod := newNode(t, "old-producer", func(c *Config) { c.ExchangeWithoutGroups = true })
	cons := newNode(t, "consumer", nil)
	const n, subs, sub, records = 300, 2, 1, 500
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for round, r := range []string{"r1", "r2"} {
		ps, ics := groupedProducer(prod, r, n, subs, sub)
		s := cons.NewChannelSet(ctx, "j", fmt.Sprint("c", round), true)
		s.Add(ics...)
		produceTo(t, ps, subs, sub, records)
		for i, got := range readSet(ctx, t, s) {
			if got != records {
				t.Fatalf("round %d: channel %d delivered %d of %d records", round, i, got, records)
			}
		}
		s.Close()
		if g, one := prod.opensServed.group.Load(), prod.opensServed.single.Load(); g != 0 || one != int64((round+1)*n) {
			t.Fatalf("round %d: the older producer served %d groups and %d single opens; want none and %d", round, g, one, (round+1)*n)
		}
	}
	x, err := cons.exchange(prod.DataAddr())
	if err != nil {
		t.Fatal(err)
	}
	if x.groups.Load() {
		t.Fatal("a producer without a hello is taken for one with channel groups")
	}
	// What the older build does with a group control: ignores it (an unknown field there).
	_, ics := groupedProducer(prod, "r3", 2, subs, sub)
	srv := &exchangeServer{dp: prod.Plane, ctx: ctx, signal: make(chan struct{}, 1), chans: map[uint64]*serverChannel{}}
	g := &pb.ChannelGroup{JobId: "j", ResultId: "r3", SubpartitionIndex: sub, ConsumerAttemptId: "c9",
		PartitionIndexes: []int32{0, 1}, ProducerAttemptIds: []string{ics[0].desc.GetProducerAttemptId(), ics[1].desc.GetProducerAttemptId()}}
	if err := srv.control(&pb.ChannelControl{Channel: 1, Credit: channelCredit, OpenGroup: g}); err != nil || len(srv.chans) != 0 {
		t.Fatalf("an older producer given a group: %v, %d channels open; want it ignored", err, len(srv.chans))
	}
}

// TestChannelGroupViolationsEndTheStream: a group whose lists differ in length, that is empty,
// or that reuses a channel id open on the stream is the consumer's mistake and ends the stream
// (InvalidArgument), as a channel opened twice does.
func TestChannelGroupViolationsEndTheStream(t *testing.T) {
	prod := newNode(t, "producer", nil)
	_, ics := groupedProducer(prod, "r", 2, 2, 0)
	a0, a1 := ics[0].desc.GetProducerAttemptId(), ics[1].desc.GetProducerAttemptId()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := &exchangeServer{dp: prod.Plane, ctx: ctx, signal: make(chan struct{}, 1), chans: map[uint64]*serverChannel{}, limit: maxExchangeBytes}
	defer srv.end()
	group := func(first uint64, parts []int32, attempts ...string) *pb.ChannelControl {
		return &pb.ChannelControl{Channel: first, Credit: channelCredit, OpenGroup: &pb.ChannelGroup{JobId: "j", ResultId: "r",
			ConsumerAttemptId: "c", PartitionIndexes: parts, ProducerAttemptIds: attempts}}
	}
	if err := srv.control(group(1, []int32{0, 1}, a0, a1)); err != nil || len(srv.chans) != 2 {
		t.Fatalf("a valid group: %v, %d channels open", err, len(srv.chans))
	}
	for name, c := range map[string]*pb.ChannelControl{
		"lists of different lengths": group(10, []int32{0, 1}, a0),
		"no channel":                 group(10, nil),
		"an id open on the stream":   group(2, []int32{0}, a0),
		"channel id 0":               group(0, []int32{0}, a0),
	} {
		if err := srv.control(c); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
}
