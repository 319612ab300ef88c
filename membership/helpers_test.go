package membership

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// TestMain fails the package if any goroutine of this package or of
// memberlist outlives the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := waitNoLeaks(5 * time.Second); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines leaked after tests:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

func waitNoLeaks(timeout time.Duration) string {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		leaked := leakedGoroutines()
		if leaked == "" || time.Now().After(deadline) {
			return leaked
		}
		<-tick.C
	}
}

func leakedGoroutines() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "github.com/hashicorp/memberlist.") ||
			strings.Contains(g, "membership.(*Membership)") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}

// testWriter routes log lines to t.Log until the test's cleanups are done;
// memberlist goroutines may still log for a moment after Shutdown.
type testWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// testLogger logs at Info, or at the level named by MEMBERSHIP_TEST_LOG.
func testLogger(t testing.TB) hclog.Logger {
	return testLoggerTo(t, nil)
}

// testLoggerTo is testLogger that also writes every line to also (when not nil), at Info at
// least, whatever MEMBERSHIP_TEST_LOG says.
func testLoggerTo(t testing.TB, also io.Writer) hclog.Logger {
	tw := &testWriter{t: t}
	var w io.Writer = tw
	t.Cleanup(func() { // registered first, so it runs after every Shutdown
		tw.mu.Lock()
		tw.done = true
		tw.mu.Unlock()
	})
	level := hclog.Info
	if l := os.Getenv("MEMBERSHIP_TEST_LOG"); l != "" && also == nil {
		level = hclog.LevelFromString(l)
	}
	if also != nil {
		w = io.MultiWriter(w, also)
	}
	return hclog.New(&hclog.LoggerOptions{Output: w, Level: level})
}

// lineWatch counts the log lines that contain its word (case-insensitive) and keeps the first.
type lineWatch struct {
	word  string
	mu    sync.Mutex
	n     int
	first string
}

func (w *lineWatch) Write(p []byte) (int, error) {
	if strings.Contains(strings.ToLower(string(p)), w.word) {
		w.mu.Lock()
		if w.n == 0 {
			w.first = strings.TrimRight(string(p), "\n")
		}
		w.n++
		w.mu.Unlock()
	}
	return len(p), nil
}

func (w *lineWatch) seen() (int, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n, w.first
}

// waitFor polls cond until it holds or timeout passes, then fails the test
// with the last thing cond saw.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, seen := cond()
		if ok {
			return
		}
		select {
		case <-deadline.C:
			t.Fatalf("timed out after %s waiting for %s; last seen: %s", timeout, what, seen)
		case <-tick.C:
		}
	}
}

// waitEvent reads ch until an event matches, failing after timeout with
// the events it skipped.
func waitEvent(t testing.TB, ch <-chan Event, timeout time.Duration, what string, match func(Event) bool) Event {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	var seen []string
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("event channel closed waiting for %s; seen: %v", what, seen)
			}
			if match(ev) {
				return ev
			}
			seen = append(seen, ev.Kind.String()+":"+ev.Member.Name)
		case <-deadline.C:
			t.Fatalf("timed out after %s waiting for %s; seen: %v", timeout, what, seen)
		}
	}
}

var testLogs sync.Map // one logger per test, shared by its nodes

func loggerFor(t testing.TB) hclog.Logger {
	if l, ok := testLogs.Load(t); ok {
		return l.(hclog.Logger)
	}
	l := testLogger(t)
	testLogs.Store(t, l)
	t.Cleanup(func() { testLogs.Delete(t) })
	return l
}

// newNode starts a node with the test profile; edit may change its config.
// It is shut down when the test ends.
func newNode(t testing.TB, meta Meta, edit func(*Config)) *Membership {
	t.Helper()
	cfg := TestConfig(meta)
	cfg.Logger = loggerFor(t)
	if edit != nil {
		edit(&cfg)
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%s): %v", meta.ID, err)
	}
	t.Cleanup(func() {
		if err := m.Shutdown(); err != nil {
			t.Errorf("Shutdown(%s): %v", meta.ID, err)
		}
	})
	return m
}

func jm(id string) Meta {
	return Meta{Role: RoleJobMaster, ID: id, GRPCAddr: "127.0.0.1:9" + id[len(id)-1:], Version: "test"}
}

func tm(id string, slots int32) Meta {
	return Meta{Role: RoleTaskManager, ID: id, GRPCAddr: "127.0.0.1:8" + id[len(id)-1:],
		DataAddr: "127.0.0.1:7" + id[len(id)-1:], Slots: slots, Version: "test"}
}

// describe renders members for failure messages.
func describe(ms []Member) string {
	parts := make([]string, 0, len(ms))
	for _, m := range ms {
		parts = append(parts, fmt.Sprintf("%s/%s/%s/e%d", m.Name, m.State, m.Meta.Role, m.Meta.Epoch))
	}
	return strings.Join(parts, " ")
}

func names(ms []Member) string {
	parts := make([]string, 0, len(ms))
	for _, m := range ms {
		parts = append(parts, m.Name)
	}
	return strings.Join(parts, ",")
}

// memberNamed returns the member called name as seen by m.
func memberNamed(m *Membership, name string) (Member, bool) {
	for _, mb := range m.Members() {
		if mb.Name == name {
			return mb, true
		}
	}
	return Member{}, false
}
