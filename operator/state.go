package operator

import (
	"encoding/json"
	"fmt"
	"slices"
)

// The state of each stateful operator is a small JSON document (debuggable with cat, and
// versioned by its field names): the sequence source's position, the key-by-sum's sums in key
// order, the checksum sink's whole document.

// restorer is a Stateful operator that starts from a checkpointed state.
type restorer interface {
	Stateful
	restoreState(b []byte) error
}

// restore hands info.Restored to x; state for an operator that keeps none is refused, so a
// checkpoint taken of another job graph is not silently ignored.
func restore(x any, kind string, info Info) error {
	if len(info.Restored) == 0 {
		return nil
	}
	r, ok := x.(restorer)
	if !ok {
		return fmt.Errorf("%w: %s keeps no state, but the checkpoint holds %d bytes for it", ErrBadConfig, kind, len(info.Restored))
	}
	if err := r.restoreState(info.Restored); err != nil {
		return fmt.Errorf("restore %s from its checkpointed state: %w", kind, err)
	}
	return nil
}

// sourceState is the sequence source's position: the index of the next record it emits.
type sourceState struct {
	Next int64 `json:"next"`
}

// SnapshotState returns the position of the next record: the record being emitted when the
// barrier is injected comes after the barrier (the TaskManager injects it in front of it).
func (s *sequenceSource) SnapshotState() ([]byte, error) {
	return json.Marshal(sourceState{Next: s.next})
}

func (s *sequenceSource) restoreState(b []byte) error {
	var st sourceState
	if err := json.Unmarshal(b, &st); err != nil {
		return err
	}
	if st.Next < 0 || (s.count > 0 && st.Next > s.count) {
		return fmt.Errorf("position %d is outside the sequence [0, %d)", st.Next, s.count)
	}
	s.next = st.Next
	return nil
}

// sumState is the key-by-sum's running sums, in key order.
type sumState struct {
	Keys []int64 `json:"keys"`
	Sums []int64 `json:"sums"`
}

func (k *keyBySum) SnapshotState() ([]byte, error) {
	st := sumState{Keys: make([]int64, 0, len(k.sums)), Sums: make([]int64, 0, len(k.sums))}
	for key := range k.sums {
		st.Keys = append(st.Keys, key)
	}
	slices.Sort(st.Keys)
	for _, key := range st.Keys {
		st.Sums = append(st.Sums, k.sums[key])
	}
	return json.Marshal(st)
}

func (k *keyBySum) restoreState(b []byte) error {
	var st sumState
	if err := json.Unmarshal(b, &st); err != nil {
		return err
	}
	if len(st.Keys) != len(st.Sums) {
		return fmt.Errorf("%d keys but %d sums", len(st.Keys), len(st.Sums))
	}
	k.sums = make(map[int64]int64, len(st.Keys))
	for i, key := range st.Keys {
		k.sums[key] = st.Sums[i]
	}
	return nil
}

// SnapshotState is the checksum document as it stands: what the sink accounted before the
// barrier.
func (s *checksumSink) SnapshotState() ([]byte, error) {
	s.mu.Lock()
	doc := s.sum.clone()
	s.mu.Unlock()
	return json.Marshal(doc)
}

// restoreState makes the document the checkpointed one: Open then continues it rather than
// the file an attempt that ran past the checkpoint left, so the records replayed after the
// checkpoint are accounted once.
func (s *checksumSink) restoreState(b []byte) error {
	var doc Checksum
	if err := json.Unmarshal(b, &doc); err != nil {
		return err
	}
	if doc.Job != s.info.Job || doc.Vertex != s.info.Vertex || doc.Subtask != s.info.Subtask {
		return fmt.Errorf("the state is of %s/%s[%d], not of this task", doc.Job, doc.Vertex, doc.Subtask)
	}
	s.restored = &doc
	return nil
}
