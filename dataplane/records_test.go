package dataplane

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/operator"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// readAll reads r to its end and returns the records read.
func readAll(ctx context.Context, r channelReader) ([]operator.Record, error) {
	var out []operator.Record
	for {
		rs, eop, err := r.next(ctx)
		if err != nil {
			return out, err
		}
		out = append(out, rs...)
		if eop {
			return out, nil
		}
	}
}

// bytesRecords are records of every shape the wire tells apart: numeric, bytes, empty and nil
// keys and values (an empty one arrives empty, not as the number 0), an event time of 0 and
// none, a value of 300 KiB (a batch of its own), a barrier, watermarks and an idle marker.
func bytesRecords() []operator.Record {
	big := make([]byte, 300<<10)
	for i := range big {
		big[i] = byte(i)
	}
	return []operator.Record{
		operator.NumericRecord(-7, 42, 1, 0),
		{Key: []byte("user-1"), Value: []byte(`{"n":1}`), Time: 1_700_000_000_123, Origin: 1, Seq: 1},
		{Key: []byte{}, Value: []byte("no key"), Time: 0, Origin: 1, Seq: 2},
		{Key: operator.Int64Bytes(0), Value: []byte{}, Time: operator.NoTimestamp, Origin: 1, Seq: 3},
		{Watermark: true, Time: 1_700_000_000_000},
		{Barrier: 5, Time: operator.NoTimestamp},
		{Key: []byte("user-2"), Value: big, Time: -5, Origin: 2, Seq: 4},
		{Watermark: true, Time: -1},
		{Watermark: true, Idle: true, Time: operator.NoTimestamp},
		{Key: []byte("k"), Value: []byte("v"), Time: operator.NoTimestamp, Origin: 2, Seq: 5},
	}
}

// equalRecords compares records as the wire carries them: a nil key or value is an empty one.
func equalRecords(a, b []operator.Record) bool {
	if len(a) != len(b) {
		return false
	}
	norm := func(r operator.Record) operator.Record {
		if r.Key == nil {
			r.Key = []byte{}
		}
		if r.Value == nil {
			r.Value = []byte{}
		}
		if r.Control() {
			r.Key, r.Value = []byte{}, []byte{}
			if r.Barrier != 0 {
				r.Time = operator.NoTimestamp
			}
		}
		return r
	}
	for i := range a {
		if !reflect.DeepEqual(norm(a[i]), norm(b[i])) {
			return false
		}
	}
	return true
}

// TestBytesRecordsAndWatermarksCrossATaskManagerPair: records of bytes keys and values with
// their event time, barriers and watermarks go from a producer TM to a consumer TM over the
// Exchange stream, and over a ReadPartition stream, in order and whole.
func TestBytesRecordsAndWatermarksCrossATaskManagerPair(t *testing.T) {
	prod, cons := newNode(t, "producer", nil), newNode(t, "consumer", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	want := bytesRecords()
	send := func(p *Partition) {
		go func() {
			for _, r := range want {
				var err error
				switch {
				case r.Idle:
					err = p.BroadcastIdle(ctx)
				case r.Watermark:
					err = p.BroadcastWatermark(ctx, r.Time)
				case r.Barrier != 0:
					err = p.Broadcast(ctx, r.Barrier)
				default:
					err = p.Add(ctx, r)
				}
				if err != nil {
					t.Errorf("add: %v", err)
					return
				}
			}
			p.Finish()
		}()
	}
	p := partitionOn(prod, "bytes", "a1")
	r, err := openOn(ctx, cons, prod.DataAddr(), readReq("bytes", "a1"))
	if err != nil {
		t.Fatal(err)
	}
	send(p)
	got, err := readAll(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if !equalRecords(got, want) {
		t.Fatalf("over Exchange:\n got %+v\nwant %+v", short(got), short(want))
	}

	p2 := partitionOn(prod, "bytes2", "a2")
	req := readReq("bytes2", "a2")
	req.RecordFormat = RecordFormat
	stream, err := pb.NewDataServiceClient(dialT(t, cons, prod)).ReadPartition(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	send(p2)
	got = nil
	for {
		b, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fromPB(b.GetRecords())...)
		if b.GetEndOfPartition() {
			break
		}
	}
	if !equalRecords(got, want) {
		t.Fatalf("over ReadPartition:\n got %+v\nwant %+v", short(got), short(want))
	}
}

// short shows records without their long values.
func short(rs []operator.Record) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		v := operator.FormatKey(r.Value)
		if len(v) > 20 {
			v = v[:20] + "..."
		}
		out[i] = strings.Join([]string{operator.FormatKey(r.Key), v}, "=")
		if r.Watermark {
			out[i] = "watermark"
		}
		if r.Idle {
			out[i] = "idle"
		}
		if r.Barrier != 0 {
			out[i] = "barrier"
		}
	}
	return out
}

func dialT(t *testing.T, from, to *node) *grpc.ClientConn {
	t.Helper()
	c, err := from.dial(to.DataAddr())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestOlderConsumerGetsNumericRecordsOrARefusal: a consumer of the int64 record format (a
// ReadPartition or Exchange of a TaskManager before bytes records: no record_format) reads
// numeric records as the int64 fields it knows; a record it would read wrong (a key or value
// that is not 8 bytes, an event time, a watermark, an idle marker) fails its channel with FAILED_PRECONDITION
// naming the format and what it would lose, never reaches it.
func TestOlderConsumerGetsNumericRecordsOrARefusal(t *testing.T) {
	prod, cons := newNode(t, "producer", nil), newNode(t, "consumer", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, c := range []struct {
		name  string
		last  operator.Record
		watch string
	}{
		{"bytes value", operator.Record{Key: operator.Int64Bytes(1), Value: []byte("abc"), Time: operator.NoTimestamp, Origin: 0, Seq: 2}, "a value of 3 bytes"},
		{"event time", operator.Record{Key: operator.Int64Bytes(1), Value: operator.Int64Bytes(2), Time: 10, Seq: 2}, "event time"},
		{"watermark", operator.Record{Watermark: true, Time: 10}, "watermark"},
		{"idle", operator.Record{Watermark: true, Idle: true, Time: operator.NoTimestamp}, "idle marker"},
	} {
		result := "older" + string(rune('a'+i))
		p := partitionOn(prod, result, "a")
		stream, err := pb.NewDataServiceClient(dialT(t, cons, prod)).ReadPartition(ctx, readReq(result, "a"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
		go func() {
			_ = p.Add(ctx, operator.NumericRecord(3, -4, 0, 0))
			_ = p.Broadcast(ctx, 1)
			_ = p.Add(ctx, operator.NumericRecord(5, 6, 0, 1))
			_ = p.addTo(ctx, 0, c.last)
		}()
		var got []*pb.Record
		for err == nil {
			var b *pb.RecordBatch
			if b, err = stream.Recv(); err == nil {
				got = append(got, b.GetRecords()...)
			}
		}
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "int64 format") || !strings.Contains(err.Error(), c.watch) {
			t.Fatalf("%s: %v, want FAILED_PRECONDITION naming the int64 format and %q", c.name, err, c.watch)
		}
		// What did arrive came whole, in the int64 fields: an older build reads it.
		for _, r := range got {
			if r.KeyBytes != nil || r.ValueBytes != nil || r.HasTime || r.Watermark || r.Idle {
				t.Fatalf("%s: an older consumer was sent %v", c.name, r)
			}
		}
		if len(got) > 0 && (got[0].GetKey() != 3 || got[0].GetValue() != -4) {
			t.Fatalf("%s: first record %v, want key 3 value -4", c.name, got[0])
		}
	}
	// On an Exchange stream whose consumer says no format: its channel fails, the stream stays.
	p := partitionOn(prod, "olderx", "a")
	x, err := pb.NewDataServiceClient(dialT(t, cons, prod)).Exchange(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Send(&pb.ExchangeRequest{Controls: []*pb.ChannelControl{{Channel: 1, Open: readReq("olderx", "a"), Credit: channelCredit}}}); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.Add(ctx, operator.Record{Key: []byte("user"), Value: operator.Int64Bytes(1), Time: operator.NoTimestamp})
	}()
	for {
		msg, err := x.Recv()
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range msg.GetBatches() {
			if len(b.GetBatch().GetRecords()) > 0 {
				t.Fatalf("an older consumer was sent %v", b.GetBatch().GetRecords())
			}
			if b.GetCode() != 0 {
				if codes.Code(b.GetCode()) != codes.FailedPrecondition || !strings.Contains(b.GetError(), "key of 4 bytes") {
					t.Fatalf("refusal %d %q", b.GetCode(), b.GetError())
				}
				return
			}
		}
	}
}

// TestSubpartitionBoundsBytes: a PIPELINED subpartition takes records until its keys and
// values reach capacity x bufferedRecordBytes (then the producer waits), a poll takes at most
// batchBytes of them, and an empty subpartition takes one record larger than either.
func TestSubpartitionBoundsBytes(t *testing.T) {
	p := newPartition(PartitionKey{job: "j", result: "r", attempt: "a"}, produces("r", 0, 1, forward, pipelined))
	sp := p.subs[0]
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	value := make([]byte, 100<<10)
	added := 0
	for ; added < 100; added++ {
		if err := p.Add(cancelled, operator.Record{Key: []byte("k"), Value: value}); err != nil {
			if !errors.Is(err, context.Canceled) {
				t.Fatal(err)
			}
			break
		}
	}
	budget := int(sp.capacity) * bufferedRecordBytes
	if want := budget/(len(value)+1) + 1; added != want {
		t.Fatalf("took %d records of %d bytes before it was full, want %d (a budget of %d bytes)", added, len(value)+1, want, budget)
	}
	sp.mu.Lock()
	rs, _ := sp.take(nil, batchRecords)
	sp.mu.Unlock()
	if n := len(rs) * (len(value) + 1); len(rs) != batchBytes/(len(value)+1) || n > batchBytes {
		t.Fatalf("a poll took %d records (%d bytes), want at most %d bytes", len(rs), n, batchBytes)
	}
	if err := p.Add(cancelled, operator.Record{Value: value}); err != nil {
		t.Fatalf("a poll made no room: %v", err)
	}

	q := newPartition(PartitionKey{job: "j", result: "q", attempt: "a"}, produces("q", 0, 1, forward, pipelined))
	huge := make([]byte, 2*budget)
	if err := q.Add(cancelled, operator.Record{Value: huge}); err != nil {
		t.Fatalf("an empty subpartition refused a record over its byte budget: %v", err)
	}
	q.subs[0].mu.Lock()
	rs, _ = q.subs[0].take(nil, batchRecords)
	q.subs[0].mu.Unlock()
	if len(rs) != 1 {
		t.Fatalf("a poll of one record larger than a batch took %d", len(rs))
	}
}
