package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

const job = "0123456789abcdef0123456789abcdef"

func open(t *testing.T, opts Options) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "checkpoints"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// leftovers lists the temporary files under the root.
func leftovers(t *testing.T, s *Store) []string {
	t.Helper()
	var tmp []string
	err := filepath.WalkDir(s.Dir(), func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), ".tmp-") {
			tmp = append(tmp, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return tmp
}

// mustFail checks that err is a *StateError for rel wrapping want, and that its text names
// the path.
func mustFail(t *testing.T, err error, rel string, want error) {
	t.Helper()
	var se *StateError
	if !errors.Is(err, want) || !errors.As(err, &se) || se.Path != rel || !strings.Contains(err.Error(), strconv.Quote(rel)) {
		t.Fatalf("err = %v, want a StateError for %q wrapping %v", err, rel, want)
	}
	t.Logf("%v", err)
}

// TestRoundTrip: a state is written where the layout says, with the payload's CRC-32C, and
// reads back equal; writing the same task again replaces it; nothing temporary is left.
func TestRoundTrip(t *testing.T) {
	s := open(t, Options{})
	data := []byte("the state of map[3] at checkpoint 7")
	rel, sum, err := s.Write(job, 7, "map", 3, 2, data)
	if err != nil {
		t.Fatal(err)
	}
	if want := job + "/chk-7/map-3-2.state"; rel != want {
		t.Fatalf("path %q, want %q", rel, want)
	}
	if sum != Checksum(data) {
		t.Fatalf("checksum %08x, want %08x", sum, Checksum(data))
	}
	fi, err := os.Stat(filepath.Join(s.Dir(), rel))
	if err != nil || fi.Size() != int64(HeaderSize+len(data)) {
		t.Fatalf("the file: %v %v", fi, err)
	}
	got, err := s.Read(rel)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read %q %v", got, err)
	}
	if got, err := s.ReadChecksum(rel, sum); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read with the checksum: %q %v", got, err)
	}
	again := []byte("written again by the same attempt")
	if rel2, _, err := s.Write(job, 7, "map", 3, 2, again); err != nil || rel2 != rel {
		t.Fatalf("write again: %q %v", rel2, err)
	}
	if got, _ := s.Read(rel); !bytes.Equal(got, again) {
		t.Fatalf("after the second write: %q", got)
	}
	empty, _, err := s.Write(job, 7, "sink", 0, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Read(empty); err != nil || len(got) != 0 {
		t.Fatalf("empty state: %q %v", got, err)
	}
	if tmp := leftovers(t, s); len(tmp) != 0 {
		t.Fatalf("temporary files left: %v", tmp)
	}
	if ids, err := s.Checkpoints(job); err != nil || !slices.Equal(ids, []uint64{7}) {
		t.Fatalf("checkpoints %v %v", ids, err)
	}
}

// TestCorruptionIsNamed: a flipped payload byte, a wrong magic or format version, or a file
// holding another state than the one acknowledged fails the read with an error naming the file
// and the cause.
func TestCorruptionIsNamed(t *testing.T) {
	s := open(t, Options{})
	data := bytes.Repeat([]byte("state "), 100)
	rel, sum, err := s.Write(job, 1, "src", 0, 0, data)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(s.Dir(), rel)
	orig, _ := os.ReadFile(file)
	for _, c := range []struct {
		name string
		at   int
		want error
	}{
		{"payload byte", HeaderSize + 123, ErrChecksumMismatch},
		{"checksum byte", 9, ErrChecksumMismatch},
		{"magic", 0, ErrStateCorrupt},
		{"format version", 7, ErrStateCorrupt},
		{"length", 19, ErrStateTruncated}, // the length grows by one
	} {
		t.Run(c.name, func(t *testing.T) {
			b := slices.Clone(orig)
			b[c.at] ^= 0x01
			if err := os.WriteFile(file, b, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := s.Read(rel)
			mustFail(t, err, rel, c.want)
		})
	}
	if err := os.WriteFile(file, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	other, otherSum, _ := s.Write(job, 1, "src", 1, 0, []byte("another task's state"))
	_, err = s.ReadChecksum(other, sum)
	mustFail(t, err, other, ErrChecksumMismatch)
	if _, err := s.ReadChecksum(other, otherSum); err != nil {
		t.Fatal(err)
	}
}

// TestTruncationAndMissing: a file cut anywhere, one with bytes after its payload, and one that
// is not there each fail the read, naming the file.
func TestTruncationAndMissing(t *testing.T) {
	s := open(t, Options{})
	rel, _, err := s.Write(job, 2, "map", 1, 0, []byte("0123456789"))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(s.Dir(), rel)
	orig, _ := os.ReadFile(file)
	for _, n := range []int{0, 3, HeaderSize - 1, HeaderSize, len(orig) - 1} {
		if err := os.WriteFile(file, orig[:n], 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := s.Read(rel)
		mustFail(t, err, rel, ErrStateTruncated)
	}
	if err := os.WriteFile(file, append(slices.Clone(orig), '!'), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = s.Read(rel)
	mustFail(t, err, rel, ErrStateCorrupt)
	missing := job + "/chk-2/map-0-0.state"
	_, err = s.Read(missing)
	mustFail(t, err, missing, ErrStateMissing)
	_, err = s.Read(job + "/chk-2")
	mustFail(t, err, job+"/chk-2", ErrStateCorrupt) // a directory
}

// TestPathsOutsideTheRootAreRefused: a path with "..", an absolute or unclean path, a symbolic
// link out of the root, and ids that are not file names are refused, nothing read or written
// outside the root.
func TestPathsOutsideTheRootAreRefused(t *testing.T) {
	s := open(t, Options{})
	outside := filepath.Join(filepath.Dir(s.Dir()), "secret.state")
	if err := os.WriteFile(outside, []byte("not yours"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"../secret.state", outside, "a/../../secret.state", "./" + job, job + "//x.state", "", ".", "..", `..\secret.state`} {
		_, err := s.Read(rel)
		mustFail(t, err, rel, ErrInvalidPath)
	}
	if err := os.MkdirAll(filepath.Join(s.Dir(), job), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(s.Dir(), job, "link.state")); err != nil {
		t.Fatal(err)
	}
	_, err := s.Read(job + "/link.state")
	mustFail(t, err, job+"/link.state", ErrInvalidPath)
	if err := os.Symlink(filepath.Dir(s.Dir()), filepath.Join(s.Dir(), "up")); err != nil {
		t.Fatal(err)
	}
	_, err = s.Read("up/secret.state")
	mustFail(t, err, "up/secret.state", ErrInvalidPath)

	for _, c := range []struct {
		job, vertex string
		id          uint64
		subtask     int32
	}{
		{"../x", "v", 1, 0}, {job, "a/b", 1, 0}, {job, "..", 1, 0}, {"", "v", 1, 0}, {job, "", 1, 0},
		{job, "v", 0, 0}, {job, "v", 1, -1}, {"up", "v", 1, 0},
	} {
		_, _, err := s.Write(c.job, c.id, c.vertex, c.subtask, 0, []byte("x"))
		if c.job == "up" {
			// A valid name; the symbolic link under it leads out of the root, which refuses it.
			if err == nil {
				t.Errorf("a write through a symbolic link out of the root succeeded")
			}
			continue
		}
		if !errors.Is(err, ErrInvalidPath) {
			t.Errorf("write %+v: %v, want ErrInvalidPath", c, err)
		}
	}
	if b, _ := os.ReadFile(outside); string(b) != "not yours" {
		t.Fatalf("the file outside the root changed: %q", b)
	}
	if m, _ := filepath.Glob(filepath.Join(filepath.Dir(s.Dir()), "chk-*")); len(m) != 0 {
		t.Fatalf("written outside the root: %v", m)
	}
}

// TestDeleteIsIdempotent: Delete removes a checkpoint's states and directory, and deleting it
// again, or one never written, is no error; DeleteJob removes the rest.
func TestDeleteIsIdempotent(t *testing.T) {
	s := open(t, Options{})
	var rels []string
	for id := uint64(1); id <= 3; id++ {
		for sub := int32(0); sub < 2; sub++ {
			rel, _, err := s.Write(job, id, "v", sub, 0, []byte{byte(id), byte(sub)})
			if err != nil {
				t.Fatal(err)
			}
			rels = append(rels, rel)
		}
	}
	// A writer that died before its rename left a temporary file: Delete removes it too.
	if err := os.WriteFile(filepath.Join(s.Dir(), job, "chk-1", ".v-0-1.state.tmp-dead"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := s.Delete(job, 1); err != nil {
			t.Fatalf("delete %d: %v", i, err)
		}
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), job, "chk-1")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("chk-1 after the delete: %v", err)
	}
	_, err := s.Read(rels[0])
	mustFail(t, err, rels[0], ErrStateMissing)
	if _, err := s.Read(rels[2]); err != nil {
		t.Fatalf("checkpoint 2 after deleting 1: %v", err)
	}
	if err := s.Delete(job, 99); err != nil {
		t.Fatalf("delete of a checkpoint never written: %v", err)
	}
	if err := s.Delete("fedcba9876543210fedcba9876543210", 1); err != nil {
		t.Fatalf("delete of a job never written: %v", err)
	}
	if err := s.Delete("../x", 1); !errors.Is(err, ErrInvalidPath) {
		t.Fatalf("delete out of the root: %v", err)
	}
	if ids, _ := s.Checkpoints(job); !slices.Equal(ids, []uint64{2, 3}) {
		t.Fatalf("checkpoints %v, want 2 and 3", ids)
	}
	for i := 0; i < 2; i++ {
		if err := s.DeleteJob(job); err != nil {
			t.Fatal(err)
		}
	}
	if ids, err := s.Checkpoints(job); err != nil || len(ids) != 0 {
		t.Fatalf("checkpoints after DeleteJob: %v %v", ids, err)
	}
}

// TestConcurrentWritersOfDifferentTasks: the tasks of a checkpoint write at once (their
// directories created by whichever comes first); every state reads back as written.
func TestConcurrentWritersOfDifferentTasks(t *testing.T) {
	s := open(t, Options{})
	const vertices, subtasks = 4, 8
	var wg sync.WaitGroup
	errs := make(chan error, vertices*subtasks)
	for v := 0; v < vertices; v++ {
		for sub := int32(0); sub < subtasks; sub++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				data := bytes.Repeat([]byte(fmt.Sprintf("v%d[%d] ", v, sub)), 1000)
				rel, sum, err := s.Write(job, 5, fmt.Sprintf("v%d", v), sub, 1, data)
				if err == nil && sum != Checksum(data) {
					err = fmt.Errorf("%s: checksum %08x", rel, sum)
				}
				errs <- err
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for v := 0; v < vertices; v++ {
		for sub := int32(0); sub < subtasks; sub++ {
			rel, _ := StatePath(job, 5, fmt.Sprintf("v%d", v), sub, 1)
			got, err := s.Read(rel)
			if want := bytes.Repeat([]byte(fmt.Sprintf("v%d[%d] ", v, sub)), 1000); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s: %d bytes, %v", rel, len(got), err)
			}
		}
	}
	if tmp := leftovers(t, s); len(tmp) != 0 {
		t.Fatalf("temporary files left: %v", tmp)
	}
}

// TestStateSizeLimit: a state over the limit is neither written nor read (a header announcing
// more is refused before the payload is read); the error names the limit.
func TestStateSizeLimit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "root")
	big, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	small, err := Open(dir, Options{MaxStateBytes: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	if small.MaxStateBytes() != 100 || big.MaxStateBytes() != DefaultMaxStateBytes {
		t.Fatalf("limits %d %d", small.MaxStateBytes(), big.MaxStateBytes())
	}
	if _, _, err := small.Write(job, 1, "v", 0, 0, make([]byte, 100)); err != nil {
		t.Fatalf("a state at the limit: %v", err)
	}
	rel, _ := StatePath(job, 1, "v", 1, 0)
	_, _, err = small.Write(job, 1, "v", 1, 0, make([]byte, 101))
	mustFail(t, err, rel, ErrStateTooLarge)
	if !strings.Contains(err.Error(), "max state size") || !strings.Contains(err.Error(), "100") {
		t.Errorf("the limit is not named: %v", err)
	}
	if _, _, err := big.Write(job, 1, "v", 1, 0, make([]byte, 101)); err != nil {
		t.Fatal(err)
	}
	_, err = small.Read(rel)
	mustFail(t, err, rel, ErrStateTooLarge)
	if _, err := Open(dir, Options{MaxStateBytes: -1}); err == nil {
		t.Error("a negative limit is accepted")
	}
}
