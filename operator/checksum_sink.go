package operator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/jmcluster/jmcluster/internal/failpoint"
	"github.com/jmcluster/jmcluster/transport/pb"
)

func init() {
	register("checksum_sink", runtime{
		sink:  func(op *pb.Operator, info Info, p string) Sink { return newChecksumSink(op.GetChecksumSink(), p, info) },
		files: func(p string) []string { return []string{p, p + checksumTmpSuffix} },
	})
}

// checksumTmpSuffix names the temporary file a checksum sink writes before it renames it.
const checksumTmpSuffix = ".tmp"

// defaultChecksumFlush is the flush interval when flush_interval_ms is 0.
const defaultChecksumFlush = 200 * time.Millisecond

// Checksum is the JSON document a checksum sink writes.
type Checksum struct {
	Job       string `json:"job"`
	Vertex    string `json:"vertex"`
	Subtask   int32  `json:"subtask"`
	AttemptID string `json:"attempt_id"`
	// Attempts lists every attempt that wrote into this file, oldest first (a restarted sink
	// continues the file it finds, so restarts show up as duplicates).
	Attempts []string              `json:"attempts,omitempty"`
	Count    int64                 `json:"count"`
	Sum      int64                 `json:"sum"`
	Keys     map[string]KeyStat    `json:"keys"`
	Origins  map[string]OriginStat `json:"origins"`
	Finished bool                  `json:"finished"`
	// CommittedCheckpoint is set in a checkpointed job: the file is written only when a
	// checkpoint completed, and holds what the sink had at that checkpoint's barrier (two-phase
	// commit; docs/checkpoints.md). CommittedUnixMs is when this TaskManager wrote it, on its wall
	// clock (failpoint.Now, which the fault clock-offset steps).
	CommittedCheckpoint uint64 `json:"committed_checkpoint,omitempty"`
	CommittedUnixMs     int64  `json:"committed_unix_ms,omitempty"`
}

// KeyStat is the count and sum of the values seen for one key.
type KeyStat struct {
	Count int64 `json:"count"`
	Sum   int64 `json:"sum"`
}

// OriginStat tracks the sequence numbers seen from one source subtask: a seq above last+1 is a
// gap, a seq at or below last is a duplicate.
type OriginStat struct {
	Count      int64 `json:"count"`
	FirstSeq   int64 `json:"first_seq"`
	LastSeq    int64 `json:"last_seq"`
	Gaps       int64 `json:"gaps"`
	Duplicates int64 `json:"duplicates"`
}

// ReadChecksum reads a checksum sink's file.
func ReadChecksum(path string) (Checksum, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Checksum{}, err
	}
	return parseChecksum(path, b)
}

func parseChecksum(path string, b []byte) (Checksum, error) {
	var c Checksum
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("checksum %s: %w", path, err)
	}
	return c, nil
}

// add accounts one record of numeric value (8 bytes, big endian). Keys are their number when
// numeric, else their quoted string.
func (c *Checksum) add(r Record) error {
	v, err := numericValue("checksum_sink", &r)
	if err != nil {
		return err
	}
	c.Count++
	c.Sum += v
	k := FormatKey(r.Key)
	ks := c.Keys[k]
	ks.Count++
	ks.Sum += v
	c.Keys[k] = ks
	o := strconv.FormatInt(int64(r.Origin), 10)
	st, seen := c.Origins[o]
	switch {
	case !seen:
		st.FirstSeq, st.LastSeq = r.Seq, r.Seq
	case r.Seq <= st.LastSeq:
		st.Duplicates++
	default:
		if r.Seq > st.LastSeq+1 {
			st.Gaps++
		}
		st.LastSeq = r.Seq
	}
	st.Count++
	c.Origins[o] = st
	return nil
}

// clone copies the document so it can be written outside the lock.
func (c *Checksum) clone() Checksum {
	d := *c
	d.Attempts = append([]string(nil), c.Attempts...)
	d.Keys = make(map[string]KeyStat, len(c.Keys))
	for k, v := range c.Keys {
		d.Keys[k] = v
	}
	d.Origins = make(map[string]OriginStat, len(c.Origins))
	for k, v := range c.Origins {
		d.Origins[k] = v
	}
	return d
}

// checksumSink keeps a Checksum and writes it atomically (temp file + rename) every flush
// interval and at the end, inside the work directory through an os.Root.
type checksumSink struct {
	path     string // relative to the work directory, checked by SinkPath
	interval time.Duration
	info     Info
	root     *os.Root // open from Open to Close

	restored *Checksum // the checkpointed document to continue (RestoreState), or nil
	// ahead: a newer state of this subtask than the restored one (Info.RestoredAhead): no
	// commit until a staged document covers it, so the committed output never goes back.
	ahead *Checksum

	// two-phase commit (checkpointed jobs): the documents staged at barriers, oldest first, and
	// the newest checkpoint committed (guarded by commitMu, which orders commits)
	commitMu  sync.Mutex
	staged    []stagedChecksum
	committed uint64
	closed    bool // Close ran (the root is gone)

	mu      sync.Mutex
	sum     Checksum
	dirty   bool
	stop    chan struct{}
	stopped chan struct{}
}

func newChecksumSink(cfg *pb.ChecksumSink, path string, info Info) *checksumSink {
	iv := time.Duration(cfg.GetFlushIntervalMs()) * time.Millisecond
	if iv <= 0 {
		iv = defaultChecksumFlush
	}
	return &checksumSink{path: path, interval: iv, info: info}
}

// Open continues the file of an earlier attempt of the same subtask when there is one.
func (s *checksumSink) Open(context.Context) error {
	root, err := os.OpenRoot(s.info.workDir())
	if err != nil {
		return fmt.Errorf("checksum sink: work dir: %w", err)
	}
	if err := mkdirParent(root, s.path); err != nil {
		_ = root.Close()
		return fmt.Errorf("checksum sink: %w", err)
	}
	s.root = root
	var prev Checksum
	b, err := root.ReadFile(s.path)
	if err == nil {
		prev, err = parseChecksum(s.path, b)
	}
	if s.restored != nil {
		// Restored from a checkpoint: its document, with the attempts the file names since.
		doc := *s.restored
		if err == nil && len(prev.Attempts) > len(doc.Attempts) {
			doc.Attempts = prev.Attempts
		}
		s.sum = doc
	} else if err == nil && !s.info.Checkpointed && prev.Job == s.info.Job && prev.Vertex == s.info.Vertex && prev.Subtask == s.info.Subtask {
		s.sum = prev
	} else {
		s.sum = Checksum{Job: s.info.Job, Vertex: s.info.Vertex, Subtask: s.info.Subtask}
	}
	if s.sum.Keys == nil {
		s.sum.Keys = map[string]KeyStat{}
	}
	if s.sum.Origins == nil {
		s.sum.Origins = map[string]OriginStat{}
	}
	s.sum.AttemptID = s.info.AttemptID
	s.sum.Attempts = append(s.sum.Attempts, s.info.AttemptID)
	s.sum.Finished = false
	s.dirty = true
	if s.info.Checkpointed {
		// Only committed documents are written. Restored from a completed checkpoint: commit
		// it again (the announcement may have been lost with a TM or a leader).
		if s.restored != nil {
			s.staged = []stagedChecksum{{id: s.info.RestoredCheckpoint, doc: s.sum.clone()}}
			return s.CommitCheckpoint(s.info.RestoredCheckpoint)
		}
		return nil
	}
	if err := s.flush(); err != nil {
		return err
	}
	s.stop, s.stopped = make(chan struct{}), make(chan struct{})
	go s.flusher()
	return nil
}

func (s *checksumSink) flusher() {
	defer close(s.stopped)
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			_ = s.flush()
		}
	}
}

func (s *checksumSink) Write(r Record) error {
	s.mu.Lock()
	err := s.sum.add(r)
	s.dirty = true
	s.mu.Unlock()
	return err
}

func (s *checksumSink) Finish() error {
	s.halt()
	s.mu.Lock()
	s.sum.Finished = true
	s.dirty = true
	s.mu.Unlock()
	if s.info.Checkpointed {
		// Every input ended: nothing is replayed any more, so the end is committed as it is.
		return s.commitDoc(s.lastID(), s.snapshotDoc())
	}
	return s.flush()
}

func (s *checksumSink) Close() error {
	s.halt()
	var err error
	if !s.info.Checkpointed { // a checkpointed sink's uncommitted output is not written
		err = s.flush()
	}
	// A commit may run on the leader's announcement at this moment: the root goes under
	// commitMu, and a commit after it fails (ErrSinkClosed) instead of writing nowhere.
	s.commitMu.Lock()
	if s.root != nil {
		_ = s.root.Close()
		s.root = nil
	}
	s.closed = true
	s.commitMu.Unlock()
	return err
}

// ErrSinkClosed: a commit reached a sink whose task has ended; the checkpoint's output is
// committed by the attempt that restores it.
var ErrSinkClosed = errors.New("the sink is closed")

func (s *checksumSink) halt() {
	if s.stop == nil {
		return
	}
	close(s.stop)
	<-s.stopped
	s.stop = nil
}

// flush writes the document when it changed since the last write.
func (s *checksumSink) flush() error {
	s.mu.Lock()
	if !s.dirty {
		s.mu.Unlock()
		return nil
	}
	doc := s.sum.clone()
	s.dirty = false
	s.mu.Unlock()
	return s.write(doc)
}

// write replaces the file with doc (temporary file, then rename).
func (s *checksumSink) write(doc Checksum) error {
	b, err := json.Marshal(doc)
	if err != nil {
		return fmt.Errorf("checksum sink: %w", err)
	}
	if s.root == nil {
		return nil // never opened, or closed
	}
	tmp := s.path + checksumTmpSuffix
	if err := s.root.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("checksum sink: %w", err)
	}
	if err := s.root.Rename(tmp, s.path); err != nil {
		return fmt.Errorf("checksum sink: %w", err)
	}
	return nil
}

// stagedChecksum is the document a checkpointed sink had at a checkpoint's barrier.
type stagedChecksum struct {
	id  uint64
	doc Checksum
}

// maxStaged bounds the documents staged for checkpoints not completed yet (aborted ones are
// dropped by the next commit; the oldest go first beyond this).
const maxStaged = 16

func (s *checksumSink) snapshotDoc() Checksum {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sum.clone()
}

// PrepareCommit stages the document as it is at checkpoint id's barrier.
func (s *checksumSink) PrepareCommit(id uint64) error {
	doc := s.snapshotDoc()
	s.commitMu.Lock()
	s.staged = append(s.staged, stagedChecksum{id: id, doc: doc})
	if len(s.staged) > maxStaged {
		s.staged = s.staged[len(s.staged)-maxStaged:]
	}
	s.commitMu.Unlock()
	if failpoint.Enabled(failpoint.CommitBeforeComplete) {
		return s.CommitCheckpoint(id) // the planted bug: committed before the checkpoint completed
	}
	return nil
}

// CommitCheckpoint writes the newest document staged at or below id as the committed output,
// unless that checkpoint or a later one is committed already.
func (s *checksumSink) CommitCheckpoint(id uint64) error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	k := -1
	for i, st := range s.staged {
		if st.id <= id {
			k = i
		}
	}
	if k < 0 || (s.committed != 0 && s.staged[k].id <= s.committed) {
		s.staged = dropStaged(s.staged, id)
		return nil
	}
	st := s.staged[k]
	s.staged = dropStaged(s.staged, id)
	if s.ahead != nil {
		if !covers(st.doc, *s.ahead) {
			return nil // behind what may be committed already: a later document will be
		}
		s.ahead = nil
	}
	return s.commitLocked(st.id, st.doc)
}

// covers reports whether doc holds everything ahead holds: as many records, and every origin
// of ahead up to its last seq.
func covers(doc, ahead Checksum) bool {
	if doc.Count < ahead.Count {
		return false
	}
	for o, a := range ahead.Origins {
		if d, ok := doc.Origins[o]; !ok || d.LastSeq < a.LastSeq {
			return false
		}
	}
	return true
}

// dropStaged keeps the documents staged after id.
func dropStaged(staged []stagedChecksum, id uint64) []stagedChecksum {
	out := staged[:0]
	for _, st := range staged {
		if st.id > id {
			out = append(out, st)
		}
	}
	return out
}

// lastID is the newest checkpoint staged or committed.
func (s *checksumSink) lastID() uint64 {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	id := s.committed
	for _, st := range s.staged {
		id = max(id, st.id)
	}
	return id
}

// commitDoc commits doc as of checkpoint id.
func (s *checksumSink) commitDoc(id uint64, doc Checksum) error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	return s.commitLocked(id, doc)
}

// commitLocked writes doc as the committed document of checkpoint id, atomically (commitMu
// held).
func (s *checksumSink) commitLocked(id uint64, doc Checksum) error {
	if s.closed {
		return fmt.Errorf("checksum sink: commit checkpoint %d: %w", id, ErrSinkClosed)
	}
	doc.CommittedCheckpoint, doc.CommittedUnixMs = id, failpoint.Now().UnixMilli() // the TM's wall clock (clock-offset steps it)
	if err := s.write(doc); err != nil {
		return err
	}
	s.committed = id
	return nil
}

// Committed is the newest checkpoint whose output this sink committed (0: none).
func (s *checksumSink) Committed() uint64 {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	return s.committed
}

// SnapshotState is the checksum document as it stands: what the sink accounted before the
// barrier.
func (s *checksumSink) SnapshotState() ([]byte, error) {
	s.mu.Lock()
	doc := s.sum.clone()
	s.mu.Unlock()
	return json.Marshal(doc)
}

// RestoreState makes the document the checkpointed one: Open then continues it rather than
// the file an attempt that ran past the checkpoint left, so the records replayed after the
// checkpoint are accounted once.
func (s *checksumSink) RestoreState(b []byte) error {
	var doc Checksum
	if err := json.Unmarshal(b, &doc); err != nil {
		return err
	}
	if doc.Job != s.info.Job || doc.Vertex != s.info.Vertex || doc.Subtask != s.info.Subtask {
		return fmt.Errorf("the state is of %s/%s[%d], not of this task", doc.Job, doc.Vertex, doc.Subtask)
	}
	s.restored = &doc
	if len(s.info.RestoredAhead) > 0 {
		var ahead Checksum
		if err := json.Unmarshal(s.info.RestoredAhead, &ahead); err == nil && ahead.Job == doc.Job && !covers(doc, ahead) {
			s.ahead = &ahead
		}
	}
	return nil
}
