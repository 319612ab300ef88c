package wasmhost

import (
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// The bounds of what a module writes to stdout and stderr (and logs through the host's log
// function), per instance: the TaskManager's log takes it line by line, each line labelled
// with the module and function, cut at MaxLogLineBytes; past MaxLogBytesPerInterval in a
// LogInterval the lines are dropped and counted, and the count is logged once the interval
// ends.
const (
	MaxLogLineBytes        = 1024
	MaxLogBytesPerInterval = 64 << 10
	LogInterval            = 10 * time.Second
	// tailLines is how many of its last stderr lines an error of a failed call quotes from.
	tailLines = 16
)

// logWriter is an io.Writer of one stream of one instance into the task's logger.
type logWriter struct {
	mu      sync.Mutex
	lg      hclog.Logger
	stream  string
	line    []byte
	cut     bool
	start   time.Time
	used    int
	dropped int
	tail    []string // the last lines, for an error
	head    []string // the first lines since mark, for an error
}

func newLogWriter(lg hclog.Logger, stream string) *logWriter {
	return &logWriter{lg: lg, stream: stream}
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range p {
		if c == '\n' {
			w.flushLine()
			continue
		}
		if len(w.line) < MaxLogLineBytes {
			w.line = append(w.line, c)
		} else {
			w.cut = true
		}
	}
	return len(p), nil
}

// flushLine logs the line held, within the interval's budget. w.mu is held.
func (w *logWriter) flushLine() {
	s := string(w.line)
	if w.cut {
		s += " …(cut at MaxLogLineBytes)"
	}
	w.line, w.cut = w.line[:0], false
	w.tail = append(w.tail, s)
	if len(w.head) < tailLines {
		w.head = append(w.head, s)
	}
	if len(w.tail) > tailLines {
		w.tail = w.tail[1:]
	}
	now := time.Now()
	if now.Sub(w.start) >= LogInterval {
		if w.dropped > 0 {
			w.lg.Warn("module output dropped: over MaxLogBytesPerInterval", "stream", w.stream, "bytes", w.dropped, "limit", MaxLogBytesPerInterval, "interval", LogInterval)
		}
		w.start, w.used, w.dropped = now, 0, 0
	}
	if w.used+len(s) > MaxLogBytesPerInterval {
		w.dropped += len(s)
		return
	}
	w.used += len(s)
	w.lg.Info(s, "stream", w.stream)
}

// finish logs a last line without its newline.
func (w *logWriter) finish() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.line) > 0 {
		w.flushLine()
	}
}

// mark is where the tail is now, for cause.
func (w *logWriter) mark() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.tail, w.head = w.tail[:0], w.head[:0]
	return 0
}

// cause is what the module wrote to the stream since mark that explains a failure: the first
// line of a Go panic or fatal error and the next one, else the last line; "" for none.
func (w *logWriter) cause() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.line) > 0 {
		w.tail = append(w.tail, string(w.line))
	}
	for _, ls := range [][]string{w.head, w.tail} {
		for _, l := range ls {
			if strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "fatal error: ") {
				return l
			}
		}
	}
	if len(w.tail) > 0 {
		return w.tail[len(w.tail)-1]
	}
	return ""
}
