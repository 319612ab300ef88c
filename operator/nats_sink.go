package operator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jmcluster/jmcluster/transport/pb"
)

func init() {
	register("nats_sink", runtime{sink: func(op *pb.Operator, info Info, _ string) Sink { return newNatsSink(op.GetNatsSink(), info) }})
}

// The nats_sink's bounds and timings.
const (
	// defaultNatsPendingAcks is the publishes awaiting an ack when max_pending_acks is 0.
	defaultNatsPendingAcks = 256
	// natsSafeDuplicateWindow is the stream's duplicate window (the server's default) below
	// which the sink warns at Open: a restore may take longer than a shorter one.
	natsSafeDuplicateWindow = 2 * time.Minute
	// natsEndSegment names the records after the last barrier of a job whose input ended.
	natsEndSegment = "end"
)

// natsSink publishes each record as a message of a JetStream stream (docs/connectors.md). In a
// checkpointed job exactly once (the two-phase commit below); otherwise at least once, each
// record as it comes.
//
// The two-phase commit: the records between two barriers are one segment, named by the
// checkpoint whose barrier ends it, kept in memory (and in the checkpoint's state) until a
// checkpoint at or after it completes; then its records are published, each with the message
// id <job>/<vertex>/<subtask>/<checkpoint>/<n> (n its index in the segment). The stream drops a
// message whose id it stored within its duplicate window, so publishing a segment again (a
// retry after a lost ack, a restored task's republish at Open) stores nothing twice.
// Publishing runs on a goroutine of the sink's own (CommitCheckpoint only hands it the
// checkpoint), so a server that is away delays the commit without holding up the TaskManager
// that announced it.
type natsSink struct {
	cfg          *pb.NatsSink
	info         Info
	log          hclog.Logger
	maxPending   int
	checkpointed bool
	restoredID   uint64
	restored     []natsSegment // the segments of the restored checkpoint, published at Open

	nc  *nats.Conn
	js  jetstream.JetStream
	ctx context.Context // the task's, cancelled by Close
	end context.CancelFunc
	win natsWindow // the publishes awaiting their acks; pubMu's (a checkpointed job) or the task's

	pending natsSegment // the records since the last barrier (the task's goroutine)
	sent    int64       // records published without checkpoints (their message ids)

	pubMu sync.Mutex    // one publisher at a time: the commit goroutine, Open or Finish
	wake  chan struct{} // a checkpoint announced to the commit goroutine
	done  chan struct{} // closed when the commit goroutine returned (nil: none)

	mu        sync.Mutex // the fields below
	staged    []natsSegment
	commitTo  uint64 // the newest completed checkpoint announced
	committed uint64
	failed    error // a commit that failed: the task fails at its next call
	closed    bool
}

// natsRecord is a record as the sink publishes it.
type natsRecord struct {
	Key   []byte `json:"k,omitempty"`
	Value []byte `json:"v"`
}

// natsSegment is the records between two barriers, ending at checkpoint ID's.
type natsSegment struct {
	ID      uint64       `json:"id"`
	Records []natsRecord `json:"records"`
}

// natsSinkState is the state a checkpoint keeps of a nats_sink.
type natsSinkState struct {
	Segments []natsSegment `json:"segments"`
}

func newNatsSink(cfg *pb.NatsSink, info Info) *natsSink {
	n := int(cfg.GetMaxPendingAcks())
	if n <= 0 {
		n = defaultNatsPendingAcks
	}
	log := info.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &natsSink{cfg: cfg, info: info, log: log, maxPending: n, checkpointed: info.Checkpointed,
		restoredID: info.RestoredCheckpoint, wake: make(chan struct{}, 1)}
}

// Open connects, checks that the stream exists and takes the subject, and, restored from a
// checkpoint, publishes that checkpoint's segments again (its completion may not have
// reached the attempt that staged them).
func (s *natsSink) Open(ctx context.Context) error {
	nc, err := natsConnect(s.info, s.cfg.GetUrl(), s.cfg.GetCredential(), "nats_sink")
	if err != nil {
		return err
	}
	s.nc = nc
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(2*s.maxPending), jetstream.WithPublishAsyncTimeout(natsAckTimeout))
	if err != nil {
		return fmt.Errorf("nats_sink: %w", err)
	}
	s.js, s.win = js, natsWindow{s: s}
	if err := s.checkStream(ctx); err != nil {
		return err
	}
	s.ctx, s.end = context.WithCancel(ctx)
	if !s.checkpointed {
		return nil
	}
	if len(s.restored) > 0 {
		s.mu.Lock()
		s.staged, s.restored = s.restored, nil
		s.commitTo = max(s.commitTo, s.restoredID)
		s.mu.Unlock()
		if err := s.commitStaged(s.ctx); err != nil {
			return err
		}
	}
	s.done = make(chan struct{})
	go s.run()
	return nil
}

// checkStream asks the server for the stream (a missing one fails with its answer) and
// refuses a subject none of its subjects takes: the server would not store the messages.
func (s *natsSink) checkStream(ctx context.Context) error {
	st, err := s.js.Stream(ctx, s.cfg.GetStream())
	if err != nil {
		return fmt.Errorf("nats_sink: stream %q: %w", s.cfg.GetStream(), err)
	}
	c := st.CachedInfo().Config
	if !slices.ContainsFunc(c.Subjects, func(f string) bool { return subjectsOverlap(s.cfg.GetSubject(), f) }) {
		return fmt.Errorf("nats_sink: subject %q is not one stream %q takes (its subjects %q)", s.cfg.GetSubject(), s.cfg.GetStream(), c.Subjects)
	}
	if s.checkpointed {
		log := s.log.Info
		if c.Duplicates < natsSafeDuplicateWindow {
			log = s.log.Warn
		}
		log("nats_sink: the stream drops a message id it stored within its duplicate window; a checkpoint's segment published again after it (a restore slower than it) is stored twice",
			"stream", s.cfg.GetStream(), "duplicate_window", c.Duplicates, "warned_below", natsSafeDuplicateWindow)
	}
	return nil
}

// Write publishes r (no checkpoints) or keeps it in the segment of the next barrier.
func (s *natsSink) Write(r Record) error {
	if err := s.failure(); err != nil {
		return err
	}
	if s.cfg.GetKeyHeader() != "" && !natsHeaderCarries(r.Key) {
		return fmt.Errorf("nats_sink: record (origin %d, seq %d): its key holds a carriage return or newline, or begins or ends with a space or tab, which header %q cannot carry as is",
			r.Origin, r.Seq, s.cfg.GetKeyHeader())
	}
	rec := natsRecord{Key: slices.Clone(r.Key), Value: slices.Clone(r.Value)}
	if s.checkpointed {
		s.pending.Records = append(s.pending.Records, rec)
		return nil
	}
	m := s.message(s.info.AttemptID, s.sent, rec)
	s.sent++
	return s.win.add(s.ctx, m)
}

// message is the message of rec, the n-th of segment seg.
func (s *natsSink) message(seg string, n int64, rec natsRecord) *nats.Msg {
	m := nats.NewMsg(s.cfg.GetSubject())
	m.Data = rec.Value
	m.Header.Set(jetstream.MsgIDHeader, s.info.Job+"/"+s.info.Vertex+"/"+strconv.Itoa(int(s.info.Subtask))+"/"+seg+"/"+strconv.FormatInt(n, 10))
	if h := s.cfg.GetKeyHeader(); h != "" && len(rec.Key) > 0 {
		m.Header.Set(h, string(rec.Key))
	}
	return m
}

// natsHeaderCarries reports whether a header's value carries v byte for byte: the client
// replaces a carriage return or newline with a space and trims spaces and tabs at the ends.
func natsHeaderCarries(v []byte) bool {
	if bytes.ContainsAny(v, "\r\n") {
		return false
	}
	n := len(v)
	return n == 0 || (v[0] != ' ' && v[0] != '\t' && v[n-1] != ' ' && v[n-1] != '\t')
}

// failure is the error of a commit that failed, if any.
func (s *natsSink) failure() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed
}

// SnapshotState is every segment not published yet plus the records since the last barrier
// (the segment this barrier ends; PrepareCommit stages it with its id).
func (s *natsSink) SnapshotState() ([]byte, error) {
	if !s.checkpointed {
		return nil, nil
	}
	s.mu.Lock()
	st := natsSinkState{Segments: slices.Clone(s.staged)}
	s.mu.Unlock()
	st.Segments = append(st.Segments, natsSegment{ID: 0, Records: s.pending.Records}) // id set by PrepareCommit
	return json.Marshal(st)
}

// RestoreState takes the segments of the restored checkpoint, published again at Open.
func (s *natsSink) RestoreState(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	var st natsSinkState
	if err := json.Unmarshal(b, &st); err != nil {
		return err
	}
	for i := range st.Segments {
		if st.Segments[i].ID == 0 {
			st.Segments[i].ID = s.restoredID // the segment the restored checkpoint's barrier ended
		}
	}
	s.restored = st.Segments
	return nil
}

// PrepareCommit stages the records since the last barrier as checkpoint id's segment.
func (s *natsSink) PrepareCommit(id uint64) error {
	if !s.checkpointed {
		return nil
	}
	if err := s.failure(); err != nil {
		return err
	}
	seg := natsSegment{ID: id, Records: s.pending.Records}
	s.pending.Records = nil
	s.mu.Lock()
	s.staged = append(s.staged, seg)
	s.mu.Unlock()
	return nil
}

// CommitCheckpoint hands checkpoint id to the commit goroutine, which publishes every staged
// segment up to it; Committed says when it did. It returns the error of an earlier commit
// that failed (the task fails, and its region publishes again from the checkpoint).
func (s *natsSink) CommitCheckpoint(id uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed != nil {
		return s.failed
	}
	if s.closed {
		return fmt.Errorf("nats_sink: commit of checkpoint %d: %w", id, ErrSinkClosed)
	}
	s.commitTo = max(s.commitTo, id)
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return nil
}

// Committed is the newest checkpoint whose segment the stream acknowledged (0: none).
func (s *natsSink) Committed() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.committed
}

// run is the commit goroutine: it publishes the staged segments of each announced checkpoint
// until the sink closes or a commit fails.
func (s *natsSink) run() {
	defer close(s.done)
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.wake:
		}
		if err := s.commitStaged(s.ctx); err != nil {
			s.mu.Lock()
			if s.failed == nil && s.ctx.Err() == nil {
				s.failed = err
				s.log.Error("nats_sink: commit failed; the task fails at its next record or barrier", "error", err)
			}
			s.mu.Unlock()
			return
		}
	}
}

// commitStaged publishes every staged segment up to commitTo, oldest first, and waits for the
// stream's acks.
func (s *natsSink) commitStaged(ctx context.Context) error {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	for {
		s.mu.Lock()
		if len(s.staged) == 0 || s.staged[0].ID > s.commitTo {
			s.mu.Unlock()
			return nil
		}
		seg := s.staged[0]
		s.mu.Unlock()
		if err := s.publishSegment(ctx, strconv.FormatUint(seg.ID, 10), seg.Records); err != nil {
			return fmt.Errorf("nats_sink: stream %q: publish checkpoint %d's %d records: %w", s.cfg.GetStream(), seg.ID, len(seg.Records), err)
		}
		s.mu.Lock()
		if len(s.staged) > 0 && s.staged[0].ID == seg.ID {
			s.staged = s.staged[1:]
		}
		s.committed = max(s.committed, seg.ID)
		s.mu.Unlock()
	}
}

// publishSegment publishes records as segment name and waits until the stream acknowledged
// each.
func (s *natsSink) publishSegment(ctx context.Context, name string, records []natsRecord) error {
	for i, r := range records {
		if err := s.win.add(ctx, s.message(name, int64(i), r)); err != nil {
			return err
		}
	}
	return s.win.drain(ctx)
}

// Finish publishes what is left: without checkpoints it waits for every ack; with them, every
// staged segment and the records after the last barrier (segment "end") are published as they
// are, since every input ended and nothing is replayed any more.
func (s *natsSink) Finish() error {
	if err := s.failure(); err != nil {
		return err
	}
	if !s.checkpointed {
		if err := s.win.drain(s.ctx); err != nil {
			return fmt.Errorf("nats_sink: stream %q: %w", s.cfg.GetStream(), err)
		}
		return nil
	}
	s.mu.Lock()
	s.commitTo = ^uint64(0)
	s.mu.Unlock()
	if err := s.commitStaged(s.ctx); err != nil {
		return err
	}
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	if err := s.publishSegment(s.ctx, natsEndSegment, s.pending.Records); err != nil {
		return fmt.Errorf("nats_sink: stream %q: publish the %d records after the last checkpoint: %w", s.cfg.GetStream(), len(s.pending.Records), err)
	}
	s.pending.Records = nil
	return nil
}

// Close stops the commit goroutine and closes the connection; a commit announced after it
// fails with ErrSinkClosed (the restored attempt publishes the checkpoint again).
func (s *natsSink) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	if s.end != nil {
		s.end()
	}
	if s.done != nil {
		<-s.done
	}
	if s.nc != nil {
		s.nc.Close()
	}
	return nil
}
