// Package pgtest starts a real PostgreSQL server for a test (internal/pgserver): a cluster
// of its own in a new directory, on a free loopback port, stopped and removed when the test
// ends. A machine without PostgreSQL fails the test with how to install it.
package pgtest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/jmcluster/jmcluster/internal/pgserver"
)

// logTail is how much of the server's log a failed test shows.
const logTail = 4 << 10

// Start starts a server for t with max_prepared_transactions at its default and fsync off.
func Start(t testing.TB) *pgserver.Server {
	t.Helper()
	return StartWith(t, pgserver.Options{})
}

// StartWith starts a server for t with o and fsync off (its Dir is set here: a new directory
// outside t.TempDir, whose parent the server's user could not enter when run as root; without
// a Log the server's output goes to a file whose end a failed test shows).
func StartWith(t testing.TB, o pgserver.Options) *pgserver.Server {
	t.Helper()
	o.NoFsync = true
	return start(t, o)
}

// StartDurable starts a server for t with fsync on, as a server users run: for the goals that
// measure what a commit costs.
func StartDurable(t testing.TB) *pgserver.Server {
	t.Helper()
	return start(t, pgserver.Options{})
}

func start(t testing.TB, o pgserver.Options) *pgserver.Server {
	t.Helper()
	if _, err := pgserver.Find(); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "jmc-pgtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	o.Dir = dir
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		t.Fatal(err)
	}
	if o.Log == nil {
		o.Log = logf
	}
	s, err := pgserver.Start(context.Background(), o)
	if err != nil {
		_ = logf.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
		_ = logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			if len(b) > logTail {
				b = b[len(b)-logTail:]
			}
			t.Logf("the PostgreSQL server's log (%s), its end:\n%s", logf.Name(), b)
		}
	})
	return s
}
