package taskmanager

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// Interleavings of the data plane found by review, each once a lost wake-up, a deadlock or a
// failed fallback.

// countWaker counts its wake-ups.
type countWaker struct{ n atomic.Int32 }

func (w *countWaker) wake() { w.n.Add(1) }

func lonePartition(attempt string) *resultPartition {
	return newResultPartition(partitionKey{job: "j", result: "r", index: 0, attempt: attempt}, produces("r", 0, 1, forward, pipelined))
}

// TestPollRacingReleaseNeverStrandsTheReader: a release concurrent with a poll either makes the
// poll fail (Aborted) or finds the reader armed and wakes it; never a reader armed and not
// woken (a channel that hangs), never an end of partition without the records.
func TestPollRacingReleaseNeverStrandsTheReader(t *testing.T) {
	tm := &TaskManager{parts: newPartitionRegistry()}
	for i := range 100000 {
		p := lonePartition("a")
		tm.parts.add(p)
		w := &countWaker{}
		r, _, err := tm.readerOf(p, readReq("r", "a"), w, nil)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); p.release() }()
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
	tm := &TaskManager{parts: newPartitionRegistry()}
	for i := range 100000 {
		p := lonePartition("a")
		w := &countWaker{}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); p.release() }()
		_, ready, err := tm.readerOf(p, readReq("r", "a"), w, nil)
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
	tm := &TaskManager{parts: newPartitionRegistry()}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 10000 {
			x := &exchangeServer{tm: tm, ctx: context.Background(), signal: make(chan struct{}, 1), chans: map[uint64]*serverChannel{}, limit: 1 << 20}
			if err := x.control(&pb.ChannelControl{Channel: 1, Open: readReq("r", "p"), Credit: 8}); err != nil {
				panic(err)
			}
			p := lonePartition("p")
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { defer wg.Done(); tm.parts.add(p) }()
			_ = x.control(&pb.ChannelControl{Channel: 1, Close: true})
			wg.Wait()
			tm.parts.remove(p.key)
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
	prod, cons := newTM(t, "old-producer", nil, nil), newTM(t, "consumer", nil, nil)
	addr := legacyProducer(t, prod)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var ics []*inputChannel
	for i := range 2 {
		p := partitionOn(prod, fmt.Sprint("r", i), fmt.Sprint("a", i))
		produce(p, 100)
		ics = append(ics, &inputChannel{desc: channel(fmt.Sprint("r", i), 0, 0, fmt.Sprint("a", i), addr)})
	}
	s := cons.newChannelSet(ctx, "j", "c1", true)
	defer s.close()
	s.add(ics...)
	n := 0
	for s.live > 0 {
		select {
		case <-s.in.signal:
		case <-ctx.Done():
			t.Fatalf("%d channels still open, %d records read", s.live, n)
		}
		for _, ev := range s.in.take() {
			rs, _, err := s.handle(ev)
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
	prod, cons := newTM(t, "p", nil, nil), newTM(t, "c", nil, nil)
	p := partitionOn(prod, "r", "a1")
	p.finish()
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

// TestSharedListsCannotExpandPastTheLimit: a small request whose gates all refer to one large
// shared list is refused whole, naming the limit, before anything is built.
func TestSharedListsCannotExpandPastTheLimit(t *testing.T) {
	jm := startJM(t)
	tm := newTM(t, "tm1", jm, nil)
	c := client(t, tm)
	list := &pb.SharedChannels{}
	for i := range 4096 {
		list.Channels = append(list.Channels, channel("r", int32(i), 0, "p", "127.0.0.1:1"))
	}
	var tasks []*pb.TaskDeploymentDescriptor
	for i := range maxSubmitChannels/4096 + 1 {
		tasks = append(tasks, deploy("job", "sink", int32(i), 1000, fmt.Sprint("s", i), 0, checksumOp("s.json"),
			[]*pb.InputGateDeploymentDescriptor{{ResultId: "r", SharedChannels: 1}}))
	}
	_, err := c.SubmitTasks(t.Context(), &pb.SubmitTasksRequest{Epoch: 1, Tasks: tasks, SharedChannels: []*pb.SharedChannels{list}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "over the limit of 1048576 per request (maxSubmitChannels)") {
		t.Fatalf("a request naming %d channels: %v", (maxSubmitChannels/4096+1)*4096, err)
	}
	if n := len(tm.Tasks()); n != 0 {
		t.Fatalf("%d tasks deployed", n)
	}
}
