package testcluster

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// bindRetries is how many times NewRetrying starts a cluster whose ports were taken.
const bindRetries = 3

// retryBind runs start with a testing.TB whose Fatal ends only the start attempt; a start that
// failed on an address in use is tried again, any other failure fails the test.
func retryBind(t testing.TB, start func(testing.TB) *Cluster) *Cluster {
	t.Helper()
	for attempt := 1; ; attempt++ {
		tb := &startTB{TB: t}
		var c *Cluster
		done := make(chan struct{})
		go func() {
			defer close(done)
			c = start(tb)
		}()
		<-done
		if tb.failure == "" {
			c.T = t
			for _, f := range tb.cleanups {
				t.Cleanup(f)
			}
			return c
		}
		// Stop what the failed attempt started, newest first.
		for i := len(tb.cleanups) - 1; i >= 0; i-- {
			tb.cleanups[i]()
		}
		if !strings.Contains(tb.failure, "address already in use") || attempt == bindRetries {
			t.Fatalf("start cluster (attempt %d): %s", attempt, tb.failure)
		}
		t.Logf("start cluster (attempt %d): %s; starting again on other ports", attempt, tb.failure)
	}
}

// startTB records the first fatal failure of a cluster start and ends the starting goroutine;
// it holds the start's cleanups until the start succeeded (then they move to the test) or
// failed (then they run at once).
type startTB struct {
	testing.TB
	failure  string
	cleanups []func()
}

func (s *startTB) Cleanup(f func()) { s.cleanups = append(s.cleanups, f) }

func (s *startTB) Fatalf(format string, args ...any) { s.fatal(fmt.Sprintf(format, args...)) }
func (s *startTB) Fatal(args ...any)                 { s.fatal(fmt.Sprint(args...)) }
func (s *startTB) FailNow()                          { s.fatal("FailNow") }

func (s *startTB) fatal(msg string) {
	if s.failure == "" {
		s.failure = msg
	}
	runtime.Goexit()
}
