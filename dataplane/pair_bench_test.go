package dataplane

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/operator"
	"github.com/jmcluster/jmcluster/testkit/benchgoal"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// The data plane's throughput between two TaskManagers of one process (real gRPC over
// loopback): records/s through 1, 64, 4096 and 65,536 channels multiplexed on the pair's
// Exchange stream, against one plain gRPC stream (ReadPartition) and a Go channel in the same
// run. `make bench` runs BenchmarkTMPair; `make bench-short` TestGoalChannels.

// pairTMs are a producer and a consumer data plane, quiet, for measurements.
func pairTMs(tb testing.TB) (prod, cons *node) {
	return quietNode(tb, "producer"), quietNode(tb, "consumer")
}

var pairRun atomic.Int64

// muxThroughput sends records through parts x subs channels from prod to cons (parts PIPELINED
// partitions of subs subpartitions, each written by its own producer goroutine and each channel
// read by its own reader) and returns records/s, from the producers' start to the last
// channel's end of partition. Channels are opened before the clock starts.
func muxThroughput(tb testing.TB, prod, cons *node, parts, subs, records int) float64 {
	return muxThroughputOf(tb, prod, cons, parts, subs, records, 0)
}

// benchRecords are a producer's records, made before the clock starts (a source's cost is not
// the data plane's): numeric ones (8-byte key and value, as every record was before bytes)
// when valueSize is 0, else records of an 11-byte key ("user-NNNNNN"), a value of valueSize
// bytes and an event time.
func benchRecords(origin, valueSize int) []operator.Record {
	rs := make([]operator.Record, 1024)
	for i := range rs {
		if valueSize == 0 {
			rs[i] = operator.NumericRecord(int64(i), 1, int32(origin), 0)
			continue
		}
		v := make([]byte, valueSize)
		for j := range v {
			v[j] = byte('a' + (i+j)%26)
		}
		rs[i] = operator.Record{Key: fmt.Appendf(nil, "user-%06d", i), Value: v, Time: 1_700_000_000_000 + int64(i), Origin: int32(origin)}
	}
	return rs
}

// muxThroughputOf is muxThroughput of records of valueSize-byte values (benchRecords).
func muxThroughputOf(tb testing.TB, prod, cons *node, parts, subs, records, valueSize int) float64 {
	run := pairRun.Add(1)
	dist := allToAll
	if subs == 1 {
		dist = forward
	}
	ps := make([]*Partition, parts)
	for i := range ps {
		ps[i] = newPartition(PartitionKey{job: "bench", result: fmt.Sprintf("r%d-%d", run, i), attempt: fmt.Sprintf("a%d-%d", run, i)},
			produces("r", 0, int32(subs), dist, pipelined))
		prod.parts.add(ps[i])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// As in an ALL_TO_ALL job: consumer subtask s reads subpartition s of every partition, all
	// in its own loop (a task's ChannelSet).
	sets := make([]*ChannelSet, subs)
	for sub := range subs {
		set := cons.NewChannelSet(ctx, "bench", fmt.Sprintf("c%d-%d", run, sub), false)
		for _, p := range ps {
			set.Add(&InputChannel{desc: &pb.InputChannelDescriptor{ResultId: p.key.result, SubpartitionIndex: int32(sub),
				ProducerAttemptId: p.key.attempt, ProducerDataAddress: prod.DataAddr()}, sub: int32(sub)})
		}
		sets[sub] = set
	}
	// Every channel open before the clock starts.
	for _, set := range sets {
		for open := 0; open < len(set.chans); {
			select {
			case <-set.in.signal:
			case <-ctx.Done():
				tb.Fatal("channels not open")
			}
			for _, ev := range set.in.take() {
				if _, _, err := set.Handle(ev); err != nil {
					tb.Fatalf("open: %v", err)
				}
				if ev.kind == evOpened {
					open++
				}
			}
		}
	}
	var got atomic.Int64
	var done sync.WaitGroup
	for _, set := range sets {
		done.Add(1)
		go func() {
			defer done.Done()
			defer set.Close()
			n := 0
			defer func() { got.Add(int64(n)) }()
			for set.live > 0 {
				select {
				case <-set.in.signal:
				case <-ctx.Done():
					tb.Errorf("%d channels still open", set.live)
					return
				}
				for _, ev := range set.in.take() {
					rs, _, err := set.Handle(ev)
					if err != nil {
						tb.Errorf("channel: %v", err)
						return
					}
					n += len(rs)
				}
			}
		}()
	}
	per := records / parts
	recs := make([][]operator.Record, parts)
	for i := range recs {
		recs[i] = benchRecords(i, valueSize)
	}
	start := time.Now()
	for i, p := range ps {
		go func() {
			rs := recs[i]
			for k := range per {
				r := rs[k&1023]
				r.Seq = int64(k)
				if err := p.Add(ctx, r); err != nil {
					return
				}
			}
			p.Finish()
		}()
	}
	done.Wait()
	elapsed := time.Since(start)
	if int(got.Load()) != per*parts {
		tb.Fatalf("%d channels delivered %d of %d records", parts*subs, got.Load(), per*parts)
	}
	return float64(per*parts) / elapsed.Seconds()
}

// grpcStreamThroughput sends records through one ReadPartition stream (a stream of its own,
// as every channel was before the Exchange stream).
func grpcStreamThroughput(tb testing.TB, prod, cons *node, records int) float64 {
	run := pairRun.Add(1)
	p := newPartition(PartitionKey{job: "bench", result: fmt.Sprintf("g%d", run), attempt: fmt.Sprintf("g%d", run)}, produces("r", 0, 1, forward, pipelined))
	prod.parts.add(p)
	conn, err := cons.dial(prod.DataAddr())
	if err != nil {
		tb.Fatal(err)
	}
	stream, err := pb.NewDataServiceClient(conn).ReadPartition(context.Background(),
		&pb.ReadPartitionRequest{JobId: "bench", ResultId: p.key.result, ProducerAttemptId: p.key.attempt, ConsumerAttemptId: "c"})
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		tb.Fatal(err)
	}
	start := time.Now()
	go func() {
		for i := range records {
			if err := p.Add(context.Background(), operator.NumericRecord(int64(i), 1, 0, int64(i))); err != nil {
				return
			}
		}
		p.Finish()
	}()
	n := 0
	for {
		b, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			tb.Fatal(err)
		}
		n += len(b.GetRecords())
		if b.GetEndOfPartition() {
			break
		}
	}
	if n != records {
		tb.Fatalf("received %d of %d", n, records)
	}
	return float64(records) / time.Since(start).Seconds()
}

// goChannelThroughput is the floor: the same records through a buffered Go channel.
func goChannelThroughput(records int) float64 {
	ch := make(chan operator.Record, pipelinedBuffer)
	start := time.Now()
	go func() {
		for i := range records {
			ch <- operator.NumericRecord(int64(i), 1, 0, int64(i))
		}
		close(ch)
	}()
	for range ch {
	}
	return float64(records) / time.Since(start).Seconds()
}

// channelShapes: channels as partitions x subpartitions (a wide job's shape: a partition per
// producer subtask, a subpartition per consumer).
var channelShapes = []struct{ parts, subs int }{{1, 1}, {8, 8}, {64, 64}, {256, 256}}

func BenchmarkTMPair(b *testing.B) {
	prod, cons := pairTMs(b)
	report := func(b *testing.B, rate float64) {
		b.ReportMetric(rate, "records/s")
	}
	b.Run("go-channel", func(b *testing.B) { report(b, goChannelThroughput(max(b.N, 1000))) })
	b.Run("grpc-stream", func(b *testing.B) { report(b, grpcStreamThroughput(b, prod, cons, max(b.N, 1000))) })
	for _, sh := range channelShapes {
		b.Run(fmt.Sprintf("channels-%d", sh.parts*sh.subs), func(b *testing.B) {
			report(b, muxThroughput(b, prod, cons, sh.parts, sh.subs, max(b.N, 4*sh.parts*sh.subs)))
		})
	}
}

// TestGoalChannels (JMC_GOALS=1, `make bench-short`): records/s through one TM pair for 1, 64,
// 4096 and 65,536 channels of one Exchange stream, one plain gRPC stream and a Go channel, in
// the same run (each twice, the better kept). Goal: 4096 channels carry at least half of what
// one carries alone.
func TestGoalChannels(t *testing.T) {
	benchgoal.Skip(t)
	const records = 2_000_000
	prod, cons := pairTMs(t)
	best := func(f func() float64) float64 {
		a := f()
		return max(a, f())
	}
	goCh := best(func() float64 { return goChannelThroughput(records) })
	grpcS := best(func() float64 { return grpcStreamThroughput(t, prod, cons, records) })
	t.Logf("%-22s %6.2f M records/s (1x)", "Go channel", goCh/1e6)
	t.Logf("%-22s %6.2f M records/s (%.2fx the Go channel)", "one gRPC stream", grpcS/1e6, grpcS/goCh)
	rates := map[int]float64{}
	for _, sh := range channelShapes {
		n := sh.parts * sh.subs
		rates[n] = best(func() float64 { return muxThroughput(t, prod, cons, sh.parts, sh.subs, records) })
		t.Logf("%-22s %6.2f M records/s (%.2fx the Go channel, %.2fx one gRPC stream)", fmt.Sprintf("%d channels, 1 stream", n), rates[n]/1e6, rates[n]/goCh, rates[n]/grpcS)
	}
	ratio := rates[4096] / rates[1]
	benchgoal.Report(t, "channels-4096-vs-1", ratio, 0.5, ratio >= 0.5, "x")
}

// BenchmarkPipelinedExchange measures records/s through one TM-to-TM gRPC stream: a producer
// writes b.N records into a PIPELINED partition of one TM; a ReadPartition stream of the same
// TM reads them over loopback (BenchmarkTMPair has the two-TM figures).
func BenchmarkPipelinedExchange(b *testing.B) {
	prod, _ := pairTMs(b)
	b.ReportMetric(grpcStreamThroughput(b, prod, prod, max(b.N, 1000)), "records/s")
}

// BenchmarkLocalChannel is the baseline: the same records through a buffered Go channel.
func BenchmarkLocalChannel(b *testing.B) {
	b.ReportMetric(goChannelThroughput(max(b.N, 1000)), "records/s")
}
