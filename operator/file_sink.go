package operator

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/jmcluster/jmcluster/transport/pb"
)

func init() {
	register("file_sink", runtime{
		sink: func(op *pb.Operator, info Info, p string) Sink {
			return &fileSink{dir: info.workDir(), path: p, format: op.GetFileSink().GetFormat(),
				checkpointed: info.Checkpointed, restoredID: info.RestoredCheckpoint}
		},
		files: func(p string) []string { return []string{p} },
	})
}

// fileFlushEvery bounds how long appended lines stay in the file sink's buffer.
const fileFlushEvery = 200 * time.Millisecond

// fileSink appends a line per record to a file inside dir (appendLine).
type fileSink struct {
	dir       string // the work directory
	path      string // relative to dir, checked by SinkPath
	format    pb.FileSinkFormat
	f         *os.File
	w         *bufio.Writer
	lastFlush time.Time
	line      []byte // the line being written, reused

	// Two-phase commit (a checkpointed job; filecommit.go): lines are kept in pending until a
	// barrier stages them as the segment of its checkpoint, and a segment is written as a part
	// file once a checkpoint at or after it completed.
	checkpointed bool
	restoredID   uint64
	restored     []fileSegment // the uncommitted segments of the restored checkpoint
	root         *os.Root
	pending      []byte
	commitMu     sync.Mutex
	staged       []fileSegment
	committed    uint64
}

func (s *fileSink) Open(context.Context) error {
	root, err := os.OpenRoot(s.dir)
	if err != nil {
		return fmt.Errorf("file sink: work dir: %w", err)
	}
	if err := mkdirParent(root, s.path); err != nil {
		_ = root.Close()
		return fmt.Errorf("file sink: %w", err)
	}
	if s.checkpointed {
		s.root = root // parts are written through it until Close
		return s.openCommitted()
	}
	defer root.Close() // the file stays open
	f, err := root.OpenFile(s.path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("file sink: %w", err)
	}
	s.f, s.w, s.lastFlush = f, bufio.NewWriterSize(f, 64<<10), time.Now()
	return nil
}

// mkdirParent creates the parent directories of path inside root.
func mkdirParent(root *os.Root, path string) error {
	if d := filepath.Dir(path); d != "." {
		return root.MkdirAll(d, 0o755)
	}
	return nil
}

func (s *fileSink) Write(r Record) error {
	var err error
	if s.checkpointed {
		s.pending, err = appendLine(s.pending, &r, s.format)
		return err
	}
	if s.line, err = appendLine(s.line[:0], &r, s.format); err != nil {
		return err
	}
	if _, err := s.w.Write(s.line); err != nil {
		return fmt.Errorf("file sink: %w", err)
	}
	if time.Since(s.lastFlush) >= fileFlushEvery {
		s.lastFlush = time.Now()
		return s.w.Flush()
	}
	return nil
}

func (s *fileSink) Finish() error {
	if s.checkpointed {
		return s.finishCommitted()
	}
	if err := s.w.Flush(); err != nil {
		return fmt.Errorf("file sink: %w", err)
	}
	return s.f.Sync()
}

func (s *fileSink) Close() error {
	s.commitMu.Lock() // a commit may be writing a part through the root (checksumSink.Close)
	if s.root != nil {
		_ = s.root.Close()
		s.root = nil
	}
	s.commitMu.Unlock()
	if s.f == nil {
		return nil
	}
	_ = s.w.Flush()
	err := s.f.Close()
	s.f = nil
	return err
}

// appendLine appends r's line in format f: by default "key value", each a number when numeric
// (8 bytes) and a quoted string otherwise; FILE_SINK_FORMAT_VALUE the value's bytes;
// FILE_SINK_FORMAT_KEY_TAB_VALUE the key's bytes, a tab and the value's bytes. Raw bytes that
// would break the line (a newline or carriage return, and a tab in a key before a tab) are
// refused with an error naming the record; b is then unchanged.
func appendLine(b []byte, r *Record, f pb.FileSinkFormat) ([]byte, error) {
	switch f {
	case pb.FileSinkFormat_FILE_SINK_FORMAT_VALUE:
		if bytes.ContainsAny(r.Value, "\n\r") {
			return b, fmt.Errorf("file sink: record (origin %d, seq %d): its value holds a newline or carriage return, which format VALUE cannot write on one line", r.Origin, r.Seq)
		}
		b = append(b, r.Value...)
	case pb.FileSinkFormat_FILE_SINK_FORMAT_KEY_TAB_VALUE:
		if bytes.ContainsAny(r.Key, "\t\n\r") || bytes.ContainsAny(r.Value, "\n\r") {
			return b, fmt.Errorf("file sink: record (origin %d, seq %d): its key holds a tab, newline or carriage return, or its value a newline or carriage return, which format KEY_TAB_VALUE cannot write on one line", r.Origin, r.Seq)
		}
		b = append(b, r.Key...)
		b = append(b, '\t')
		b = append(b, r.Value...)
	default:
		b = appendField(b, r.Key)
		b = append(b, ' ')
		b = appendField(b, r.Value)
	}
	return append(b, '\n'), nil
}

func appendField(b, f []byte) []byte {
	if n, ok := Int64Of(f); ok {
		return strconv.AppendInt(b, n, 10)
	}
	return strconv.AppendQuote(b, string(f))
}
