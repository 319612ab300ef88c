package wasmhost

import (
	"sync"
	"time"

	"github.com/tetratelabs/wazero/api"
)

// watchdog stops an instance's call at its time limit: it sets the module's $stop (the global
// instrument adds, exported as ExportStop), which the module's next check reads and traps on
// (DESIGN.md, "Limits"). One timer per instance, reset for each call.
type watchdog struct {
	stop api.MutableGlobal

	mu       sync.Mutex
	t        *time.Timer
	armed    bool      // a call is running under the watchdog
	deadline time.Time // its time limit
	fired    bool      // $stop was set during the call
}

func newWatchdog(stop api.MutableGlobal) *watchdog {
	w := &watchdog{stop: stop}
	w.t = time.AfterFunc(time.Hour, w.fire)
	w.t.Stop()
	return w
}

// arm starts the watch of a call that began at start and may run for limit.
func (w *watchdog) arm(start time.Time, limit time.Duration) {
	w.mu.Lock()
	w.armed, w.fired, w.deadline = true, false, start.Add(limit)
	w.mu.Unlock()
	w.t.Reset(limit)
}

// fire sets $stop when a call is armed and its deadline has passed (a timer of an earlier call
// that fires late finds the next call's deadline ahead and does nothing).
func (w *watchdog) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.armed && !time.Now().Before(w.deadline) {
		w.stop.Set(1)
		w.fired = true
	}
}

// disarm ends the watch of the call and reports whether the watchdog stopped it. $stop is
// clear afterwards: a watchdog that fired as the call returned does not stop the next one.
// The mutex orders the timer's write of $stop before this one.
func (w *watchdog) disarm() (fired bool) {
	w.t.Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed = false
	if w.fired {
		w.stop.Set(0)
	}
	return w.fired
}

// close stops the timer for good.
func (w *watchdog) close() {
	w.t.Stop()
	w.mu.Lock()
	w.armed = false
	w.mu.Unlock()
}
