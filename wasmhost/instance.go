package wasmhost

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"
)

const (
	// DefaultCallTimeout is the time limit of one call when the operator sets none.
	DefaultCallTimeout = 5 * time.Second
	// StartTimeout is the least time limit of an instance's start (_initialize: the Go
	// runtime's and the packages' initialisation), whatever the call timeout.
	StartTimeout = 10 * time.Second
)

// Config is what an instance is made with.
type Config struct {
	// Label names the task in the log and the seed of the module's randomness
	// ("job/vertex/subtask").
	Label  string
	Logger hclog.Logger
	// MemoryMiB is the memory limit (0: DefaultMemoryMiB); CallTimeout the time limit of one
	// call (0: DefaultCallTimeout).
	MemoryMiB   int32
	CallTimeout time.Duration
}

// State is the keyed state and timers of a PROCESS call, by the index of the record in the
// batch whose key they are for (DESIGN.md, "State"). Every method runs on the caller's
// goroutine during Call.
type State interface {
	Get(i uint32) ([]byte, bool)
	Put(i uint32, v []byte)
	Delete(i uint32)
	RegisterTimer(i uint32, at int64)
	DeleteTimer(i uint32, at int64)
	Watermark() int64
}

// Stats are an instance's counters (Deliver 5's metrics): calls, the records that went in and
// out, the time spent in the module, and the calls that failed.
type Stats struct {
	Calls, RecordsIn, RecordsOut, Traps int64
	InModule                            time.Duration
}

// Instance is a module instantiated for one task. It is used by one goroutine at a time.
type Instance struct {
	sha, name string
	lg        hclog.Logger
	mod       api.Module
	mem       api.Memory
	alloc     api.Function
	fns       map[string]api.Function
	timeout   time.Duration
	base      context.Context
	dog       *watchdog
	outSink   *sink       // the module's stdout and stderr
	errSink   *sink       //
	rand      *randSource // the module's randomness
	warm      bool        // taken started from the host's warm instances
	// refill starts the next warm instance of the module once this one's start is over (Init
	// returned, or Close): a background start that ran during this task's start would take
	// the CPU this start needs (two cores).
	refill  func()
	exports map[string]bool // the functions the module exports
	stdout  *logWriter
	stderr  *logWriter
	inPtr   uint32
	inCap   uint32
	broken  error // the failure that ended the instance

	// During a call: the state of its records, the output copied out, the function's error.
	fn      string
	state   State
	out     []byte
	failMsg string
	stats   Stats
}

type instanceKey struct{}

var instances atomic.Uint64

// Instantiate makes an instance of module (sha: its sha256, Sum) for a task: compiled once per
// process (the cache), started (_initialize for a module built with -buildmode=c-shared) in
// its sandbox. A started instance waiting for the module (warm.go) is taken when there is one.
func (h *Host) Instantiate(ctx context.Context, sha string, module []byte, cfg Config) (*Instance, error) {
	m, err := h.compile(ctx, sha, module, cfg.MemoryMiB)
	if err != nil {
		return nil, err
	}
	// The runtime after the compile: its lock is held while another task's module compiles
	// (seconds), which is no part of this start's time limit.
	rt := h.runtimeOf(cfg.MemoryMiB)
	timeout := cfg.CallTimeout
	if timeout <= 0 {
		timeout = DefaultCallTimeout
	}
	key := warmKey{sha: sha, pages: rt.pages}
	in := h.takeWarm(key)
	if in == nil {
		if in, err = newStarted(sha, m, rt, timeout); err != nil {
			if in != nil { // the start's output goes to the task's log
				in.adopt(cfg, timeout)
				_ = in.Close()
			}
			return nil, err
		}
	}
	in.adopt(cfg, timeout)
	in.refill = func() { h.warmUp(key, m, rt, timeout) }
	return in, nil
}

// newStarted instantiates m in rt and runs its start, with the module's own random seed and
// the start's output held (adopt makes the instance a task's). A start that fails returns the
// instance too, broken, for its caller to log its output and close it.
func newStarted(sha string, m wazero.CompiledModule, rt *wrt, timeout time.Duration) (*Instance, error) {
	in := &Instance{sha: sha, lg: hclog.NewNullLogger(), fns: map[string]api.Function{}, timeout: timeout}
	in.name = fmt.Sprintf("%s#%d", short(sha), instances.Add(1))
	in.stdout, in.stderr = newLogWriter(in.lg, "stdout"), newLogWriter(in.lg, "stderr")
	in.outSink, in.errSink = &sink{w: in.stdout}, &sink{w: in.stderr}
	seed := sha256.Sum256([]byte("start\x00" + sha))
	in.rand = &randSource{r: rand.NewChaCha8(seed)}
	mc := wazero.NewModuleConfig().
		WithName(in.name).
		WithStartFunctions(). // _initialize runs below, under the watchdog
		WithStdout(in.outSink).
		WithStderr(in.errSink).
		WithWalltime(fakeClock(0, time.Millisecond), sys.ClockResolution(time.Millisecond)).
		WithNanotime(fakeNanotime(), sys.ClockResolution(time.Millisecond)).
		WithRandSource(in.rand)
	in.base = context.WithValue(context.Background(), instanceKey{}, in)
	mod, err := rt.r.InstantiateModule(in.base, m, mc)
	if err != nil {
		return nil, in.failure("_initialize", false, err)
	}
	in.mod, in.mem = mod, mod.Memory()
	in.exports = map[string]bool{}
	for name := range m.ExportedFunctions() {
		in.exports[name] = true
	}
	stop, ok := mod.ExportedGlobal(ExportStop).(api.MutableGlobal)
	if !ok { // instrument exports it: a module compiled without it is a bug of the host
		_ = in.Close()
		return nil, fmt.Errorf("%w: module %s has no %s global (the host's instrumentation)", ErrInvalid, short(sha), ExportStop)
	}
	in.dog = newWatchdog(stop)
	if err := in.start(); err != nil {
		return in, err
	}
	in.alloc = mod.ExportedFunction(ExportAlloc)
	if err := checkSignature(ExportAlloc, in.alloc); err != nil {
		_ = in.Close()
		return nil, fmt.Errorf("%w: module %s %v", ErrInvalid, short(sha), err)
	}
	in.dog.arm(time.Now(), in.startLimit())
	err = in.ensureInput(minInputBytes)
	if fired := in.dog.disarm(); err != nil {
		return in, in.failure(ExportAlloc, fired, err)
	}
	if in.Has(ExportInit) { // its call engine made now, not in the task's start
		if _, err := in.function(ExportInit); err != nil {
			return in, err
		}
	}
	return in, nil
}

// adopt makes a started instance the task's: its logger (the start's output, held, is written
// to it now), its random stream (ChaCha8 seeded with sha256(label, module sha256)), its call
// time limit.
func (in *Instance) adopt(cfg Config, timeout time.Duration) {
	lg := cfg.Logger
	if lg == nil {
		lg = hclog.NewNullLogger()
	}
	in.lg, in.timeout = lg.With("module", short(in.sha)), timeout
	stdout, stderr := newLogWriter(in.lg, "stdout"), newLogWriter(in.lg, "stderr")
	in.outSink.attach(stdout)
	in.errSink.attach(stderr)
	in.stdout, in.stderr = stdout, stderr
	seed := sha256.Sum256([]byte(cfg.Label + "\x00" + in.sha))
	in.rand.r = rand.NewChaCha8(seed)
}

// start runs the module's _initialize (a reactor's start: the Go runtime's and the packages'
// initialisation), when it exports one, under the watchdog with the start's time limit.
func (in *Instance) start() error {
	f := in.mod.ExportedFunction("_initialize")
	if f == nil {
		return nil
	}
	in.fn = "_initialize"
	in.stderr.mark()
	in.dog.arm(time.Now(), in.startLimit())
	_, err := f.Call(in.base)
	fired := in.dog.disarm()
	if err != nil {
		return in.failure("_initialize", fired, err)
	}
	return nil
}

// startLimit is the time limit of the module's start.
func (in *Instance) startLimit() time.Duration { return max(in.timeout, StartTimeout) }

// Warm reports whether the instance was started before its task asked for it (warm.go).
func (in *Instance) Warm() bool { return in.warm }

func (h *Host) runtimeOf(mib int32) *wrt {
	h.mu.Lock()
	defer h.mu.Unlock()
	w, _ := h.runtime(context.Background(), mib) // made by compile
	return w
}

// fakeClock is the module's wall clock: the Unix epoch at the instance's start, advancing by
// step at each reading. The module's time is not the time: a function is a function of its
// records (their event time), so a replay after a restore computes what the first run did.
func fakeClock(start int64, step time.Duration) sys.Walltime {
	n := start
	return func() (int64, int32) {
		n += int64(step)
		return n / 1e9, int32(n % 1e9)
	}
}

func fakeNanotime() sys.Nanotime {
	var n int64
	return func() int64 { n += int64(time.Millisecond); return n }
}

// Has reports whether the module exports function name.
func (in *Instance) Has(name string) bool { return in.exports[name] }

// function returns the export name, checked to be (i32) -> i32.
func (in *Instance) function(name string) (api.Function, error) {
	if f, ok := in.fns[name]; ok {
		return f, nil
	}
	f := in.mod.ExportedFunction(name)
	if f == nil {
		return nil, fmt.Errorf("%w: module %s does not export the function %s", ErrInvalid, short(in.sha), name)
	}
	if err := checkSignature(name, f); err != nil {
		return nil, fmt.Errorf("%w: module %s %v", ErrInvalid, short(in.sha), err)
	}
	in.fns[name] = f
	return f, nil
}

// Init calls the module's jm_init with config (a JSON document, or empty); a module without
// jm_init takes no configuration, so a non-empty one is an error.
func (in *Instance) Init(config []byte) error {
	defer in.refillWarm()
	if !in.Has(ExportInit) {
		if len(config) > 0 {
			return fmt.Errorf("%w: module %s takes no configuration (it does not export %s), but the operator's config is %d bytes", ErrInvalid, short(in.sha), ExportInit, len(config))
		}
		return nil
	}
	_, err := in.call(ExportInit, config, 0, nil)
	return err
}

// Call runs function name over batch b. st is the keyed state of a PROCESS function (nil for
// another kind: its state calls fail). The output records (Decode) alias the returned bytes,
// which are the caller's.
func (in *Instance) Call(name string, b *Batch, st State) ([]byte, error) {
	return in.call(name, b.Bytes(), b.Len(), st)
}

// Timer calls jm_timer with one record: the timer's key, no value, its time at.
func (in *Instance) Timer(b *Batch, st State) ([]byte, error) {
	return in.call(ExportTimer, b.Bytes(), b.Len(), st)
}

func (in *Instance) call(name string, input []byte, n int, st State) ([]byte, error) {
	if in.broken != nil {
		return nil, in.broken
	}
	f, err := in.function(name)
	if err != nil {
		return nil, err
	}
	in.fn, in.state, in.out, in.failMsg = name, st, nil, ""
	defer func() { in.state = nil }()
	in.stderr.mark()
	start := time.Now()
	in.dog.arm(start, in.timeout)
	fname, res, err := in.run(f, input)
	fired := in.dog.disarm()
	in.stats.InModule += time.Since(start)
	if fname == name {
		in.stats.Calls++
		in.stats.RecordsIn += int64(n)
	}
	if err != nil {
		return nil, in.failure(fname, fired, err)
	}
	if status := uint32(res[0]); status != 0 {
		msg := in.failMsg
		if msg == "" {
			msg = fmt.Sprintf("status %d without a message", status)
		}
		in.stats.Traps++
		return nil, fmt.Errorf("%w: module %s, function %s returned an error: %s", ErrTrap, short(in.sha), name, msg)
	}
	return in.out, nil
}

// run copies input into the module's input buffer, growing it through jm_alloc, and calls f;
// fname is the function that failed (jm_alloc or f's).
func (in *Instance) run(f api.Function, input []byte) (fname string, res []uint64, err error) {
	if err := in.ensureInput(uint32(len(input))); err != nil {
		return ExportAlloc, nil, err
	}
	if !in.mem.Write(in.inPtr, input) {
		return ExportAlloc, nil, fmt.Errorf("%s returned the buffer %#x of %d bytes, outside its memory of %d bytes", ExportAlloc, in.inPtr, in.inCap, in.mem.Size())
	}
	res, err = f.Call(in.base, uint64(len(input)))
	return in.fn, res, err
}

// minInputBytes is the least input buffer the host asks jm_alloc for; the start allocates
// one (a warm instance's first call does not pay it).
const minInputBytes = 4096

// ensureInput makes the module's input buffer hold n bytes, through jm_alloc.
func (in *Instance) ensureInput(n uint32) error {
	if n <= in.inCap && in.inCap != 0 {
		return nil
	}
	c := max(n, minInputBytes)
	res, err := in.alloc.Call(in.base, uint64(c))
	if err != nil {
		return err
	}
	in.inPtr, in.inCap = uint32(res[0]), c
	return nil
}

// failure is the error of a call that did not return: the time limit (fired: the watchdog
// stopped it), the memory limit, an exit (a Go panic), a trap; the instance is broken from
// then on.
func (in *Instance) failure(name string, fired bool, err error) error {
	in.stats.Traps++
	what := firstLine(err.Error())
	var exit *sys.ExitError
	switch {
	case fired && name == "_initialize":
		what = fmt.Sprintf("the module's start ran over its time limit of %v (the larger of call_timeout_ms and StartTimeout) and was stopped", in.startLimit())
	case fired:
		what = fmt.Sprintf("the call ran over its time limit of %v (call_timeout_ms) and was stopped", in.timeout)
	case errors.As(err, &exit):
		what = fmt.Sprintf("the module exited with code %d", exit.ExitCode())
	}
	if c := in.stderr.cause(); c != "" {
		what += "; its stderr: " + c
	}
	return in.fail(fmt.Errorf("%w: module %s, function %s: %s", ErrTrap, short(in.sha), name, what))
}

func (in *Instance) fail(err error) error {
	in.broken = err
	return err
}

func firstLine(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			return s[:i]
		}
	}
	return s
}

// Stats returns the instance's counters.
func (in *Instance) Stats() Stats { return in.stats }

// CountOut adds n records to the records out (the caller counts what it emits).
func (in *Instance) CountOut(n int) { in.stats.RecordsOut += int64(n) }

// Close releases the instance and logs its counters.
func (in *Instance) Close() error {
	in.refillWarm()
	in.stdout.finish()
	in.stderr.finish()
	s := in.stats
	in.lg.Info("wasm instance closed", "calls", s.Calls, "records_in", s.RecordsIn, "records_out", s.RecordsOut, "in_module", s.InModule, "failed_calls", s.Traps)
	if in.dog != nil {
		in.dog.close()
	}
	if in.mod == nil {
		return nil
	}
	return in.mod.Close(context.Background())
}

// refillWarm starts the next warm instance of the module, once.
func (in *Instance) refillWarm() {
	if f := in.refill; f != nil {
		in.refill = nil
		f()
	}
}
