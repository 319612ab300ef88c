package fsm

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// SnapshotVersion is the version written in every snapshot header.
const SnapshotVersion = 1

// maxSnapshotRecord bounds one record of a snapshot stream. Restore refuses a longer record and
// Persist refuses to write one, so a snapshot is never written that Restore would refuse. It
// does not guard memory: Restore allocates in step with the bytes that arrive (readRecord). The
// replicated size ceiling (graph.CeilingSizeLimits) and the per-job bound on earlier attempts
// (attemptHistory) keep every admitted job's record below two thirds of it.
const maxSnapshotRecord = 256 << 20

var marshalRecord = proto.MarshalOptions{Deterministic: true}

// snapshot is an immutable deep copy of the state (own) or, for the hash, a view of it.
type snapshot struct {
	own       bool // jobs are this snapshot's copies, which write may complete in place
	jobs      []*pb.JobRecord
	epoch     *pb.LeaderEpoch
	recons    []*pb.ReconciliationRecord
	pool      *pb.TaskManagerPool
	artifacts []*pb.ArtifactRecord // by sha256; shared with the state (immutable)
	uploads   []*pb.ArtifactUpload // by upload id; the snapshot's own copies
	removed   uint64
	removedAt int64
}

// Snapshot deep-copies the state under the read lock; Persist then streams the copy while
// Apply goes on.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	snap := &snapshot{
		own:       true,
		jobs:      f.st.sortedJobs(),
		epoch:     proto.Clone(f.st.epoch).(*pb.LeaderEpoch),
		recons:    make([]*pb.ReconciliationRecord, len(f.st.recons)),
		pool:      proto.Clone(f.st.pool).(*pb.TaskManagerPool),
		artifacts: f.st.sortedArtifacts(),
		uploads:   f.st.sortedUploads(),
		removed:   f.st.removed,
		removedAt: f.st.removedAt,
	}
	for i, u := range snap.uploads {
		// An upload grows by appending chunks; its chunks' bytes never change.
		snap.uploads[i] = &pb.ArtifactUpload{UploadId: u.UploadId, Sha256: u.Sha256, Size: u.Size, Received: u.Received,
			Chunks: slices.Clone(u.Chunks), BegunAt: u.BegunAt, BeginIndex: u.BeginIndex}
	}
	for i, j := range snap.jobs {
		snap.jobs[i] = proto.Clone(j).(*pb.JobRecord)
	}
	for i, r := range f.st.recons {
		snap.recons[i] = proto.Clone(r).(*pb.ReconciliationRecord)
	}
	return snap, nil
}

// Persist writes the snapshot stream to the sink, cancelling the sink on error.
func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	w := bufio.NewWriterSize(sink, 64<<10)
	err := s.write(w, maxSnapshotRecord)
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("fsm: persist snapshot: %w", err)
	}
	return sink.Close()
}

// Release does nothing: the snapshot holds only memory.
func (s *snapshot) Release() {}

// write writes the snapshot format: a header, one record per job (ordered by create index),
// one per reconciliation record (oldest first), the TaskManager pool (once it has a version),
// and the leader epoch last. The epoch closes
// the stream, so a stream cut at a record boundary is detected. Each record is a varint
// length and the record (protodelim's framing); limit > 0 refuses a record longer than limit.
func (s *snapshot) write(w io.Writer, limit int) error {
	var lenBuf [binary.MaxVarintLen64]byte
	write := func(r *pb.SnapshotRecord) error {
		b, err := marshalRecord.Marshal(r)
		if err != nil {
			return err
		}
		if limit > 0 && len(b) > limit {
			what := "a record"
			if j := r.GetJob(); j != nil {
				what = fmt.Sprintf("the record of job %q", jobID(j))
			}
			return fmt.Errorf("%s encodes to %d bytes, over the snapshot record limit of %d", what, len(b), limit)
		}
		if _, err := w.Write(lenBuf[:binary.PutUvarint(lenBuf[:], uint64(len(b)))]); err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	header := &pb.SnapshotHeader{Version: SnapshotVersion, Jobs: uint64(len(s.jobs)), RemovedJobs: s.removed, LastRemovalAt: s.removedAt}
	if err := write(&pb.SnapshotRecord{Record: &pb.SnapshotRecord_Header{Header: header}}); err != nil {
		return err
	}
	for _, j := range s.jobs {
		if err := write(&pb.SnapshotRecord{Record: &pb.SnapshotRecord_Job{Job: s.withInputs(j)}}); err != nil {
			return err
		}
	}
	for _, r := range s.recons {
		if err := write(&pb.SnapshotRecord{Record: &pb.SnapshotRecord_Reconciliation{Reconciliation: r}}); err != nil {
			return err
		}
	}
	if s.pool.GetVersion() > 0 || len(s.pool.GetDrained()) > 0 {
		if err := write(&pb.SnapshotRecord{Record: &pb.SnapshotRecord_Pool{Pool: s.pool}}); err != nil {
			return err
		}
	}
	for _, a := range s.artifacts {
		if err := write(&pb.SnapshotRecord{Record: &pb.SnapshotRecord_Artifact{Artifact: a}}); err != nil {
			return err
		}
	}
	for _, u := range s.uploads {
		if err := write(&pb.SnapshotRecord{Record: &pb.SnapshotRecord_ArtifactUpload{ArtifactUpload: u}}); err != nil {
			return err
		}
	}
	return write(&pb.SnapshotRecord{Record: &pb.SnapshotRecord_Epoch{Epoch: s.epoch}})
}

// withInputs is j as a snapshot encodes it: with every consumer subtask's input channels
// (graph.MaterializeInputs), which the state does not keep. A snapshot is thus what it was
// when the state kept them, so that a JobMaster of an earlier release restores it with its
// channels and the hash of a state is the same in both releases; Restore strips them again.
func (s *snapshot) withInputs(j *pb.JobRecord) *pb.JobRecord {
	if len(j.GetExecutionGraph().GetResults()) == 0 {
		return j // no consumer
	}
	if !s.own {
		j = proto.CloneOf(j)
	}
	graph.MaterializeInputs(j.ExecutionGraph)
	return j
}

// readRecord reads one varint-length-delimited record. A record longer than maxSnapshotRecord
// is refused, and a record longer than the reader's buffer is read in growing chunks, so a
// corrupt length costs no more memory than twice what the stream actually holds (at least 1 MiB).
func readRecord(r *bufio.Reader, m proto.Message) error {
	size, err := binary.ReadUvarint(r)
	if err != nil {
		return err // io.EOF before the first byte: the stream ended between records
	}
	if size > maxSnapshotRecord {
		return fmt.Errorf("a record of %d bytes is over the limit of %d", size, maxSnapshotRecord)
	}
	if b, err := r.Peek(int(size)); err == nil {
		defer r.Discard(len(b))
		return proto.Unmarshal(b, m)
	}
	buf := make([]byte, 0, min(size, recordChunk))
	for uint64(len(buf)) < size {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, int(min(size, 2*uint64(cap(buf))))-len(buf))
		}
		n, err := io.ReadFull(r, buf[len(buf):min(uint64(cap(buf)), size)])
		buf = buf[:len(buf)+n]
		if err != nil {
			return io.ErrUnexpectedEOF
		}
	}
	return proto.Unmarshal(buf, m)
}

// recordChunk is the first allocation for a record longer than the reader's buffer; it doubles
// from there.
const recordChunk = 1 << 20

// Restore decodes a snapshot stream into a fresh state and swaps it in only when the whole
// stream decoded. On error the current state is unchanged.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	st, err := readStream(bufio.NewReaderSize(rc, 64<<10))
	if err != nil {
		return fmt.Errorf("fsm: restore: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.st = st
	f.notifyLocked()
	f.logger.Info("restored snapshot", "jobs", len(st.jobs), "epoch", st.epoch.Epoch, "reconciliations", len(st.recons))
	return nil
}

func readStream(r *bufio.Reader) (*state, error) {
	read := func(what string) (*pb.SnapshotRecord, error) {
		rec := &pb.SnapshotRecord{}
		if err := readRecord(r, rec); err != nil {
			if errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("%w: stream ends before the %s", ErrSnapshotCorrupt, what)
			}
			return nil, fmt.Errorf("%w: reading the %s: %v", ErrSnapshotCorrupt, what, err)
		}
		return rec, nil
	}
	first, err := read("header")
	if err != nil {
		return nil, err
	}
	header := first.GetHeader()
	if header == nil {
		return nil, fmt.Errorf("%w: the first record is not a header", ErrSnapshotCorrupt)
	}
	if header.Version != SnapshotVersion {
		return nil, fmt.Errorf("%w: version %d", ErrSnapshotVersion, header.Version)
	}
	st := newState()
	st.removed, st.removedAt = header.RemovedJobs, header.LastRemovalAt
	for n := uint64(0); n < header.Jobs; n++ {
		rec, err := read("job record")
		if err != nil {
			return nil, err
		}
		if err := st.addJob(rec.GetJob()); err != nil {
			return nil, err
		}
	}
	for {
		rec, err := read("leader epoch")
		if err != nil {
			return nil, err
		}
		switch v := rec.Record.(type) {
		case *pb.SnapshotRecord_Reconciliation:
			st.recons = append(st.recons, v.Reconciliation)
			continue
		case *pb.SnapshotRecord_Pool:
			if v.Pool == nil {
				return nil, fmt.Errorf("%w: empty pool record", ErrSnapshotCorrupt)
			}
			st.pool = v.Pool
			continue
		case *pb.SnapshotRecord_Artifact:
			if err := st.restoreArtifact(v.Artifact); err != nil {
				return nil, err
			}
			st.applied = max(st.applied, v.Artifact.StoredIndex)
			continue
		case *pb.SnapshotRecord_ArtifactUpload:
			if err := st.restoreUpload(v.ArtifactUpload); err != nil {
				return nil, err
			}
			st.applied = max(st.applied, v.ArtifactUpload.BeginIndex)
			continue
		case *pb.SnapshotRecord_Epoch:
			if v.Epoch == nil {
				return nil, fmt.Errorf("%w: empty epoch record", ErrSnapshotCorrupt)
			}
			st.epoch = v.Epoch
		default:
			return nil, fmt.Errorf("%w: unexpected record %T after the jobs", ErrSnapshotCorrupt, rec.Record)
		}
		break
	}
	if _, err := r.ReadByte(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: data after the leader epoch", ErrSnapshotCorrupt)
	}
	return st, nil
}

// addJob adds a restored job record, checking what the indexes rely on.
func (s *state) addJob(rec *pb.JobRecord) error {
	id := ""
	if rec != nil {
		id = jobID(rec)
	}
	switch {
	case id == "" || rec.ExecutionGraph == nil:
		return fmt.Errorf("%w: a job record without a job id or execution graph", ErrSnapshotCorrupt)
	case s.jobs[id] != nil:
		return fmt.Errorf("%w: job %q appears twice", ErrSnapshotCorrupt, id)
	}
	if err := checkRestoredCheckpoints(rec); err != nil {
		return err
	}
	current := map[string]bool{} // this job's current attempts; s.attempts has the others
	for _, ejv := range rec.ExecutionGraph.Vertices {
		for i, ev := range ejv.GetSubtasks() {
			if ev == nil || ev.VertexId != ejv.VertexId || ev.SubtaskIndex != int32(i) {
				return fmt.Errorf("%w: job %q: vertex %q subtask %d is out of place", ErrSnapshotCorrupt, id, ejv.GetVertexId(), i)
			}
			if a := ev.Current.GetAttemptId(); a != "" {
				if _, dup := s.attempts[a]; dup || current[a] {
					return fmt.Errorf("%w: attempt %q is current twice", ErrSnapshotCorrupt, a)
				}
				current[a] = true
			}
		}
	}
	graph.StripInputs(rec.ExecutionGraph) // the state keeps no channels (withInputs)
	s.canon.canonRecord(rec)
	s.jobs[id] = rec
	s.indexJob(rec)
	s.countJob(rec, 1)
	s.recountCheckpoints(id)
	s.applied = max(s.applied, rec.ModifyIndex)
	return nil
}

// Hash returns the hex SHA-256 of the snapshot encoding of the state. Replicas that applied
// the same entries have equal hashes; the applied index is not part of it.
func (f *FSM) Hash() string {
	hash, _ := f.HashAt()
	return hash
}

// HashAt returns the state's hash and the applied index it belongs to, read under one lock so
// that two replicas can be compared at the same index.
func (f *FSM) HashAt() (string, uint64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.hashLocked(), f.st.applied
}

func (f *FSM) hashLocked() string {
	h := sha256.New()
	view := &snapshot{jobs: f.st.sortedJobs(), epoch: f.st.epoch, recons: f.st.recons, pool: f.st.pool,
		artifacts: f.st.sortedArtifacts(), uploads: f.st.sortedUploads(), removed: f.st.removed, removedAt: f.st.removedAt}
	if err := view.write(h, 0); err != nil {
		panic(fmt.Sprintf("fsm: hash: %v", err)) // a hash.Hash never fails to write
	}
	return hex.EncodeToString(h.Sum(nil))
}
