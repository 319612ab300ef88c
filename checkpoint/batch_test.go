package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
)

// TestWriteBatch: a batch of states of two checkpoints and several tasks is read back as
// Write would have written it (the same paths, checksums and files), with no temporary file
// left; a state the batch refuses (over the size limit, a bad vertex id) fails alone, naming
// its cause, and the others are written. A small batch (synced file by file) and a large one
// (synced at once) alike.
func TestWriteBatch(t *testing.T) {
	for _, subtasks := range []int32{2, syncManyFrom} {
		t.Run(fmt.Sprintf("%d subtasks", subtasks), func(t *testing.T) { writeBatch(t, subtasks) })
	}
}

func writeBatch(t *testing.T, subtasks int32) {
	dir := filepath.Join(t.TempDir(), "root")
	s, err := Open(dir, Options{MaxStateBytes: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	var states []State
	for id := uint64(3); id <= 4; id++ {
		for sub := int32(0); sub < subtasks; sub++ {
			states = append(states, State{Job: job, ID: id, Vertex: "map", Subtask: sub, Attempt: 1,
				Data: []byte(fmt.Sprintf("map[%d] at %d", sub, id))})
		}
	}
	states = append(states,
		State{Job: job, ID: 3, Vertex: "big", Data: make([]byte, 2<<10)},
		State{Job: job, ID: 3, Vertex: "../up", Data: []byte("x")},
		State{Job: job, ID: 4, Vertex: "sink", Subtask: 0, Attempt: 0})
	res := s.WriteBatch(states)
	if len(res) != len(states) {
		t.Fatalf("%d results for %d states", len(res), len(states))
	}
	for i, st := range states {
		w := res[i]
		switch st.Vertex {
		case "big":
			if !errors.Is(w.Err, ErrStateTooLarge) {
				t.Fatalf("the state over the limit: %v", w.Err)
			}
			continue
		case "../up":
			if !errors.Is(w.Err, ErrInvalidPath) {
				t.Fatalf("the state with a bad vertex id: %v", w.Err)
			}
			continue
		}
		want, _ := StatePath(st.Job, st.ID, st.Vertex, st.Subtask, st.Attempt)
		if w.Err != nil || w.Path != want || w.Checksum != Checksum(st.Data) {
			t.Fatalf("state %d: %+v, want path %q checksum %08x", i, w, want, Checksum(st.Data))
		}
		got, err := s.ReadChecksum(w.Path, w.Checksum)
		if err != nil || !bytes.Equal(got, st.Data) {
			t.Fatalf("%s: read %q %v, want %q", w.Path, got, err, st.Data)
		}
	}
	if tmp := leftovers(t, s); len(tmp) != 0 {
		t.Fatalf("temporary files left: %v", tmp)
	}
	if ids, err := s.Checkpoints(job); err != nil || len(ids) != 2 {
		t.Fatalf("checkpoints %v %v", ids, err)
	}
	if res := s.WriteBatch(nil); len(res) != 0 {
		t.Fatalf("an empty batch: %v", res)
	}
}
