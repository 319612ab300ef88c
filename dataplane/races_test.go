package dataplane

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// Interleavings of the data plane found by review, each once a lost wake-up, a deadlock or a
// failed fallback.

// countWaker counts its wake-ups.
type countWaker struct{ n atomic.Int32 }

func (w *countWaker) wake() { w.n.Add(1) }

func lonePartition(attempt string) *Partition {
	return newPartition(PartitionKey{job: "j", result: "r", index: 0, attempt: attempt}, produces("r", 0, 1, forward, pipelined))
}

// TestPollRacingReleaseNeverStrandsTheReader: a release concurrent with a poll either makes the
// poll fail (Aborted) or finds the reader armed and wakes it; never a reader armed and not
// woken (a channel that hangs), never an end of partition without the records.
func TestPollRacingReleaseNeverStrandsTheReader(t *testing.T) {
	dp := &Plane{parts: newRegistry()}
	for i := range 100000 {
		p := lonePartition("a")
		dp.parts.add(p)
		w := &countWaker{}
		r, _, err := dp.readerOf(p, readReq("r", "a"), w, nil)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); p.release("") }()
		runtime.Gosched()
		rs, eop, perr := r.poll(nil, 10)
		wg.Wait()
		if perr == nil && (eop || len(rs) > 0) {
			t.Fatalf("iteration %d: a released empty partition gave %d records, eop %v", i, len(rs), eop)
		}
		if perr == nil && w.n.Load() == 0 {
			t.Fatalf("iteration %d: the reader was armed after the release and never woken", i)
		}
	}
}

// TestReaderOfRacingReleaseIsWokenOrRefused: a reader made while its partition is released is
// refused, or woken by the release.
func TestReaderOfRacingReleaseIsWokenOrRefused(t *testing.T) {
	dp := &Plane{parts: newRegistry()}
	for i := range 100000 {
		p := lonePartition("a")
		w := &countWaker{}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); p.release("") }()
		_, ready, err := dp.readerOf(p, readReq("r", "a"), w, nil)
		wg.Wait()
		if err == nil && !ready && w.n.Load() == 0 {
			t.Fatalf("iteration %d: a reader of a released partition was armed and never woken", i)
		}
	}
}

// TestCloseWhileThePartitionArrivesDoesNotDeadlock: a consumer's close of a channel whose
// partition is being registered at that moment (the registry answering the wait) ends; it once
// deadlocked the stream's receiver and the producer.
func TestCloseWhileThePartitionArrivesDoesNotDeadlock(t *testing.T) {
	dp := &Plane{parts: newRegistry()}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 10000 {
			x := &exchangeServer{dp: dp, ctx: context.Background(), signal: make(chan struct{}, 1), chans: map[uint64]*serverChannel{}, limit: 1 << 20}
			if err := x.control(&pb.ChannelControl{Channel: 1, Open: readReq("r", "p"), Credit: 8}); err != nil {
				panic(err)
			}
			p := lonePartition("p")
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { defer wg.Done(); dp.parts.add(p) }()
			_ = x.control(&pb.ChannelControl{Channel: 1, Close: true})
			wg.Wait()
			dp.parts.remove(p.key)
		}
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		buf := make([]byte, 1<<20)
		t.Fatalf("deadlock:\n%s", buf[:runtime.Stack(buf, true)])
	}
}

// TestEveryChannelToAnOlderProducerFallsBack: a task with two channels to a producer without
// Exchange reads both the old way (the stream's break reaches both channels).
func TestEveryChannelToAnOlderProducerFallsBack(t *testing.T) {
	prod, cons := newNode(t, "old-producer", nil), newNode(t, "consumer", nil)
	addr := legacyProducer(t, prod)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var ics []*InputChannel
	for i := range 2 {
		p := partitionOn(prod, fmt.Sprint("r", i), fmt.Sprint("a", i))
		produce(p, 100)
		ics = append(ics, &InputChannel{desc: channel(fmt.Sprint("r", i), 0, 0, fmt.Sprint("a", i), addr)})
	}
	s := cons.NewChannelSet(ctx, "j", "c1", true)
	defer s.Close()
	s.Add(ics...)
	n := 0
	for s.live > 0 {
		select {
		case <-s.in.signal:
		case <-ctx.Done():
			t.Fatalf("%d channels still open, %d records read", s.live, n)
		}
		for _, ev := range s.in.take() {
			rs, _, err := s.Handle(ev)
			if err != nil {
				t.Fatalf("the task fails: %v", err)
			}
			n += len(rs)
		}
	}
	if n != 200 {
		t.Fatalf("read %d of 200 records", n)
	}
}

// TestOpenChannelOfAFinishedEmptyPartition: a channel whose answer and end arrive together
// opens (and is at its end).
func TestOpenChannelOfAFinishedEmptyPartition(t *testing.T) {
	prod, cons := newNode(t, "p", nil), newNode(t, "c", nil)
	p := partitionOn(prod, "r", "a1")
	p.Finish()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := openOn(ctx, cons, prod.DataAddr(), readReq("r", "a1"))
	if err != nil {
		t.Fatalf("open of a finished, empty partition: %v", err)
	}
	if n, err := drain(ctx, r); err != nil || n != 0 {
		t.Fatalf("drained %d records: %v", n, err)
	}
}
