package operator

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
)

// The file sink's two-phase commit (docs/checkpoints.md). In a checkpointed job the lines a
// sink receives between two barriers are one segment, named by the checkpoint whose barrier
// ends it; when a checkpoint completes, every staged segment up to it is written as a part
// file, PATH.part-<id> (ten digits, so that names sort as ids do), atomically (a temporary file
// renamed). The committed output of a sink subtask is its part files in name order; a part is
// written for the same segment with the same bytes however often it is committed (a restarted
// region replays the same records), so committing twice, or on two TaskManagers, changes
// nothing. A checkpoint's state is every segment not committed when its barrier passed, so a
// region restored from it commits them again at Open, wherever it runs: an announcement lost
// with a TaskManager or a leader loses no committed part.

// fileSegment is the lines between two barriers, ending at checkpoint id's.
type fileSegment struct {
	ID    uint64 `json:"id"`
	Lines string `json:"lines"`
}

// fileSinkState is the state a checkpoint keeps of a file sink.
type fileSinkState struct {
	Segments []fileSegment `json:"segments"`
}

// partName is the part file of segment id.
func (s *fileSink) partName(id uint64) string { return fmt.Sprintf("%s.part-%010d", s.path, id) }

// partEnd is the part of the lines after the last barrier of a job whose input ended.
func (s *fileSink) partEnd() string { return s.path + ".part-end" }

// SnapshotState is every segment not committed yet plus the lines since the last barrier (the
// segment this barrier ends; PrepareCommit stages it with its id).
func (s *fileSink) SnapshotState() ([]byte, error) {
	if !s.checkpointed {
		return nil, nil
	}
	s.commitMu.Lock()
	st := fileSinkState{Segments: slices.Clone(s.staged)}
	s.commitMu.Unlock()
	st.Segments = append(st.Segments, fileSegment{ID: 0, Lines: string(s.pending)}) // id set by PrepareCommit
	return json.Marshal(st)
}

// RestoreState takes the segments of the restored checkpoint, committed again at Open.
func (s *fileSink) RestoreState(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	var st fileSinkState
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

// PrepareCommit stages the lines since the last barrier as checkpoint id's segment.
func (s *fileSink) PrepareCommit(id uint64) error {
	if !s.checkpointed {
		return nil
	}
	seg := fileSegment{ID: id, Lines: string(s.pending)}
	s.pending = s.pending[:0]
	s.commitMu.Lock()
	s.staged = append(s.staged, seg)
	s.commitMu.Unlock()
	return nil
}

// CommitCheckpoint writes every staged segment up to id as its part file.
func (s *fileSink) CommitCheckpoint(id uint64) error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	k := 0
	for k < len(s.staged) && s.staged[k].ID <= id {
		if err := s.writePart(s.partName(s.staged[k].ID), s.staged[k].Lines); err != nil {
			s.staged = s.staged[k:]
			return err
		}
		s.committed = max(s.committed, s.staged[k].ID)
		k++
	}
	s.staged = s.staged[k:]
	return nil
}

// Committed is the newest checkpoint whose segment this sink wrote (0: none).
func (s *fileSink) Committed() uint64 {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	return s.committed
}

// openCommitted commits the restored checkpoint's segments again (its completion may not have
// reached the attempt that staged them).
func (s *fileSink) openCommitted() error {
	if len(s.restored) == 0 {
		return nil
	}
	s.commitMu.Lock()
	s.staged = s.restored
	s.restored = nil
	s.commitMu.Unlock()
	return s.CommitCheckpoint(s.restoredID)
}

// finishCommitted: every input ended, nothing is replayed any more: the staged segments and
// the lines since the last barrier are committed as they are.
func (s *fileSink) finishCommitted() error {
	if err := s.CommitCheckpoint(^uint64(0)); err != nil {
		return err
	}
	if len(s.pending) == 0 {
		return nil
	}
	return s.writePart(s.partEnd(), string(s.pending))
}

// writePart writes one part file atomically, through the work directory's root.
func (s *fileSink) writePart(name, lines string) error {
	if s.root == nil {
		return fmt.Errorf("file sink: %s: %w", name, ErrSinkClosed)
	}
	tmp := name + ".tmp"
	f, err := s.root.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("file sink: %w", err)
	}
	if _, err := f.WriteString(lines); err != nil {
		_ = f.Close()
		return fmt.Errorf("file sink: %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("file sink: %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("file sink: %s: %w", tmp, err)
	}
	if err := s.root.Rename(tmp, name); err != nil {
		return fmt.Errorf("file sink: %w", err)
	}
	return nil
}
