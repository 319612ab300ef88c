package operator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jmcluster/jmcluster/testkit/natstest"
	"github.com/jmcluster/jmcluster/transport/pb"
)

func natsSinkOp(url, stream, subject string) *pb.Operator {
	return &pb.Operator{Kind: &pb.Operator_NatsSink{NatsSink: &pb.NatsSink{Url: url, Stream: stream, Subject: subject, KeyHeader: "Key"}}}
}

// natsSinkTask is a nats_sink as its task runs it.
type natsSinkTask struct {
	Operator
	c Committer
}

// openNatsSink builds and opens the sink of op for info (restored from info.Restored).
func openNatsSink(t testing.TB, op *pb.Operator, info Info) natsSinkTask {
	t.Helper()
	o, err := openNatsSinkErr(t, op, info)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func openNatsSinkErr(t testing.TB, op *pb.Operator, info Info) (natsSinkTask, error) {
	o, err := New(op, info)
	if err != nil {
		return natsSinkTask{}, err
	}
	t.Cleanup(func() { _ = o.Close() })
	c, _ := o.(Committer)
	return natsSinkTask{o, c}, o.Open(context.Background())
}

// write writes the records from..to-1: key k<i>, value v<i>.
func (o natsSinkTask) write(t testing.TB, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		if err := o.Process(Record{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i)}, nil); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
}

// barrier snapshots the sink's state at checkpoint id's barrier and stages its segment.
func (o natsSinkTask) barrier(t testing.TB, id uint64) []byte {
	t.Helper()
	st, err := o.SnapshotState()
	if err != nil {
		t.Fatal(err)
	}
	if err := o.c.PrepareCommit(id); err != nil {
		t.Fatal(err)
	}
	return st
}

// commit announces checkpoint id and waits until the sink published it.
func (o natsSinkTask) commit(t testing.TB, id uint64, within time.Duration) {
	t.Helper()
	if err := o.c.CommitCheckpoint(id); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(within)
	for o.c.Committed() < id {
		if time.Now().After(deadline) {
			t.Fatalf("checkpoint %d not committed after %v (committed: %d)", id, within, o.c.Committed())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkStream fails t unless stream holds exactly the records 0..n-1 (value v<i>, key header
// k<i>), in order, each once, with distinct message ids.
func checkStream(t testing.TB, s *natstest.Server, stream string, n int) {
	t.Helper()
	checkStreamOrder(t, s, stream, n, true)
}

// checkStreamOrder is checkStream, with the records in any order unless ordered.
func checkStreamOrder(t testing.TB, s *natstest.Server, stream string, n int, ordered bool) {
	t.Helper()
	msgs := s.Messages(t, stream)
	ids, values := map[string]bool{}, map[string]bool{}
	for i, m := range msgs {
		id := m.Header.Get(jetstream.MsgIDHeader)
		if ids[id] || id == "" || values[string(m.Data)] {
			t.Fatalf("message %d (%s): message id %q or value twice, or the id empty; values %s", i, m.Data, id, valueRuns(msgs))
		}
		ids[id], values[string(m.Data)] = true, true
		var k int
		if _, err := fmt.Sscanf(string(m.Data), "v%d", &k); err != nil || k < 0 || k >= n || (ordered && k != i) || m.Header.Get("Key") != fmt.Sprintf("k%d", k) {
			t.Fatalf("message %d: value %s key %q id %q, want v<k>, k<k> for a k < %d (in order: %v); values %s", i, m.Data, m.Header.Get("Key"), id, n, ordered, valueRuns(msgs))
		}
	}
	if len(msgs) != n {
		t.Fatalf("stream %s holds %d messages, want %d; values %s", stream, len(msgs), n, valueRuns(msgs))
	}
}

// valueRuns describes the values v<k> of msgs as runs of consecutive k ("0-99 150-199 100-149").
func valueRuns(msgs []*jetstream.RawStreamMsg) string {
	var runs []string
	start, prev := -1, -2
	for _, m := range msgs {
		var k int
		if _, err := fmt.Sscanf(string(m.Data), "v%d", &k); err != nil {
			k = -1
		}
		if k != prev+1 {
			if start >= 0 {
				runs = append(runs, fmt.Sprintf("%d-%d", start, prev))
			}
			start = k
		}
		prev = k
	}
	return strings.Join(append(runs, fmt.Sprintf("%d-%d", start, prev)), " ")
}

// TestNatsSinkRepublishesARestoredCheckpointExactlyOnce: a checkpointed sink publishes a
// segment only once its checkpoint completes; a task restored from a checkpoint whose segments
// were partly published publishes them again under the same message ids, and the stream
// holds every record once, in order; a second restore from the same checkpoint adds nothing.
func TestNatsSinkRepublishesARestoredCheckpointExactlyOnce(t *testing.T) {
	s := natstest.Start(t)
	s.CreateStream(t, "OUT", "out.>")
	op := natsSinkOp(s.URL, "OUT", "out.a")
	info := Info{Job: "j", Vertex: "sink", Subtask: 0, Parallelism: 1, Checkpointed: true}

	a := openNatsSink(t, op, info)
	a.write(t, 0, 10)
	a.barrier(t, 1)
	a.write(t, 10, 15)
	st2 := a.barrier(t, 2) // holds segment 1 (not yet published) and segment 2
	a.write(t, 15, 17)     // after the barrier: lost with the attempt, replayed by the source
	if n := len(s.Messages(t, "OUT")); n != 0 {
		t.Fatalf("%d messages before any checkpoint completed", n)
	}
	a.commit(t, 1, 30*time.Second)
	checkStream(t, s, "OUT", 10)
	_ = a.Close() // the attempt fails before checkpoint 2's completion reaches it

	for attempt := range 2 {
		info.Restored, info.RestoredCheckpoint = st2, 2
		b := openNatsSink(t, op, info) // publishes segments 1 and 2 again
		if b.c.Committed() != 2 {
			t.Fatalf("attempt %d: committed %d after Open, want 2", attempt, b.c.Committed())
		}
		checkStream(t, s, "OUT", 15)
		if attempt == 1 {
			b.write(t, 15, 20)
			if err := b.Finish(nil); err != nil {
				t.Fatal(err)
			}
		}
		_ = b.Close()
	}
	checkStream(t, s, "OUT", 20)
	if id := s.Messages(t, "OUT")[19].Header.Get(jetstream.MsgIDHeader); id != "j/sink/0/end/4" {
		t.Fatalf("the last record's message id is %q, want j/sink/0/end/4", id)
	}
}

// TestNatsSinkWithoutCheckpointsPublishesAsRecordsCome: without checkpoints, records are
// published as they come, at most max_pending_acks awaiting their acks, and Finish waits for
// the rest.
func TestNatsSinkWithoutCheckpointsPublishesAsRecordsCome(t *testing.T) {
	s := natstest.Start(t)
	s.CreateStream(t, "OUT", "out")
	op := natsSinkOp(s.URL, "OUT", "out")
	op.GetNatsSink().MaxPendingAcks = 8
	o := openNatsSink(t, op, Info{Job: "j", Vertex: "sink", AttemptID: "a1"})
	o.write(t, 0, 500)
	deadline := time.Now().Add(30 * time.Second)
	for n := len(s.Messages(t, "OUT")); n < 500-8; n = len(s.Messages(t, "OUT")) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 500 records in the stream after 30s, with at most 8 awaiting acks", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := o.Finish(nil); err != nil {
		t.Fatal(err)
	}
	checkStream(t, s, "OUT", 500)
}

// TestNatsSinkFailsWithTheServersAnswer: a missing stream, a subject the stream does not take
// and credentials the server refuses fail Open, naming them and quoting the server; the
// error never holds the credential's content.
func TestNatsSinkFailsWithTheServersAnswer(t *testing.T) {
	const password = "s3cret-pass"
	s := natstest.StartWith(t, natstest.Auth{User: "app", Password: password})
	s.CreateStream(t, "OUT", "out.>", "audit")
	secrets := map[string]string{"good": "app:" + password + "\n", "bad": "app:wrong-" + password + "\n", "tok": "a-token-" + password}
	info := Info{Job: "j", Vertex: "sink", Secret: func(name string) ([]byte, error) {
		if v, ok := secrets[name]; ok {
			return []byte(v), nil
		}
		return nil, fmt.Errorf("credential %q: no such file", name)
	}}
	withCred := func(op *pb.Operator, cred string) *pb.Operator {
		op.GetNatsSink().Credential = cred
		return op
	}
	for _, c := range []struct {
		name string
		op   *pb.Operator
		want []string
	}{
		{"missing stream", withCred(natsSinkOp(s.URL, "NOPE", "out.a"), "good"), []string{`nats_sink: stream "NOPE"`, "stream not found"}},
		{"subject outside the stream", withCred(natsSinkOp(s.URL, "OUT", "payments.a"), "good"), []string{`subject "payments.a" is not one stream "OUT" takes (its subjects ["out.>" "audit"])`}},
		{"wrong password", withCred(natsSinkOp(s.URL, "OUT", "out.a"), "bad"), []string{"connect to " + s.URL, "Authorization Violation"}},
		{"a token the server does not know", withCred(natsSinkOp(s.URL, "OUT", "out.a"), "tok"), []string{"Authorization Violation"}},
		{"no credential", natsSinkOp(s.URL, "OUT", "out.a"), []string{"Authorization Violation"}},
		{"missing credential", withCred(natsSinkOp(s.URL, "OUT", "out.a"), "gone"), []string{`credential "gone": no such file`}},
		{"unreachable", natsSinkOp("nats://127.0.0.1:1", "OUT", "out.a"), []string{"connect to nats://127.0.0.1:1"}},
	} {
		_, err := openNatsSinkErr(t, c.op, info)
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Fatalf("%s: error %v, want it to hold %q", c.name, err, w)
			}
		}
		if strings.Contains(err.Error(), password) {
			t.Fatalf("%s: the error %q holds the credential's content", c.name, err)
		}
	}
	o := openNatsSink(t, withCred(natsSinkOp(s.URL, "OUT", "audit"), "good"), info)
	o.write(t, 0, 3)
	if err := o.Finish(nil); err != nil {
		t.Fatal(err)
	}
	checkStream(t, s, "OUT", 3)

	ts := natstest.StartWith(t, natstest.Auth{Token: "a-token-" + password})
	ts.CreateStream(t, "OUT", "out")
	secrets["tok"] = "a-token-" + password + "\nignored second line\n"
	if _, err := openNatsSinkErr(t, withCred(natsSinkOp(ts.URL, "OUT", "out"), "tok"), info); err != nil {
		t.Fatalf("a token credential: %v", err)
	}
}

// TestNatsSinkCommitsAcrossAServerRestart: the server restarts (same port and store) while a
// sink publishes a checkpoint's segment; the commit is delayed, not failed, and the stream
// holds every record once.
func TestNatsSinkCommitsAcrossAServerRestart(t *testing.T) {
	s := natstest.Start(t)
	s.CreateStream(t, "OUT", "out")
	o := openNatsSink(t, natsSinkOp(s.URL, "OUT", "out"), Info{Job: "j", Vertex: "sink", Checkpointed: true})
	const big = 5000
	o.write(t, 0, big)
	o.barrier(t, 1)
	if err := o.c.CommitCheckpoint(1); err != nil {
		t.Fatal(err)
	}
	s.Restart(t) // while segment 1 is published, most likely
	o.write(t, big, big+100)
	o.barrier(t, 2)
	s.Restart(t) // between two commits
	o.commit(t, 2, 90*time.Second)
	o.write(t, big+100, big+110)
	if err := o.Finish(nil); err != nil {
		t.Fatal(err)
	}
	// Messages the client had not yet written when the connection dropped go to the restarted
	// server before those lost with the old connection are sent again: each once, not in order.
	checkStreamOrder(t, s, "OUT", big+110, false)
}

// TestNatsSinkWarnsOfAShortDuplicateWindow: a checkpointed sink warns at Open when the
// stream's duplicate window is under natsSafeDuplicateWindow, and only logs it otherwise.
func TestNatsSinkWarnsOfAShortDuplicateWindow(t *testing.T) {
	s := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name, window := range map[string]time.Duration{"SHORT": 10 * time.Second, "LONG": natsSafeDuplicateWindow} {
		if _, err := s.JS.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{strings.ToLower(name)}, Duplicates: window}); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		log := hclog.New(&hclog.LoggerOptions{Output: &out, Level: hclog.Info})
		openNatsSink(t, natsSinkOp(s.URL, name, strings.ToLower(name)), Info{Job: "j", Vertex: "sink", Checkpointed: true, Logger: log})
		warned := strings.Contains(out.String(), "[WARN]") && strings.Contains(out.String(), "duplicate_window="+window.String())
		if warned != (name == "SHORT") {
			t.Fatalf("stream %s, duplicate window %v: the log %q (want a warning: %v)", name, window, out.String(), name == "SHORT")
		}
	}
}

// TestNatsSinkRefusesAKeyItsHeaderCannotCarry: with key_header, a record whose key the header
// would change (a newline, a space at an end) fails the write, naming the record; without
// key_header the key is not sent and nothing is refused.
func TestNatsSinkRefusesAKeyItsHeaderCannotCarry(t *testing.T) {
	s := natstest.Start(t)
	s.CreateStream(t, "OUT", "out")
	o := openNatsSink(t, natsSinkOp(s.URL, "OUT", "out"), Info{Job: "j", Vertex: "sink"})
	for _, key := range []string{"a\nb", " lead", "trail\t", "cr\r"} {
		err := o.Process(Record{Key: []byte(key), Value: []byte("v"), Origin: 1, Seq: 7}, nil)
		if err == nil || !strings.Contains(err.Error(), "record (origin 1, seq 7)") || !strings.Contains(err.Error(), `header "Key"`) {
			t.Fatalf("key %q: error %v, want one naming the record and the header", key, err)
		}
	}
	op := natsSinkOp(s.URL, "OUT", "out")
	op.GetNatsSink().KeyHeader = ""
	o = openNatsSink(t, op, Info{Job: "j", Vertex: "sink"})
	if err := o.Process(Record{Key: []byte("a\nb"), Value: []byte("v0")}, nil); err != nil {
		t.Fatal(err)
	}
	if err := o.Finish(nil); err != nil {
		t.Fatal(err)
	}
	if msgs := s.Messages(t, "OUT"); len(msgs) != 1 || string(msgs[0].Data) != "v0" || len(msgs[0].Header.Values("Key")) != 0 {
		t.Fatalf("without key_header: messages %v", msgs)
	}
}

// TestNatsRetryableErrors: what passes is sent again; what the stream refuses fails.
func TestNatsRetryableErrors(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{jetstream.ErrAsyncPublishTimeout, true},
		{fmt.Errorf("wrapped: %w", jetstream.ErrNoStreamResponse), true},
		{&jetstream.APIError{Code: 503, Description: "JetStream system temporarily unavailable"}, true},
		{&jetstream.APIError{Code: 400, Description: "message size exceeds maximum allowed"}, false},
		{errors.New("nats: maximum payload exceeded"), false},
	} {
		if got := natsRetryable(c.err); got != c.want {
			t.Fatalf("natsRetryable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// BenchmarkNatsSink publishes b.N records of 100 bytes through a checkpointed sink to a real
// server in the test's process, a checkpoint completing every 1000 records: ns/op is per
// record, from Write to the stream's ack. "client" is the NATS client alone publishing the same
// messages (a message id each, 256 awaiting acks), for comparison.
func BenchmarkNatsSink(b *testing.B) {
	const every = 1000
	data := []byte(strings.Repeat("x", 100))
	start := func(b *testing.B) *natstest.Server {
		s := natstest.Start(b)
		s.CreateStream(b, "B", "b")
		return s
	}
	count := func(b *testing.B, s *natstest.Server) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		st, err := s.JS.Stream(ctx, "B")
		if err != nil {
			b.Fatal(err)
		}
		if n := st.CachedInfo().State.Msgs; n != uint64(b.N) {
			b.Fatalf("the stream holds %d messages, want %d", n, b.N)
		}
	}
	b.Run("sink", func(b *testing.B) {
		s := start(b)
		o := openNatsSink(b, natsSinkOp(s.URL, "B", "b"), Info{Job: "j", Vertex: "sink", Checkpointed: true})
		r := Record{Key: []byte("key"), Value: data}
		b.ResetTimer()
		var id uint64
		for i := 1; i <= b.N; i++ {
			if err := o.Process(r, nil); err != nil {
				b.Fatal(err)
			}
			if i%every == 0 {
				id++
				o.barrier(b, id)
				if err := o.c.CommitCheckpoint(id); err != nil {
					b.Fatal(err)
				}
			}
		}
		if err := o.Finish(nil); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		count(b, s)
	})
	b.Run("client", func(b *testing.B) {
		s := start(b)
		js, err := jetstream.New(s.NC, jetstream.WithPublishAsyncMaxPending(defaultNatsPendingAcks))
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for i := range b.N {
			if _, err := js.PublishAsync("b", data, jetstream.WithMsgID(fmt.Sprintf("j/sink/0/%d/%d", i/every, i%every))); err != nil {
				b.Fatal(err)
			}
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(60 * time.Second):
			b.Fatal("no acknowledgement of every message after 60s")
		}
		b.StopTimer()
		count(b, s)
	})
}
