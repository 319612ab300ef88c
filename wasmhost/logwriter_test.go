package wasmhost

import (
	"bytes"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// TestModuleOutputIsBounded: a line is cut at MaxLogLineBytes, the lines past
// MaxLogBytesPerInterval in an interval are dropped (not logged), and a failure's cause is the
// first panic or fatal error line since the call began.
func TestModuleOutputIsBounded(t *testing.T) {
	var buf bytes.Buffer
	w := newLogWriter(hclog.New(&hclog.LoggerOptions{Output: &buf}), "stderr")
	_, _ = w.Write([]byte(strings.Repeat("x", 3*MaxLogLineBytes) + "\n"))
	if got := buf.String(); !strings.Contains(got, strings.Repeat("x", MaxLogLineBytes)+" …(cut at MaxLogLineBytes)") || strings.Contains(got, strings.Repeat("x", MaxLogLineBytes+1)) {
		t.Errorf("a long line logged as %q", got)
	}
	buf.Reset()
	line := strings.Repeat("y", 1000) + "\n"
	for range 2 * MaxLogBytesPerInterval / 1000 {
		_, _ = w.Write([]byte(line))
	}
	if n := strings.Count(buf.String(), strings.Repeat("y", 1000)); n > MaxLogBytesPerInterval/1000 || n == 0 {
		t.Errorf("%d lines of 1000 bytes logged in one interval, want at most %d", n, MaxLogBytesPerInterval/1000)
	}
	if w.dropped == 0 {
		t.Error("no bytes counted as dropped")
	}
	w.mark()
	_, _ = w.Write([]byte("starting\npanic: it broke\n\ngoroutine 1 [running]:\n"))
	if c := w.cause(); c != "panic: it broke" {
		t.Errorf("cause %q", c)
	}
}
