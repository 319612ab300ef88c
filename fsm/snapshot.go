package fsm

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// SnapshotVersion is the version written in every snapshot header.
const SnapshotVersion = 1

// maxSnapshotRecord bounds one record of a snapshot stream, so a corrupt length cannot ask
// for an unbounded allocation.
const maxSnapshotRecord = 256 << 20

var (
	marshalDelim   = protodelim.MarshalOptions{MarshalOptions: proto.MarshalOptions{Deterministic: true}}
	unmarshalDelim = protodelim.UnmarshalOptions{MaxSize: maxSnapshotRecord}
)

// snapshot is an immutable deep copy of the state.
type snapshot struct {
	jobs   []*pb.JobRecord
	epoch  *pb.LeaderEpoch
	recons []*pb.ReconciliationRecord
}

// Snapshot deep-copies the state under the read lock; Persist then streams the copy while
// Apply goes on.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	snap := &snapshot{
		jobs:   f.st.sortedJobs(),
		epoch:  proto.Clone(f.st.epoch).(*pb.LeaderEpoch),
		recons: make([]*pb.ReconciliationRecord, len(f.st.recons)),
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
	w := bufio.NewWriterSize(sink, 1<<20)
	err := writeStream(w, s.jobs, s.epoch, s.recons)
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

// writeStream writes the snapshot format: a header, one record per job (ordered by create
// index), one per reconciliation record (oldest first), and the leader epoch last. The epoch
// closes the stream, so a stream cut at a record boundary is detected.
func writeStream(w io.Writer, jobs []*pb.JobRecord, epoch *pb.LeaderEpoch, recons []*pb.ReconciliationRecord) error {
	write := func(r *pb.SnapshotRecord) error {
		_, err := marshalDelim.MarshalTo(w, r)
		return err
	}
	header := &pb.SnapshotHeader{Version: SnapshotVersion, Jobs: uint64(len(jobs))}
	if err := write(&pb.SnapshotRecord{Record: &pb.SnapshotRecord_Header{Header: header}}); err != nil {
		return err
	}
	for _, j := range jobs {
		if err := write(&pb.SnapshotRecord{Record: &pb.SnapshotRecord_Job{Job: j}}); err != nil {
			return err
		}
	}
	for _, r := range recons {
		if err := write(&pb.SnapshotRecord{Record: &pb.SnapshotRecord_Reconciliation{Reconciliation: r}}); err != nil {
			return err
		}
	}
	return write(&pb.SnapshotRecord{Record: &pb.SnapshotRecord_Epoch{Epoch: epoch}})
}

// Restore decodes a snapshot stream into a fresh state and swaps it in only when the whole
// stream decoded. On error the current state is unchanged.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	st, err := readStream(bufio.NewReaderSize(rc, 1<<20))
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
		if err := unmarshalDelim.UnmarshalFrom(r, rec); err != nil {
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
	for _, ejv := range rec.ExecutionGraph.Vertices {
		for i, ev := range ejv.GetSubtasks() {
			if ev == nil || ev.VertexId != ejv.VertexId || ev.SubtaskIndex != int32(i) {
				return fmt.Errorf("%w: job %q: vertex %q subtask %d is out of place", ErrSnapshotCorrupt, id, ejv.GetVertexId(), i)
			}
			if a := ev.Current.GetAttemptId(); a != "" {
				if _, dup := s.attempts[a]; dup {
					return fmt.Errorf("%w: attempt %q is current twice", ErrSnapshotCorrupt, a)
				}
			}
		}
	}
	s.jobs[id] = rec
	s.indexJob(rec)
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
	if err := writeStream(h, f.st.sortedJobs(), f.st.epoch, f.st.recons); err != nil {
		panic(fmt.Sprintf("fsm: hash: %v", err)) // a hash.Hash never fails to write
	}
	return hex.EncodeToString(h.Sum(nil))
}
