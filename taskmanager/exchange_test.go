package taskmanager

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

	"github.com/jmcluster/jmcluster/taskmanager/operators"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// partitionOn adds a PIPELINED FORWARD partition of producer attempt to tm.
func partitionOn(tm *TaskManager, result, attempt string) *resultPartition {
	p := newResultPartition(partitionKey{job: "j", result: result, index: 0, attempt: attempt}, produces(result, 0, 1, forward, pipelined))
	tm.parts.add(p)
	return p
}

func readReq(result, attempt string) *pb.ReadPartitionRequest {
	return &pb.ReadPartitionRequest{JobId: "j", ResultId: result, ProducerAttemptId: attempt, ConsumerAttemptId: "c-" + attempt}
}

// produce writes n records into p from its own goroutine, then finishes it; the error (nil
// when all went in) arrives on the channel.
func produce(p *resultPartition, n int) <-chan error {
	done := make(chan error, 1)
	go func() {
		for i := range n {
			if err := p.add(context.Background(), operators.Record{Key: int64(i), Value: 1, Seq: int64(i)}); err != nil {
				done <- err
				return
			}
		}
		p.finish()
		done <- nil
	}()
	return done
}

// openOn opens the channel req names on the producer TM at addr, for a reader that waits.
func openOn(ctx context.Context, cons *TaskManager, addr string, req *pb.ReadPartitionRequest) (*setReader, error) {
	tk := &task{tdd: &pb.TaskDeploymentDescriptor{JobId: req.GetJobId(), AttemptId: req.GetConsumerAttemptId()}}
	r, err := cons.openChannel(ctx, tk, &pb.InputChannelDescriptor{ResultId: req.GetResultId(), PartitionIndex: req.GetPartitionIndex(),
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
	prod, cons := newTM(t, "producer", nil, nil), newTM(t, "consumer", nil, nil)
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
	dying, other, cons := newTM(t, "dying", nil, nil), newTM(t, "other", nil, nil), newTM(t, "consumer", nil, nil)
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
	prod, cons := newTM(t, "producer", nil, nil), newTM(t, "consumer", nil, nil)
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
	tm := newTM(t, "solo", nil, nil)
	p := partitionOn(tm, "r", "a1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tk := &task{tdd: &pb.TaskDeploymentDescriptor{JobId: "j", AttemptId: "c1"}}
	r, err := tm.openChannel(ctx, tk, channel("r", 0, 0, "a1", tm.DataAddr()))
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
	tm.exMu.Lock()
	streams := len(tm.exchanges)
	tm.exMu.Unlock()
	if streams != 0 {
		t.Fatalf("%d Exchange streams opened for a local channel", streams)
	}
	if _, err := tm.openChannel(ctx, tk, channel("none", 0, 0, "zz", tm.DataAddr())); status.Code(err) != codes.NotFound {
		t.Fatalf("a local channel to a missing partition: %v; want NotFound", err)
	}
}

// legacyData is the DataService of an older build: ReadPartition only (Exchange unimplemented),
// served from a real TM's partitions.
type legacyData struct {
	pb.UnimplementedDataServiceServer
	tm *TaskManager
}

func (l legacyData) ReadPartition(req *pb.ReadPartitionRequest, stream pb.DataService_ReadPartitionServer) error {
	return (&dataService{tm: l.tm}).ReadPartition(req, stream)
}

// legacyProducer serves prod's partitions as a TM of an older build would, on a server of
// its own, and returns its address.
func legacyProducer(t *testing.T, prod *TaskManager) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterDataServiceServer(srv, legacyData{tm: prod})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// TestProducerWithoutExchangeIsReadAStreamPerChannel: a producer TM of an older build serves
// ReadPartition but not Exchange; a consumer's channel to it falls back to a stream of its own
// and delivers every record, and later channels to it go there directly.
func TestProducerWithoutExchangeIsReadAStreamPerChannel(t *testing.T) {
	prod, cons := newTM(t, "old-producer", nil, nil), newTM(t, "consumer", nil, nil)
	addr := legacyProducer(t, prod)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tk := &task{tdd: &pb.TaskDeploymentDescriptor{JobId: "j", AttemptId: "c1"}}
	for i := range 2 {
		p := partitionOn(prod, fmt.Sprint("r", i), fmt.Sprint("a", i))
		r, err := cons.openChannel(ctx, tk, channel(fmt.Sprint("r", i), 0, 0, fmt.Sprint("a", i), addr))
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
