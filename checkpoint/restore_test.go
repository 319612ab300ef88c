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
