package operator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jmcluster/jmcluster/transport/pb"
)

func init() {
	register("nats_source", runtime{source: func(op *pb.Operator, info Info) Source { return newNatsSource(op.GetNatsSource(), info) }})
}

// defaultNatsBuffered is the messages a nats_source holds ahead of its task when
// max_buffered_messages is 0.
const defaultNatsBuffered = 256

// natsSource reads a JetStream stream through an ordered consumer (docs/connectors.md): split
// i of P keeps the messages whose stream sequence s has (s-1) % P == i, and its position
// (Split.Next) is the stream sequence after the last message it emitted, so a restored split
// starts its consumer there (OptStartSeq) and no consumer state is kept by the server.
type natsSource struct {
	cfg      *pb.NatsSource
	info     Info
	parts    int64 // the splits of the vertex (its parallelism)
	buffered int
}

func newNatsSource(cfg *pb.NatsSource, info Info) *natsSource {
	b := int(cfg.GetMaxBufferedMessages())
	if b <= 0 {
		b = defaultNatsBuffered
	}
	return &natsSource{cfg: cfg, info: info, buffered: b, parts: 1}
}

// Splits is one split per subtask, without end or ending after stop_at_sequence.
func (s *natsSource) Splits(parallelism int32) []Split {
	s.parts = int64(max(parallelism, 1))
	out := make([]Split, s.parts)
	for i := range out {
		out[i] = Split{ID: int32(i)}
		if stop := s.cfg.GetStopAtSequence(); stop > 0 {
			out[i].End = stop + 1
		}
	}
	return out
}

// ended reports whether every split read up to stop_at_sequence (a restored task whose
// checkpoint saw the end).
func (s *natsSource) ended(splits []Split) bool {
	stop := s.cfg.GetStopAtSequence()
	if stop == 0 {
		return false
	}
	for _, sp := range splits {
		if sp.Next <= stop {
			return false
		}
	}
	return true
}

// Read connects, checks the stream and reads it from the lowest position of splits, emitting
// each message to the split its stream sequence belongs to, until the task ends. A missing
// stream, a refused consumer or a lost consumer fails the task with the server's answer.
func (s *natsSource) Read(sc *SourceContext, splits []Split) error {
	switch {
	case len(splits) == 0 && s.cfg.GetStopAtSequence() == 0:
		return sc.Wait(-1)
	case len(splits) == 0 || s.ended(splits):
		return nil
	}

	ctx := sc.Context()
	nc, err := natsConnect(s.info, s.cfg.GetUrl(), s.cfg.GetCredential(), "nats_source")
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("nats_source: %w", err)
	}
	if err := s.checkStream(ctx, js); err != nil {
		return err
	}
	cons, err := js.OrderedConsumer(ctx, s.cfg.GetStream(), s.consumerConfig(splits))
	if err != nil {
		return fmt.Errorf("nats_source: stream %q, subject %q: %w", s.cfg.GetStream(), s.cfg.GetSubject(), err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(s.buffered))
	if err != nil {
		return fmt.Errorf("nats_source: read stream %q, subject %q: %w", s.cfg.GetStream(), s.cfg.GetSubject(), err)
	}
	f := newNatsFeed(it, s.buffered)
	defer f.stop()
	return s.emitAll(sc, splits, f)
}

// checkStream asks the server for the stream (a missing one fails with its answer) and
// refuses a filter that matches none of the stream's subjects: the server would accept the
// consumer, and the source would wait for messages that never come.
func (s *natsSource) checkStream(ctx context.Context, js jetstream.JetStream) error {
	st, err := js.Stream(ctx, s.cfg.GetStream())
	if err != nil {
		return fmt.Errorf("nats_source: stream %q: %w", s.cfg.GetStream(), err)
	}
	sub := s.cfg.GetSubject()
	if sub == "" {
		return nil
	}
	subjects := st.CachedInfo().Config.Subjects
	for _, ss := range subjects {
		if subjectsOverlap(sub, ss) {
			return nil
		}
	}
	return fmt.Errorf("nats_source: subject %q matches none of stream %q's subjects %q", sub, s.cfg.GetStream(), subjects)
}

// subjectsOverlap reports whether a subject could match both filters a and b.
func subjectsOverlap(a, b string) bool {
	at, bt := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; ; i++ {
		switch {
		case i == len(at) || i == len(bt):
			return len(at) == len(bt)
		case at[i] == ">" || bt[i] == ">":
			return true
		case at[i] != "*" && bt[i] != "*" && at[i] != bt[i]:
			return false
		}
	}
}

// consumerConfig starts the ordered consumer at the lowest position of splits (a split that
// emitted nothing starts at the stream's first message).
func (s *natsSource) consumerConfig(splits []Split) jetstream.OrderedConsumerConfig {
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
	if sub := s.cfg.GetSubject(); sub != "" {
		cfg.FilterSubjects = []string{sub}
	}
	from := splits[0].Next
	for _, sp := range splits[1:] {
		from = min(from, sp.Next)
	}
	if from > 1 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, uint64(from)
	}
	return cfg
}

// emitAll emits the messages of f that belong to splits, each once from its split's position.
func (s *natsSource) emitAll(sc *SourceContext, splits []Split, f *natsFeed) error {
	index := make(map[int64]int, len(splits)) // split ID -> index in splits
	for i, sp := range splits {
		index[int64(sp.ID)] = i
	}
	for {
		m, err := f.next(sc)
		if err != nil {
			return err
		}
		md, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("nats_source: stream %q: a message without JetStream metadata: %w", s.cfg.GetStream(), err)
		}
		seq := int64(md.Sequence.Stream)
		if stop := s.cfg.GetStopAtSequence(); stop > 0 && seq > stop {
			return nil // the stream is read up to its end: every message of the filter before seq came
		}
		i, mine := index[(seq-1)%s.parts]
		if mine && seq >= splits[i].Next {
			r := Record{Key: s.key(m), Value: m.Data(), Time: md.Timestamp.UnixMilli(), Origin: splits[i].ID, Seq: (seq - 1) / s.parts}
			if err := sc.Emit(i, seq, r); err != nil {
				return err
			}
			splits[i].Next = seq + 1
		}
		if seq == s.cfg.GetStopAtSequence() {
			return nil
		}
	}
}

// key is the record's key of m, as nats_source.key says.
func (s *natsSource) key(m jetstream.Msg) []byte {
	switch s.cfg.GetKey() {
	case pb.NatsKey_NATS_KEY_SUBJECT:
		return []byte(m.Subject())
	case pb.NatsKey_NATS_KEY_HEADER:
		if v := m.Headers().Get(s.cfg.GetKeyHeader()); v != "" {
			return []byte(v)
		}
	}
	return nil
}

// natsFeed moves the messages of a consumer's iterator to the task's goroutine through a
// channel of at most buffered messages: the task waits on it (SourceContext.WaitReady), so its
// watermarks and checkpoint barriers go on while no message comes.
type natsFeed struct {
	it    jetstream.MessagesContext
	msgs  chan jetstream.Msg
	ready chan struct{}
	err   error // set before msgs is closed
	wg    sync.WaitGroup
}

func newNatsFeed(it jetstream.MessagesContext, buffered int) *natsFeed {
	f := &natsFeed{it: it, msgs: make(chan jetstream.Msg, buffered), ready: make(chan struct{}, 1)}
	f.wg.Add(1)
	go f.run()
	return f
}

func (f *natsFeed) run() {
	defer f.wg.Done()
	defer f.signal() // after msgs is closed: next sees the end
	defer close(f.msgs)
	for {
		m, err := f.it.Next()
		if err != nil {
			if !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				f.err = err
			}
			return
		}
		f.msgs <- m // the task's stop drains msgs
		f.signal()
	}
}

func (f *natsFeed) signal() {
	select {
	case f.ready <- struct{}{}:
	default:
	}
}

// next returns the next message, waiting for it on sc.
func (f *natsFeed) next(sc *SourceContext) (jetstream.Msg, error) {
	for {
		select {
		case m, ok := <-f.msgs:
			if !ok {
				if f.err != nil {
					return nil, fmt.Errorf("nats_source: %w", f.err)
				}
				return nil, fmt.Errorf("nats_source: the consumer stopped: %w", context.Canceled)
			}
			return m, nil
		default:
		}
		if err := sc.WaitReady(f.ready); err != nil {
			return nil, err
		}
	}
}

// stop stops the iterator and waits for the feed's goroutine.
func (f *natsFeed) stop() {
	f.it.Stop()
	go func() {
		for range f.msgs { //nolint:revive // drained so that run's send returns
		}
	}()
	f.wg.Wait()
}
