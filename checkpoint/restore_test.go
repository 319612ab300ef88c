package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestRestoreErrorRoundTrip: a state the store refuses becomes a RestoreError whose message,
// however wrapped, ParseRestoreFailure reads back (the checkpoint and the file); other errors
// stay as they are.
func TestRestoreErrorRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rel, sum, err := s.Write("job", 7, "sink", 1, 2, []byte(`{"count":12345}`))
	if err != nil {
		t.Fatal(err)
	}
	full := filepath.Join(dir, filepath.FromSlash(rel))
	b, _ := os.ReadFile(full)
	b[len(b)-2] ^= 1 // a digit stays a digit: 5 -> 4
	if err := os.WriteFile(full, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, rerr := s.ReadChecksum(rel, sum)
	err = fmt.Errorf("restore: %w", AsRestoreError(rerr, 7, "sink", 1, 2))
	var re *RestoreError
	if !errors.As(err, &re) || !errors.Is(err, ErrChecksumMismatch) || re.Checkpoint != 7 || re.Err.Path != rel {
		t.Fatalf("%v: not a RestoreError of checkpoint 7 wrapping a checksum mismatch", err)
	}
	f, ok := ParseRestoreFailure("region restart: " + err.Error())
	if !ok || f.Checkpoint != 7 || f.Path != rel || f.Reason != "state checksum mismatch" {
		t.Fatalf("ParseRestoreFailure(%q) = %+v, %v", err, f, ok)
	}
	// The planted bug's read: the flipped digit is restored as if the state were whole.
	got, err := s.ReadUnverified(rel)
	if err != nil || string(got) != `{"count":12344}` {
		t.Fatalf("ReadUnverified = %q, %v", got, err)
	}
	if other := errors.New("no storage"); AsRestoreError(other, 7, "sink", 1, 2) != other {
		t.Fatal("an error that is not a StateError was wrapped")
	}
	for _, c := range []string{"", "task failed", `unusable checkpoint x: state file "a"`, `unusable checkpoint 0: state file "a"`, `unusable checkpoint 3: state file "unterminated`} {
		if f, ok := ParseRestoreFailure(c); ok {
			t.Fatalf("ParseRestoreFailure(%q) = %+v", c, f)
		}
	}
}

// TestNewerState: the newest state of a subtask in a checkpoint after the given one that reads
// whole, its newest attempt first; a damaged one is passed over; none after the newest.
func TestNewerState(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, w := range []struct {
		id      uint64
		attempt int32
		data    string
	}{{3, 0, "three"}, {4, 0, "four-0"}, {4, 1, "four-1"}, {5, 1, "five"}} {
		if _, _, err := s.Write("job", w.id, "sink", 0, w.attempt, []byte(w.data)); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.Write("job", 6, "sink", 1, 0, []byte("other subtask")); err != nil {
		t.Fatal(err)
	}
	five, _ := StatePath("job", 5, "sink", 0, 1)
	b, _ := os.ReadFile(filepath.Join(dir, five))
	b[len(b)-1] ^= 1
	if err := os.WriteFile(filepath.Join(dir, five), b, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		after  uint64
		want   string
		wantID uint64
	}{{2, "four-1", 4}, {3, "four-1", 4}, {4, "", 0}, {5, "", 0}} {
		got, id, err := s.NewerState("job", tc.after, "sink", 0)
		if err != nil || string(got) != tc.want || id != tc.wantID {
			t.Fatalf("NewerState after %d = %q, %d, %v; want %q, %d", tc.after, got, id, err, tc.want, tc.wantID)
		}
	}
}
