package wasmhost

import (
	"context"
	"io"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
)

// Warm instances (DESIGN.md, "Warm instances"): after a task's instance of a module is made, the
// host starts another one in the background — instantiated, _initialize run, never called —
// and the next task of that module and memory limit takes it, so its start does not pay the
// module's start (tens of milliseconds for a Go module). At most one per module and memory
// limit is waiting, and one is being started at a time.

// warmKey is a module in a runtime (its memory limit in pages).
type warmKey struct {
	sha   string
	pages uint32
}

// warmSlot is the warm instance of a key: waiting, being started, or none.
type warmSlot struct {
	in     *Instance
	making bool
	failed bool // a start failed: no more warm instances of the key (tasks start cold)
}

// warmPool is a Host's warm instances.
type warmPool struct {
	mu     sync.Mutex
	slots  map[warmKey]*warmSlot
	off    bool // SetWarm(false) or Close
	wg     sync.WaitGroup
	closed bool
}

// takeWarm returns the warm instance of key, or nil when none is waiting.
func (h *Host) takeWarm(key warmKey) *Instance {
	p := &h.warm
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.slots[key]
	if s == nil || s.in == nil {
		return nil
	}
	in := s.in
	s.in = nil
	in.warm = true
	return in
}

// warmUp starts a warm instance of key in the background, unless one is waiting or being
// started, or warm instances are off.
func (h *Host) warmUp(key warmKey, m wazero.CompiledModule, rt *wrt, timeout time.Duration) {
	p := &h.warm
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.off {
		return
	}
	if p.slots == nil {
		p.slots = map[warmKey]*warmSlot{}
	}
	s := p.slots[key]
	if s == nil {
		s = &warmSlot{}
		p.slots[key] = s
	}
	if s.in != nil || s.making || s.failed {
		return
	}
	s.making = true
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		in, err := newStarted(key.sha, m, rt, timeout)
		p.mu.Lock()
		defer p.mu.Unlock()
		s.making = false
		switch {
		case err != nil:
			s.failed = true
		case p.off || p.slots[key] != s: // turned off, or the module released meanwhile
		default:
			s.in, in = in, nil
		}
		if in != nil {
			in.release()
		}
	}()
}

// dropWarm releases the warm instance of key (its compiled module is released).
func (h *Host) dropWarm(key warmKey) {
	p := &h.warm
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.slots[key]; s != nil {
		if s.in != nil {
			s.in.release()
		}
		delete(p.slots, key)
	}
}

// release closes a warm instance no task took (nothing to log).
func (in *Instance) release() {
	in.dog.close()
	_ = in.mod.Close(context.Background())
}

// SetWarm turns the warm instances on (the default) or off: off, the waiting ones are released
// and every Instantiate starts its instance (a test measures a cold start with it).
func (h *Host) SetWarm(on bool) {
	p := &h.warm
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.off = !on
	if !on {
		for _, s := range p.slots {
			if s.in != nil {
				s.in.release()
				s.in = nil
			}
		}
	}
}

// WarmWaiting is the number of warm instances of module sha waiting (over the memory limits).
func (h *Host) WarmWaiting(sha string) int {
	p := &h.warm
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for k, s := range p.slots {
		if k.sha == sha && s.in != nil {
			n++
		}
	}
	return n
}

// Close releases the host: its warm instances (after the starts under way end), its compiled
// modules and runtimes. Instances still in use are closed with their runtime. A closed host
// makes no more warm instances.
func (h *Host) Close() error {
	p := &h.warm
	p.mu.Lock()
	p.off, p.closed = true, true
	p.mu.Unlock()
	p.wg.Wait()
	p.mu.Lock()
	for k, s := range p.slots {
		if s.in != nil {
			s.in.release()
		}
		delete(p.slots, k)
	}
	p.mu.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	var first error
	for pages, w := range h.rts {
		if err := w.r.Close(context.Background()); err != nil && first == nil {
			first = err
		}
		delete(h.rts, pages)
	}
	return first
}

// sink is a module's stdout or stderr: it writes to the instance's log writer (which keeps the
// lines that explain a failure) and, until the instance is a task's, holds the bytes too
// (up to MaxLogBytesPerInterval), which attach writes to the task's log writer.
type sink struct {
	mu       sync.Mutex
	w        io.Writer
	held     []byte
	attached bool
}

func (s *sink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.attached {
		s.held = append(s.held, p[:min(len(p), MaxLogBytesPerInterval-len(s.held))]...)
	}
	return s.w.Write(p)
}

// attach makes w the sink's writer, after the bytes held.
func (s *sink) attach(w io.Writer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, _ = w.Write(s.held)
	s.w, s.held, s.attached = w, nil, true
}

// randSource is a module's randomness: the module's own stream during its start, the task's
// after (adopt). Read on the goroutine that calls the module.
type randSource struct{ r io.Reader }

func (s *randSource) Read(p []byte) (int, error) { return s.r.Read(p) }
