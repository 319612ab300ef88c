// Package checkpoint stores the state tasks write for a checkpoint: one file per task state,
// under a root directory that every TaskManager which may restore the state can reach (a
// shared volume). A file is written atomically and carries a header with a CRC-32C of its
// payload, so a reader knows it holds the whole state a task wrote, or says why not. Layout,
// format and invariants: DESIGN.md.
package checkpoint

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

const (
	// FormatVersion is the version written in every state file's header.
	FormatVersion = 1
	// HeaderSize is the length of the header: magic (4 bytes), format version (4), CRC-32C of
	// the payload (4), payload length (8), big-endian.
	HeaderSize = 20
	// DefaultMaxStateBytes is the largest state a Store writes or reads unless told otherwise.
	DefaultMaxStateBytes = 256 << 20
	// stateSuffix ends every state file's name; a temporary file starts with a dot.
	stateSuffix = ".state"
	// chkPrefix starts the name of a checkpoint's directory.
	chkPrefix = "chk-"
)

// magic starts every state file.
var magic = [4]byte{'J', 'M', 'C', 'S'}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum returns the CRC-32C (Castagnoli) of a state's payload: what the header holds and a
// task's acknowledgement reports.
func Checksum(data []byte) uint32 { return crc32.Checksum(data, castagnoli) }

// The causes a StateError wraps.
var (
	ErrStateMissing     = errors.New("no such state")
	ErrStateTruncated   = errors.New("state is truncated")
	ErrChecksumMismatch = errors.New("state checksum mismatch")
	ErrStateCorrupt     = errors.New("not a state file of a known format")
	ErrInvalidPath      = errors.New("not a path under the checkpoint storage root")
	ErrStateTooLarge    = errors.New("state is over the size limit")
)

// StateError is a failure to write or read one state: the path (relative to the root, or what
// the caller gave), the cause (one of the Err* above, or an I/O error) and what was found.
type StateError struct {
	Path   string
	Err    error
	Detail string
}

func (e *StateError) Error() string {
	return "checkpoint state " + strconv.Quote(e.Path) + ": " + e.cause()
}

func (e *StateError) Unwrap() error { return e.Err }

func stateErr(p string, err error, format string, args ...any) error {
	return &StateError{Path: p, Err: err, Detail: fmt.Sprintf(format, args...)}
}

// Options configure a Store. Zero values mean the defaults.
type Options struct {
	// MaxStateBytes bounds one task's state (DefaultMaxStateBytes).
	MaxStateBytes int64
}

// Store reads and writes task states under a root directory. It is safe for concurrent use;
// writers of different tasks never share a file.
type Store struct {
	dir  string
	root *os.Root
	max  int64
}

// Open opens (creating it if needed) the storage root dir.
func Open(dir string, opts Options) (*Store, error) {
	if opts.MaxStateBytes < 0 {
		return nil, fmt.Errorf("checkpoint: negative max state size %d", opts.MaxStateBytes)
	}
	if opts.MaxStateBytes == 0 {
		opts.MaxStateBytes = DefaultMaxStateBytes
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("checkpoint: storage root: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: storage root: %w", err)
	}
	return &Store{dir: dir, root: root, max: opts.MaxStateBytes}, nil
}

// Close releases the root.
func (s *Store) Close() error { return s.root.Close() }

// Dir returns the storage root.
func (s *Store) Dir() string { return s.dir }

// MaxStateBytes returns the largest state the store writes or reads.
func (s *Store) MaxStateBytes() int64 { return s.max }

// checkName checks one path element of the layout: a job or vertex id.
func checkName(what, name string) error {
	if name == "" || name == "." || name == ".." || len(name) > 255 {
		return fmt.Errorf("%w: %s %q is not a file name", ErrInvalidPath, what, name)
	}
	for _, c := range name {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '.', c == '-':
		default:
			return fmt.Errorf("%w: %s %q has a character other than letters, digits, '_', '.' and '-'", ErrInvalidPath, what, name)
		}
	}
	return nil
}

// CheckpointDir returns the directory of a job's checkpoint, relative to the root:
// <job>/chk-<id>.
func CheckpointDir(job string, id uint64) (string, error) {
	if err := checkName("job id", job); err != nil {
		return "", err
	}
	if id == 0 {
		return "", fmt.Errorf("%w: checkpoint id 0 (ids start at 1)", ErrInvalidPath)
	}
	return job + "/" + chkPrefix + strconv.FormatUint(id, 10), nil
}

// StatePath returns where a task's state for a checkpoint is, relative to the root:
// <job>/chk-<id>/<vertex>-<subtask>-<attempt>.state.
func StatePath(job string, id uint64, vertex string, subtask, attempt int32) (string, error) {
	dir, err := CheckpointDir(job, id)
	if err != nil {
		return "", err
	}
	if err := checkName("vertex id", vertex); err != nil {
		return "", err
	}
	if subtask < 0 || attempt < 0 {
		return "", fmt.Errorf("%w: subtask %d attempt %d", ErrInvalidPath, subtask, attempt)
	}
	return fmt.Sprintf("%s/%s-%d-%d%s", dir, vertex, subtask, attempt, stateSuffix), nil
}

// Write stores a task's state for a checkpoint atomically: a temporary file in the checkpoint's
// directory, synced, renamed over the state's name, and the directory synced, so a reader finds
// either no state or all of it. It returns the path to acknowledge (relative to the root) and
// the payload's CRC-32C.
func (s *Store) Write(job string, id uint64, vertex string, subtask, attempt int32, data []byte) (relPath string, checksum uint32, err error) {
	rel, err := StatePath(job, id, vertex, subtask, attempt)
	if err != nil {
		return "", 0, err
	}
	if int64(len(data)) > s.max {
		return "", 0, stateErr(rel, ErrStateTooLarge, "%d bytes, the limit (max state size) is %d", len(data), s.max)
	}
	dir := path.Dir(rel)
	if err := s.mkdirs(job, dir); err != nil {
		return "", 0, stateErr(rel, err, "create its directory")
	}
	var suffix [8]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		return "", 0, stateErr(rel, err, "name a temporary file")
	}
	tmp := dir + "/." + path.Base(rel) + ".tmp-" + hex.EncodeToString(suffix[:])
	checksum = Checksum(data)
	if err := createFile(s.root, tmp, checksum, data, true); err != nil {
		_ = s.root.Remove(filepath.FromSlash(tmp))
		return "", 0, stateErr(rel, err, "write")
	}
	if err := s.root.Rename(filepath.FromSlash(tmp), filepath.FromSlash(rel)); err != nil {
		_ = s.root.Remove(filepath.FromSlash(tmp))
		return "", 0, stateErr(rel, err, "rename into place")
	}
	if err := s.syncDir(dir); err != nil {
		return "", 0, stateErr(rel, err, "sync its directory")
	}
	return rel, checksum, nil
}

// createFile writes the header and the payload to a new file under root, and syncs it if told
// to.
func createFile(root *os.Root, name string, checksum uint32, data []byte, sync bool) error {
	f, err := root.OpenFile(filepath.FromSlash(name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	var h [HeaderSize]byte
	copy(h[:4], magic[:])
	binary.BigEndian.PutUint32(h[4:8], FormatVersion)
	binary.BigEndian.PutUint32(h[8:12], checksum)
	binary.BigEndian.PutUint64(h[12:20], uint64(len(data)))
	_, err = f.Write(h[:])
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// mkdirs creates the job's and the checkpoint's directories if they are missing, syncing the
// parent of each one it creates (so the new entry survives a crash with the file in it).
func (s *Store) mkdirs(job, dir string) error {
	parent := "."
	for _, d := range []string{job, dir} {
		err := s.root.Mkdir(filepath.FromSlash(d), 0o755)
		switch {
		case err == nil:
			if err := s.syncDir(parent); err != nil {
				return err
			}
		case !errors.Is(err, fs.ErrExist):
			return err
		}
		parent = d
	}
	return nil
}

func (s *Store) syncDir(dir string) error {
	d, err := s.root.Open(filepath.FromSlash(dir))
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// syncRoot syncs the directory a root is opened on.
func syncRoot(r *os.Root) error {
	d, err := r.Open(".")
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// checkRel checks a path given to Read: clean, relative, inside the root lexically (a symlink
// out of the root is refused by the root itself).
func checkRel(rel string) error {
	if rel == "" || rel == "." || !filepath.IsLocal(filepath.FromSlash(rel)) || path.Clean(rel) != rel || strings.Contains(rel, `\`) {
		return stateErr(rel, ErrInvalidPath, "absolute, with '..', or not clean")
	}
	return nil
}

// Read returns the payload of a state, checking its header (magic, format version, length
// within the size limit) and its checksum. Every error is a *StateError naming the path and
// the cause: ErrStateMissing, ErrStateTruncated, ErrChecksumMismatch, ErrStateCorrupt,
// ErrInvalidPath or ErrStateTooLarge.
func (s *Store) Read(relPath string) ([]byte, error) {
	data, _, err := s.read(relPath, true)
	return data, err
}

// ReadChecksum is Read of a state a checkpoint acknowledged with a checksum: a valid file
// that holds another state than the acknowledged one (its checksum differs) is refused too.
func (s *Store) ReadChecksum(relPath string, checksum uint32) ([]byte, error) {
	data, got, err := s.read(relPath, true)
	if err != nil {
		return nil, err
	}
	if got != checksum {
		return nil, stateErr(relPath, ErrChecksumMismatch, "the checkpoint acknowledged CRC-32C %08x, the file holds %08x", checksum, got)
	}
	return data, nil
}

// ReadUnverified is Read without the checksum: the header, the length and the limit are
// checked, the payload's CRC-32C is not. Only the planted bug restore-unverified reads so.
func (s *Store) ReadUnverified(relPath string) ([]byte, error) {
	data, _, err := s.read(relPath, false)
	return data, err
}

func (s *Store) read(rel string, verify bool) ([]byte, uint32, error) {
	if err := checkRel(rel); err != nil {
		return nil, 0, err
	}
	f, err := s.root.Open(filepath.FromSlash(rel))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, 0, stateErr(rel, ErrStateMissing, "under %s", s.dir)
	case err != nil && strings.Contains(err.Error(), "escapes"):
		// os.Root's refusal of a symbolic link out of the root (its error is not exported).
		return nil, 0, stateErr(rel, ErrInvalidPath, "%v", err)
	case err != nil:
		return nil, 0, stateErr(rel, err, "open")
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, stateErr(rel, err, "stat")
	}
	if fi.IsDir() {
		return nil, 0, stateErr(rel, ErrStateCorrupt, "a directory")
	}
	if !fi.Mode().IsRegular() {
		return nil, 0, stateErr(rel, ErrStateCorrupt, "not a regular file (mode %s)", fi.Mode())
	}
	var h [HeaderSize]byte
	if _, err := io.ReadFull(f, h[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, 0, stateErr(rel, ErrStateTruncated, "%d bytes, shorter than the %d-byte header", fi.Size(), HeaderSize)
		}
		return nil, 0, stateErr(rel, err, "read the header")
	}
	if [4]byte(h[:4]) != magic {
		return nil, 0, stateErr(rel, ErrStateCorrupt, "magic %q, want %q", h[:4], magic[:])
	}
	if v := binary.BigEndian.Uint32(h[4:8]); v != FormatVersion {
		return nil, 0, stateErr(rel, ErrStateCorrupt, "format version %d, this build reads %d", v, FormatVersion)
	}
	sum, n := binary.BigEndian.Uint32(h[8:12]), binary.BigEndian.Uint64(h[12:20])
	if n > uint64(s.max) {
		return nil, 0, stateErr(rel, ErrStateTooLarge, "the header says %d bytes, the limit (max state size) is %d", n, s.max)
	}
	switch have := fi.Size() - HeaderSize; {
	case have < int64(n):
		return nil, 0, stateErr(rel, ErrStateTruncated, "the header says %d payload bytes, the file has %d", n, have)
	case have > int64(n):
		return nil, 0, stateErr(rel, ErrStateCorrupt, "the header says %d payload bytes, the file has %d", n, have)
	}
	data := make([]byte, n)
	if _, err := io.ReadFull(f, data); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, 0, stateErr(rel, ErrStateTruncated, "the file ended before the %d payload bytes its header announces", n)
		}
		return nil, 0, stateErr(rel, err, "read")
	}
	if !verify {
		return data, sum, nil
	}
	if got := Checksum(data); got != sum {
		return nil, 0, stateErr(rel, ErrChecksumMismatch, "the header says CRC-32C %08x, the payload has %08x", sum, got)
	}
	return data, sum, nil
}

// Delete removes a checkpoint's directory and every state in it (temporary files of writers
// that never finished too). Deleting a checkpoint that is not there is not an error.
func (s *Store) Delete(job string, id uint64) error {
	dir, err := CheckpointDir(job, id)
	if err != nil {
		return err
	}
	if err := s.root.RemoveAll(filepath.FromSlash(dir)); err != nil {
		return fmt.Errorf("checkpoint: delete %s: %w", dir, err)
	}
	if err := s.syncDir(job); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("checkpoint: delete %s: sync %s: %w", dir, job, err)
	}
	return nil
}

// DeleteJob removes every checkpoint of a job (a job removed from the cluster). Idempotent.
func (s *Store) DeleteJob(job string) error {
	if err := checkName("job id", job); err != nil {
		return err
	}
	if err := s.root.RemoveAll(job); err != nil {
		return fmt.Errorf("checkpoint: delete job %s: %w", job, err)
	}
	if err := s.syncDir("."); err != nil {
		return fmt.Errorf("checkpoint: delete job %s: sync the root: %w", job, err)
	}
	return nil
}

// Checkpoints lists the ids of a job's checkpoint directories, in order: what a leader
// compares with the committed checkpoints to delete what an earlier leader left behind (a
// checkpoint aborted or dropped while no one deleted it). None for a job without any.
func (s *Store) Checkpoints(job string) ([]uint64, error) {
	if err := checkName("job id", job); err != nil {
		return nil, err
	}
	d, err := s.root.Open(job)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: list %s: %w", job, err)
	}
	defer d.Close()
	entries, err := d.ReadDir(-1)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: list %s: %w", job, err)
	}
	var ids []uint64
	for _, e := range entries {
		if id, err := strconv.ParseUint(strings.TrimPrefix(e.Name(), chkPrefix), 10, 64); e.IsDir() && strings.HasPrefix(e.Name(), chkPrefix) && err == nil && id > 0 {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}
