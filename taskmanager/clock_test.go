package taskmanager

import (
	"fmt"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/internal/failpoint"
)

// TestClockStepLeavesTasksAndLeaderContactAlone: a TaskManager whose wall clock is stepped by
// +30 s, then -30 s (the failpoint clock-offset, which the fault suite's clock-step-tm sets on
// a running TM) goes on heartbeating and keeps its task RUNNING, with a fence timeout of
// 300 ms and a leader grace of 2 s: its leader contact is timed on the monotonic clock. Were it
// timed on the wall clock, the +30 s step would read as 30 s without contact, past the grace,
// and every task would be cancelled.
func TestClockStepLeavesTasksAndLeaderContactAlone(t *testing.T) {
	jm := startJM(t)
	tm := newTM(t, "tm1", jm, func(c *Config) {
		c.FenceTimeout = 300 * time.Millisecond
		c.LeaderGrace = 2 * time.Second
	})
	submit(t, client(t, tm), 1, source("job", "src", 0, 1, "a", 0, unbounded))
	jm.waitState(t, "a", running)
	for _, step := range []string{"30s", "-30s"} {
		failpoint.Set(t, "clock-offset="+step)
		if d, _ := failpoint.Duration(failpoint.ClockOffset); d.Abs() != 30*time.Second {
			t.Fatalf("clock-offset=%s not in force: %v", step, d)
		}
		jm.mu.Lock()
		from := len(jm.beats)
		jm.mu.Unlock()
		start := time.Now()
		// Past the fence timeout and the leader grace, on the monotonic clock: at least 150
		// heartbeats of 20 ms and 2.5 s.
		waitFor(t, 30*time.Second, "heartbeats past the leader grace under clock-offset="+step, func() (bool, string) {
			jm.mu.Lock()
			n := len(jm.beats) - from
			jm.mu.Unlock()
			ti, _ := findTask(tm, "a")
			if ti.State != running {
				t.Fatalf("task a is %v under clock-offset=%s: the step reached a timeout", ti.State, step)
			}
			return n >= 150 && time.Since(start) > 2500*time.Millisecond, fmt.Sprintf("%d heartbeats, task %v", n, ti.State)
		})
	}
	if st, cause := jm.lastState("a"); st != running {
		t.Fatalf("the leader last heard task a %v (%s), want RUNNING", st, cause)
	}
}
