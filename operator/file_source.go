package operator

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/transport/pb"
)

func init() {
	register("file_source", runtime{source: func(op *pb.Operator, info Info) Source { return newFileSource(op.GetFileSource(), info) }})
}

// ErrLineTooLong: a file source met a line longer than its max_line_bytes.
var ErrLineTooLong = errors.New("line too long")

// fileSource emits the lines of the files its glob matches (operator/DESIGN.md, File
// source). It has one split per subtask, whose position is the number of lines the subtask
// emitted (each record's Seq, Origin the subtask); which files there are and how far each
// was read is its own state (ownStateSource): the byte offset of the next line of each file
// of this subtask. A file belongs to subtask fnv32a(name) % parallelism, so a file found
// after a restore goes to the same subtask.
type fileSource struct {
	glob      string // as configured; a relative one is relative to dir
	dir       string // the work directory ("" for an absolute glob)
	poll      time.Duration
	keyName   bool
	maxLine   int
	streaming bool
	subtask   int32
	par       int32
	log       hclog.Logger

	offsets map[string]int64 // file name (as the glob gives it) -> offset of its next line
	cur     fileLine         // the line being emitted
}

// fileLine is the line in flight: at [start, end) of file, emitted at position pos.
type fileLine struct {
	file       string
	start, end int64
	pos        int64
	set        bool
}

// fileSourceState is the file source's own state: {"files":{"in/a.jsonl":1234,...}}.
type fileSourceState struct {
	Files map[string]int64 `json:"files"`
}

func newFileSource(cfg *pb.FileSource, info Info) *fileSource {
	s := &fileSource{
		glob: cfg.GetPath(), keyName: cfg.GetKeyFileName(),
		poll:      time.Duration(cfg.GetPollIntervalMs()) * time.Millisecond,
		maxLine:   int(cfg.GetMaxLineBytes()),
		streaming: info.JobType != pb.JobType_JOB_TYPE_BATCH,
		subtask:   info.Subtask, par: max(info.Parallelism, info.Subtask+1, 1),
		log: info.Logger, offsets: map[string]int64{},
	}
	if s.poll == 0 {
		s.poll = graph.DefaultFileSourcePollMs * time.Millisecond
	}
	if s.maxLine == 0 {
		s.maxLine = graph.DefaultFileSourceLineBytes
	}
	if !filepath.IsAbs(s.glob) {
		s.dir = info.workDir()
	}
	if s.log == nil {
		s.log = hclog.NewNullLogger()
	}
	return s
}

// Splits is one split per subtask, without end.
func (s *fileSource) Splits(parallelism int32) []Split {
	out := make([]Split, parallelism)
	for i := range out {
		out[i] = Split{ID: int32(i)}
	}
	return out
}

// owner is the subtask that reads the file name.
func (s *fileSource) owner(name string) int32 {
	h := fnv.New32a()
	h.Write([]byte(name))
	return int32(h.Sum32() % uint32(s.par))
}

// files returns the names of this subtask's files the glob matches now, in name order.
func (s *fileSource) files() ([]string, error) {
	names, err := filepath.Glob(filepath.Join(s.dir, s.glob))
	if err != nil {
		return nil, fmt.Errorf("file_source.path %q: %w", s.glob, err)
	}
	var mine []string
	for _, n := range names {
		if s.dir != "" {
			if n, err = filepath.Rel(s.dir, n); err != nil {
				return nil, err
			}
		}
		if s.owner(n) == s.subtask {
			mine = append(mine, n)
		}
	}
	return mine, nil
}

// Read reads every file of this subtask to its end; a STREAMING source then looks for new
// files and new lines every poll interval until the task ends, a BATCH one returns.
func (s *fileSource) Read(sc *SourceContext, splits []Split) error {
	if len(splits) == 0 {
		return nil
	}
	seq := splits[0].Next
	for {
		names, err := s.files()
		if err != nil {
			return err
		}
		for _, n := range names {
			if err := s.readFile(sc, n, &seq); err != nil {
				return err
			}
		}
		if !s.streaming {
			return nil
		}
		if err := sc.Wait(s.poll); err != nil {
			return err
		}
	}
}

// readFile emits the lines of file name from its offset on: to its end in a BATCH job (the
// last line may lack its newline), up to its last newline in a STREAMING one (a line being
// written is read once it is whole).
func (s *fileSource) readFile(sc *SourceContext, name string, seq *int64) error {
	path := filepath.Join(s.dir, name)
	st, err := os.Stat(path) // a poll opens only the files that changed
	if errors.Is(err, fs.ErrNotExist) {
		return nil // removed since the glob
	}
	if err != nil {
		return fmt.Errorf("file_source: %w", err)
	}
	if st.IsDir() {
		return nil
	}
	off, known := s.offsets[name]
	if !known {
		if len(s.offsets) >= graph.MaxFileSourceFiles {
			return fmt.Errorf("file_source.path %q: subtask %d reads more than MaxFileSourceFiles %d files", s.glob, s.subtask, graph.MaxFileSourceFiles)
		}
		s.offsets[name] = 0
	}
	if st.Size() < off {
		s.log.Warn("file_source: a file is shorter than its offset (truncated or replaced): read again from its start", "file", name, "size", st.Size(), "offset", off)
		off, s.offsets[name] = 0, 0
	}
	if st.Size() == off {
		return nil
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("file_source: %w", err)
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return fmt.Errorf("file_source: %w", err)
	}
	var key []byte
	if s.keyName {
		key = []byte(filepath.Base(name))
	}
	r := bufio.NewReaderSize(f, 64<<10)
	for {
		line, n, whole, err := readLine(r, s.maxLine)
		if errors.Is(err, ErrLineTooLong) {
			return fmt.Errorf("file_source: %s, the line at byte %d: %w: over max_line_bytes %d (MaxFileSourceLineBytes %d)", name, off, err, s.maxLine, graph.MaxFileSourceLineBytes)
		}
		if err != nil {
			return fmt.Errorf("file_source: %s: %w", name, err)
		}
		if n == 0 || (!whole && s.streaming) {
			return nil
		}
		pos := *seq
		s.cur = fileLine{file: name, start: off, end: off + n, pos: pos, set: true}
		rec := Record{Key: key, Value: line, Time: NoTimestamp, Origin: s.subtask, Seq: pos}
		if err := sc.Emit(0, pos, rec); err != nil {
			return err
		}
		off += n
		s.offsets[name], s.cur.set = off, false
		*seq = pos + 1
		if !whole {
			return nil
		}
	}
}

// readLine reads the next line of r: its bytes without the newline ("\n" or "\r\n", in a new
// slice), the bytes it takes in the file n, and whole when it ends with a newline (false at
// the end of the file; n 0 at the end). A line longer than max is ErrLineTooLong.
func readLine(r *bufio.Reader, max int) (line []byte, n int64, whole bool, err error) {
	for {
		frag, err := r.ReadSlice('\n')
		line = append(line, frag...)
		if len(line) > max+2 {
			return nil, 0, false, ErrLineTooLong
		}
		switch {
		case err == nil:
			n = int64(len(line))
			line = bytes.TrimSuffix(line[:len(line)-1], []byte{'\r'})
			if len(line) > max {
				return nil, 0, false, ErrLineTooLong
			}
			return line, n, true, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if len(line) > max {
				return nil, 0, false, ErrLineTooLong
			}
			return line, int64(len(line)), false, nil
		default:
			return nil, 0, false, err
		}
	}
}

// snapshotSource is the offset of each file of this subtask; the line in flight counts as
// read when its split's position is past it (the barrier came after it).
func (s *fileSource) snapshotSource(splits []Split) (json.RawMessage, error) {
	st := fileSourceState{Files: make(map[string]int64, len(s.offsets))}
	for n, off := range s.offsets {
		st.Files[n] = off
	}
	if c := s.cur; c.set && len(splits) > 0 && splits[0].Next > c.pos {
		st.Files[c.file] = c.end
	}
	return json.Marshal(st)
}

// restoreSource takes the offsets of a snapshot; each file must be this subtask's (the job
// restored with the checkpoint's parallelism).
func (s *fileSource) restoreSource(b json.RawMessage) error {
	var st fileSourceState
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("file_source state: %w", err)
	}
	if len(st.Files) > graph.MaxFileSourceFiles {
		return fmt.Errorf("file_source state: %d files, over MaxFileSourceFiles %d", len(st.Files), graph.MaxFileSourceFiles)
	}
	for n, off := range st.Files {
		switch {
		case off < 0:
			return fmt.Errorf("file_source state: %s: offset %d is negative", n, off)
		case s.owner(n) != s.subtask:
			return fmt.Errorf("file_source state: %s belongs to subtask %d of %d, not to %d (restore with the checkpoint's parallelism)", n, s.owner(n), s.par, s.subtask)
		}
		s.offsets[n] = off
	}
	return nil
}
