// Package failpoint holds jmcluster's named failpoints, in the spirit of etcd's gofail. A
// switch breaks a safety mechanism on purpose, so that the fault suite can show its checkers
// catch the failure (failpoint.Enabled); a hook is a point between a commit and the RPC it
// guards where a pass can be paused or delayed, so that a fault can land in that window
// (failpoint.Inject). Every failpoint is a row of the table in table.go.
//
// They are set once at start-up from the JMNODE_FAILPOINTS environment variable (FromEnv), or
// by a test (Set, which resets them in t.Cleanup). The setting is process-wide: every replica
// in a test process sees it. With nothing set, a check is one atomic load.
package failpoint

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Kind says how a failpoint is checked and written in a spec.
type Kind int

const (
	// KindSwitch is on or off: written as its bare name, checked with Enabled.
	KindSwitch Kind = iota + 1
	// KindHook pauses each pass: written pause(name) or pause(name)=DUR, run with Inject.
	KindHook
	// KindValue carries a duration: written name=DUR (a Go duration, negative allowed, not 0),
	// read by the code it concerns (clock-offset: Now).
	KindValue
)

func (k Kind) String() string {
	switch k {
	case KindSwitch:
		return "switch"
	case KindHook:
		return "hook"
	case KindValue:
		return "value"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// point is one row of the table.
type point struct {
	name, desc string
	kind       Kind
	fault      bool // a switch that injects a fault rather than breaking a safety mechanism

	on      atomic.Bool           // a switch
	pause   atomic.Pointer[pause] // a hook; nil when off
	waiting atomic.Int64          // passes blocked in Inject now
	hits    atomic.Int64          // passes that met the pause since it was set

	value    atomic.Int64 // a value's duration, when valueSet
	valueSet atomic.Bool
}

// Switch is a failpoint checked with Enabled.
type Switch struct{ point }

// Hook is a failpoint run with Inject.
type Hook struct{ point }

// Value is a failpoint that carries a duration (KindValue).
type Value struct{ point }

// Name is the failpoint's name in a spec.
func (v *Value) Name() string { return v.name }

// newValue is a failpoint with a duration; like newFault, an injected fault, not a planted bug.
func newValue(name, desc string) *Value {
	v := &Value{point{name: name, desc: desc, kind: KindValue, fault: true}}
	register(&v.point)
	return v
}

// Duration returns the value's duration and whether it is set.
func Duration(v *Value) (time.Duration, bool) {
	if !v.valueSet.Load() {
		return 0, false
	}
	return time.Duration(v.value.Load()), true
}

// Name is the failpoint's name in a spec.
func (s *Switch) Name() string { return s.name }

// Name is the failpoint's name in a spec.
func (h *Hook) Name() string { return h.name }

// pause is a hook's setting: each pass blocks until release is closed, the bound (if any)
// passes, or the caller's context ends.
type pause struct {
	bound   time.Duration
	release chan struct{}
}

var (
	// registry holds the table's rows in declaration order; byName indexes it.
	registry []*point
	byName   = map[string]*point{}

	// mu serialises Configure, Reset and Release; checks read atomics only.
	mu sync.Mutex
	// current is the spec in force (canonical form), "" when nothing is set.
	current string
)

func register(p *point) {
	if !validName(p.name) {
		panic(fmt.Sprintf("failpoint: name %q: want lower-case words joined by '-'", p.name))
	}
	if _, dup := byName[p.name]; dup {
		panic(fmt.Sprintf("failpoint: %q registered twice", p.name))
	}
	registry = append(registry, p)
	byName[p.name] = p
}

func newSwitch(name, desc string) *Switch {
	s := &Switch{point{name: name, desc: desc, kind: KindSwitch}}
	register(&s.point)
	return s
}

// newFault is a switch that injects a fault the system must survive (a failing disk), rather
// than a planted bug.
func newFault(name, desc string) *Switch {
	s := &Switch{point{name: name, desc: desc, kind: KindSwitch, fault: true}}
	register(&s.point)
	return s
}

func newHook(name, desc string) *Hook {
	h := &Hook{point{name: name, desc: desc, kind: KindHook}}
	register(&h.point)
	return h
}

func validName(s string) bool {
	if s == "" || s[0] == '-' || s[len(s)-1] == '-' || strings.Contains(s, "--") {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' {
			return false
		}
	}
	return true
}

// Enabled reports whether the switch is on.
func Enabled(s *Switch) bool { return s.on.Load() }

// Inject runs one pass through the hook: when it is set, the pass blocks until the hook is
// released (Release, Reset or a new configuration), its bound passes, or ctx ends. Callers go
// on with what they were doing either way; a cancelled ctx makes their RPC fail as usual.
func Inject(ctx context.Context, h *Hook) {
	p := h.pause.Load()
	if p == nil {
		return
	}
	h.hits.Add(1)
	h.waiting.Add(1)
	defer h.waiting.Add(-1)
	var bound <-chan time.Time
	if p.bound > 0 {
		t := time.NewTimer(p.bound)
		defer t.Stop()
		bound = t.C
	}
	select {
	case <-p.release:
	case <-bound:
	case <-ctx.Done():
	}
}

// Waiting is the number of passes blocked in the hook now (tests wait for it).
func Waiting(h *Hook) int64 { return h.waiting.Load() }

// Hits is the number of passes that met the hook's pause since it was last set.
func Hits(h *Hook) int64 { return h.hits.Load() }

// Release turns the hook off and lets every pass blocked in it go on.
func Release(h *Hook) {
	mu.Lock()
	defer mu.Unlock()
	releaseLocked(&h.point)
	current = specLocked()
}

func releaseLocked(p *point) {
	if old := p.pause.Swap(nil); old != nil {
		close(old.release)
	}
}

// Now is this process's wall clock: the host's, stepped by clock-offset when that is set. It is
// the clock of every wall-clock reading a TaskManager sends or writes (a heartbeat's clock,
// a sink's commit stamp), and of the failpoint that breaks determinism on purpose
// (nondeterministic-apply: fsm/ reads no clock of its own). With an offset the time has no
// monotonic reading, as a stepped clock would not: durations measured with it jump by the
// step, so timeouts use time.Now (whose monotonic reading no step moves), never this.
func Now() time.Time {
	now := time.Now()
	if d, ok := Duration(ClockOffset); ok {
		return now.Round(0).Add(d)
	}
	return now
}

// Configure parses spec (the syntax of JMNODE_FAILPOINTS, see Parse) and makes it the whole
// setting: every failpoint it does not name is turned off, and passes blocked in a hook are
// released. On an error nothing changes.
func Configure(spec string) error {
	s, err := Parse(spec)
	if err != nil {
		return err
	}
	Apply(s)
	return nil
}

// Apply makes a parsed spec the whole setting (see Configure).
func Apply(s Spec) {
	mu.Lock()
	defer mu.Unlock()
	resetLocked()
	for _, t := range s.terms {
		switch t.p.kind {
		case KindSwitch:
			t.p.on.Store(true)
		case KindHook:
			t.p.hits.Store(0)
			t.p.pause.Store(&pause{bound: t.bound, release: make(chan struct{})})
		case KindValue:
			t.p.value.Store(int64(t.bound))
			t.p.valueSet.Store(true)
		}
	}
	current = specLocked()
}

// Reset turns every failpoint off and releases every blocked pass.
func Reset() {
	mu.Lock()
	defer mu.Unlock()
	resetLocked()
	current = ""
}

func resetLocked() {
	for _, p := range registry {
		p.on.Store(false)
		p.valueSet.Store(false)
		p.value.Store(0)
		releaseLocked(p)
	}
}

// Current is the setting in force in canonical form ("" when nothing is set).
func Current() string {
	mu.Lock()
	defer mu.Unlock()
	return current
}

// specLocked renders the setting in force, in table order.
func specLocked() string {
	var terms []string
	for _, p := range registry {
		if p.on.Load() {
			terms = append(terms, p.name)
		}
		if ps := p.pause.Load(); ps != nil {
			terms = append(terms, term{p: p, bound: ps.bound}.String())
		}
		if p.valueSet.Load() {
			terms = append(terms, term{p: p, bound: time.Duration(p.value.Load())}.String())
		}
	}
	return strings.Join(terms, ",")
}

// Info describes one failpoint for listings.
type Info struct {
	Name        string
	Kind        Kind
	Description string
	// Fault: a switch (or a value) that injects a fault the system must survive (a failing
	// disk, a stepped clock), not a broken safety mechanism; every other switch is a planted
	// bug `jepsen selftest` must see caught.
	Fault bool
}

// List returns the table in declaration order.
func List() []Info {
	out := make([]Info, 0, len(registry))
	for _, p := range registry {
		out = append(out, Info{Name: p.name, Kind: p.kind, Description: p.desc, Fault: p.fault})
	}
	return out
}

// names lists the registered names, sorted, for error messages.
func names() string {
	out := make([]string, 0, len(registry))
	for _, p := range registry {
		out = append(out, p.name)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}
