package graph

import (
	"path/filepath"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// The file source's defaults and bounds.
const (
	// DefaultFileSourcePollMs is file_source.poll_interval_ms when it is 0.
	DefaultFileSourcePollMs = 1000
	// MinFileSourcePollMs and MaxFileSourcePollMs bound file_source.poll_interval_ms: a
	// STREAMING source looks for new files and lines at least once an hour, and lists its
	// directory at most every 10 ms.
	MinFileSourcePollMs = 10
	MaxFileSourcePollMs = 3_600_000
	// DefaultFileSourceLineBytes is file_source.max_line_bytes when it is 0 (the TaskManager's
	// default maximum record size).
	DefaultFileSourceLineBytes = 1 << 20
	// MaxFileSourceLineBytes bounds file_source.max_line_bytes (a line is held in memory whole).
	MaxFileSourceLineBytes = 64 << 20
	// MaxFileSourceFiles bounds the files a file source subtask reads (their offsets are its
	// checkpointed state).
	MaxFileSourceFiles = 100_000
	// MaxFileSourcePathBytes bounds the length of file_source.path.
	MaxFileSourcePathBytes = 4096
)

func validateFileSource(op *pb.Operator, _ OperatorEnv, add addFunc) {
	s := op.GetFileSource()
	switch p := s.GetPath(); {
	case p == "":
		add("file_source.path", "is empty")
	case len(p) > MaxFileSourcePathBytes:
		add("file_source.path", "is %d bytes, over MaxFileSourcePathBytes %d", len(p), MaxFileSourcePathBytes)
	default:
		if _, err := filepath.Match(p, ""); err != nil {
			add("file_source.path", "%q is not a valid glob: %v", p, err)
		}
	}
	if ms := s.GetPollIntervalMs(); ms != 0 && (ms < MinFileSourcePollMs || ms > MaxFileSourcePollMs) {
		add("file_source.poll_interval_ms", "%d is out of range [MinFileSourcePollMs %d, MaxFileSourcePollMs %d] (0: %d)",
			ms, MinFileSourcePollMs, MaxFileSourcePollMs, DefaultFileSourcePollMs)
	}
	if n := s.GetMaxLineBytes(); n < 0 || n > MaxFileSourceLineBytes {
		add("file_source.max_line_bytes", "%d is out of range [0, MaxFileSourceLineBytes %d] (0: %d)",
			n, MaxFileSourceLineBytes, DefaultFileSourceLineBytes)
	}
}
