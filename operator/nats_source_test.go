package operator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jmcluster/jmcluster/testkit/natstest"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// runNats runs subtask sub of par of a nats_source from restored until it emitted want
// records; with snapshot, it snapshots at the barrier in front of record want+1 and returns
// that state. It fails the test when the records do not come within 30s.
func runNats(t *testing.T, op *pb.Operator, sub, par int32, restored []byte, want int, snapshot bool) ([]Record, []byte) {
	t.Helper()
	out, state, err := runNatsErr(op, sub, par, restored, want, snapshot)
	if err != nil {
		t.Fatalf("subtask %d of %d: %v after %d records", sub, par, err, len(out))
	}
	return out, state
}

var errNatsStop = errors.New("stop")

func runNatsErr(op *pb.Operator, sub, par int32, restored []byte, want int, snapshot bool) ([]Record, []byte, error) {
	src, err := NewSource(op, Info{Subtask: sub, Parallelism: par, Restored: restored})
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []Record
	var state []byte
	err = src.Run(ctx, func(r Record) error {
		if len(out) == want {
			if snapshot {
				var serr error
				if state, serr = src.(Stateful).SnapshotState(); serr != nil {
					return serr
				}
			}
			return errNatsStop
		}
		out = append(out, r)
		if len(out) == want && !snapshot {
			return errNatsStop
		}
		return nil
	})
	if errors.Is(err, errNatsStop) {
		err = nil
	}
	return out, state, err
}

func natsOp(url, stream, subject string) *pb.Operator {
	return &pb.Operator{Kind: &pb.Operator_NatsSource{NatsSource: &pb.NatsSource{Url: url, Stream: stream, Subject: subject}}}
}

// TestNatsSourceSplitsTheStreamBySequence: each subtask of 3 emits exactly the messages whose
// stream sequence s has (s-1) % 3 == its index, in order, as records of origin the subtask
// and seq (s-1)/3, keyed by subject or header as asked.
func TestNatsSourceSplitsTheStreamBySequence(t *testing.T) {
	s := natstest.Start(t)
	s.CreateStream(t, "ORDERS", "orders.>")
	const n, par = 30, 3
	for i := range n {
		s.Publish(t, fmt.Sprintf("orders.%d", i%4), []byte(fmt.Sprintf(`{"i":%d}`, i)), nats.Header{"Tenant": []string{fmt.Sprintf("t%d", i%5)}})
	}
	s.Publish(t, "orders.x", []byte(`{"i":-1}`), nil) // not a message of the filter orders.*.*
	op := natsOp(s.URL, "ORDERS", "orders.*")
	for sub := range int32(par) {
		op.GetNatsSource().Key, op.GetNatsSource().KeyHeader = pb.NatsKey_NATS_KEY_SUBJECT, ""
		if sub == 1 {
			op.GetNatsSource().Key, op.GetNatsSource().KeyHeader = pb.NatsKey_NATS_KEY_HEADER, "Tenant"
		}
		out, _ := runNats(t, op, sub, par, nil, n/par, false)
		for k, r := range out {
			i := int(sub) + k*par // the message published i-th has stream sequence i+1
			wantKey := fmt.Sprintf("orders.%d", i%4)
			if sub == 1 {
				wantKey = fmt.Sprintf("t%d", i%5)
			}
			if string(r.Value) != fmt.Sprintf(`{"i":%d}`, i) || string(r.Key) != wantKey || r.Origin != sub || r.Seq != int64(k) || r.Time <= 0 {
				t.Fatalf("subtask %d record %d: key %q value %s origin %d seq %d time %d; want message %d, key %q", sub, k, r.Key, r.Value, r.Origin, r.Seq, r.Time, i, wantKey)
			}
		}
	}
}

// TestNatsSourceRestoresAfterTheLastEmittedMessage: a source restored from the state of a
// barrier in front of its 11th record emits that record next, and nothing before it.
func TestNatsSourceRestoresAfterTheLastEmittedMessage(t *testing.T) {
	s := natstest.Start(t)
	s.CreateStream(t, "EVENTS", "events")
	for i := range 40 {
		s.Publish(t, "events", []byte(fmt.Sprint(i)), nil)
	}
	op := natsOp(s.URL, "EVENTS", "")
	for _, par := range []int32{1, 2} {
		first, state := runNats(t, op, par-1, par, nil, 10, true)
		rest, _ := runNats(t, op, par-1, par, state, 10, false)
		all := append(first, rest...)
		for k, r := range all {
			if want := fmt.Sprint(int(par-1) + k*int(par)); string(r.Value) != want || r.Seq != int64(k) {
				t.Fatalf("parallelism %d, record %d (restored from %s after 10): value %s seq %d, want %s", par, k, state, r.Value, r.Seq, want)
			}
		}
	}
}

// TestNatsSourceEventTimeIsTheMessagesTimestamp: with event_time and no time_path, a record's
// time is the time the server stored its message; with a time_path, the JSON field's.
func TestNatsSourceEventTimeIsTheMessagesTimestamp(t *testing.T) {
	s := natstest.Start(t)
	s.CreateStream(t, "T", "t")
	before := time.Now().Add(-time.Second).UnixMilli()
	s.Publish(t, "t", []byte(`{"ts":1700000000123}`), nil)
	after := time.Now().Add(time.Second).UnixMilli()
	op := natsOp(s.URL, "T", "t")
	op.EventTime = &pb.EventTime{}
	out, _ := runNats(t, op, 0, 1, nil, 1, false)
	if len(out) != 1 || out[0].Time < before || out[0].Time > after {
		t.Fatalf("records %+v: want one with time in [%d, %d]", out, before, after)
	}
	op.EventTime = &pb.EventTime{TimePath: "ts"}
	if out, _ = runNats(t, op, 0, 1, nil, 1, false); out[0].Time != 1700000000123 {
		t.Fatalf("time_path ts: time %d", out[0].Time)
	}
}

// TestNatsSourceFailsWithTheServersAnswer: a missing stream, a filter the stream refuses and
// an unreachable server fail the task with an error naming them and the server's answer.
func TestNatsSourceFailsWithTheServersAnswer(t *testing.T) {
	s := natstest.Start(t)
	s.CreateStream(t, "ORDERS", "orders.>")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "FULL", Subjects: []string{"full"}, MaxConsumers: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.JS.CreateConsumer(ctx, "FULL", jetstream.ConsumerConfig{Durable: "other"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		op   *pb.Operator
		want []string
	}{
		{"missing stream", natsOp(s.URL, "NOPE", ""), []string{`stream "NOPE"`, "stream not found"}},
		{"filter outside the stream", natsOp(s.URL, "ORDERS", "payments.*"), []string{`subject "payments.*" matches none of stream "ORDERS"'s subjects ["orders.>"]`}},
		{"refused consumer", natsOp(s.URL, "FULL", ""), []string{`stream "FULL"`, "maximum consumers limit reached"}},
		{"unreachable", natsOp("nats://127.0.0.1:1", "ORDERS", ""), []string{"connect to nats://127.0.0.1:1"}},
	} {
		_, _, err := runNatsErr(c.op, 0, 1, nil, 1, false)
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Fatalf("%s: error %v, want it to hold %q", c.name, err, w)
			}
		}
	}
}

// TestNatsSourceGoesOnAcrossAServerRestart: the server restarts (same port, same store) while
// a source reads; the source does not fail, and emits the messages published after the
// restart after those before it, each once.
func TestNatsSourceGoesOnAcrossAServerRestart(t *testing.T) {
	s := natstest.Start(t)
	s.CreateStream(t, "R", "r")
	for i := range 10 {
		s.Publish(t, "r", []byte(fmt.Sprint(i)), nil)
	}
	src, err := NewSource(natsOp(s.URL, "R", ""), Info{Parallelism: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	got := make(chan Record, 100)
	done := make(chan error, 1)
	go func() {
		done <- src.Run(ctx, func(r Record) error {
			got <- r
			if len(got) == cap(got) || r.Seq == 19 {
				return errNatsStop
			}
			return nil
		})
	}()
	var out []string
	ended := false // the source stopped at record 19; what it emitted is all in got
	take := func(n int) {
		for len(out) < n {
			if ended {
				select {
				case r := <-got:
					out = append(out, string(r.Value))
					continue
				default:
					t.Fatalf("the source stopped after %v, want %d records", out, n)
				}
			}
			select {
			case r := <-got:
				out = append(out, string(r.Value))
			case err := <-done: // select picks either when both are ready: got may hold more
				if !errors.Is(err, errNatsStop) {
					t.Fatalf("the source ended with %v after %v", err, out)
				}
				ended = true
			case <-ctx.Done():
				t.Fatalf("waiting for record %d: %v after %v", len(out), ctx.Err(), out)
			}
		}
	}
	take(10)
	s.Restart(t)
	for i := 10; i < 20; i++ {
		s.Publish(t, "r", []byte(fmt.Sprint(i)), nil)
	}
	take(20)
	if !ended {
		if err := <-done; !errors.Is(err, errNatsStop) {
			t.Fatalf("the source ended with %v, want the test's stop", err)
		}
	}
	for i, v := range out {
		if v != fmt.Sprint(i) {
			t.Fatalf("record %d is %s: %v", i, v, out)
		}
	}
}

// BenchmarkNatsSource reads b.N messages of 100 bytes from a real server in the test's
// process, at parallelism 1 and as subtask 0 of 4 (which reads every message and keeps a
// quarter): ns/op is per message of the stream.
func BenchmarkNatsSource(b *testing.B) {
	for _, par := range []int32{1, 4} {
		b.Run(fmt.Sprintf("parallelism-%d", par), func(b *testing.B) {
			s := natstest.Start(b)
			s.CreateStream(b, "B", "b")
			data := []byte(strings.Repeat("x", 100))
			for i := 0; i < b.N; i++ {
				if _, err := s.JS.PublishAsync("b", data); err != nil {
					b.Fatal(err)
				}
			}
			select {
			case <-s.JS.PublishAsyncComplete():
			case <-time.After(60 * time.Second):
				b.Fatal("publishing: no acknowledgement of every message after 60s")
			}
			want := (b.N + int(par) - 1) / int(par)
			b.ResetTimer()
			out, _, err := runNatsErr(natsOp(s.URL, "B", ""), 0, par, nil, want, false)
			if err != nil || len(out) != want {
				b.Fatalf("%d of %d records: %v", len(out), want, err)
			}
		})
	}
}
