// Package wasmhost runs user functions compiled to WebAssembly (docs/user-functions.md): one
// wazero runtime per memory limit in a process, all sharing one compilation cache, so a module
// is compiled once per process; the sandbox (WASI without files, environment, arguments or
// sockets; a clock and randomness the host controls; stdout and stderr to the task's log,
// bounded); the limits (memory per instance, time per call); and the batch ABI of DESIGN.md.
package wasmhost

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// The host's names and defaults.
const (
	// HostModule is the module the host's functions are imported from (DESIGN.md, "ABI").
	HostModule = "jmcluster"
	// WASIModule is the WASI module the host offers (preview 1).
	WASIModule = wasi_snapshot_preview1.ModuleName
	// DefaultMemoryMiB is an instance's memory limit when the operator sets none.
	DefaultMemoryMiB = 64
	// MaxCompiledModules bounds the compiled modules a process keeps per memory limit; past it
	// the least recently used one is released (its running instances are not affected).
	MaxCompiledModules = 64
	// ExportAlloc, ExportInit and ExportTimer are the ABI's exports (DESIGN.md).
	ExportAlloc = "jm_alloc"
	ExportInit  = "jm_init"
	ExportTimer = "jm_timer"
	// pageBytes is the size of a WebAssembly memory page.
	pageBytes = 64 << 10
)

var (
	// ErrNotWasm: the bytes are not a WebAssembly module.
	ErrNotWasm = errors.New("not a WebAssembly module")
	// ErrInvalid: a WebAssembly module the host refuses (it does not compile, it imports
	// what the host does not offer, it lacks an export of the ABI).
	ErrInvalid = errors.New("module refused")
	// ErrTrap: a call into the module failed (a trap, the call timeout, an exit, the memory
	// limit, or the function's own error).
	ErrTrap = errors.New("user function failed")
)

// Host holds a process's runtimes, their compilation cache and compiled modules.
type Host struct {
	cache wazero.CompilationCache
	mu    sync.Mutex
	rts   map[uint32]*wrt // by the memory limit in pages
	seq   uint64          // instance names
	// noChecks compiles modules without the stop checks (instrument.go): tests compare a
	// module's results with and without them. A call of such a module cannot be stopped.
	noChecks bool
	warm     warmPool
}

// wrt is one wazero runtime (of one memory limit), the names it offers a module to import,
// and the modules compiled in it by sha256.
type wrt struct {
	r        wazero.Runtime
	pages    uint32          // its memory limit
	offered  map[string]bool // "module.name"
	compiled map[string]*compiled
	tick     uint64
}

type compiled struct {
	m    wazero.CompiledModule
	used uint64
}

var (
	defaultMu   sync.Mutex
	defaultHost *Host
	defaultDir  string
)

// Default is the process's Host: a TaskManager's tasks share it, so a module is compiled once
// per process (a region restart does not compile again).
func Default() *Host {
	defaultMu.Lock()
	defer defaultMu.Unlock()
	if defaultHost == nil {
		defaultHost = NewWithCacheDir(defaultDir)
	}
	return defaultHost
}

// SetCacheDir makes the Default host keep its compiled code in dir as well (wazero's file
// cache), so a process started again does not compile again; call it before the first
// Default. "" (the default): in memory only.
func SetCacheDir(dir string) {
	defaultMu.Lock()
	defer defaultMu.Unlock()
	defaultDir = dir
}

// New returns a Host with an in-memory compilation cache of its own.
func New() *Host { return NewWithCacheDir("") }

// NewWithCacheDir returns a Host whose compilation cache is kept in dir too ("": in memory
// only); a dir it cannot use leaves it in memory only.
func NewWithCacheDir(dir string) *Host {
	cache := wazero.NewCompilationCache()
	if dir != "" {
		if c, err := wazero.NewCompilationCacheWithDir(dir); err == nil {
			cache = c
		}
	}
	return &Host{cache: cache, rts: map[uint32]*wrt{}}
}

// runtime returns the runtime of memory limit mib, making it (WASI and the host module
// instantiated in it) on first use. h.mu is held.
func (h *Host) runtime(ctx context.Context, mib int32) (*wrt, error) {
	if mib <= 0 {
		mib = DefaultMemoryMiB
	}
	pages := uint32(mib) * (1 << 20 / pageBytes)
	if w, ok := h.rts[pages]; ok {
		return w, nil
	}
	cfg := wazero.NewRuntimeConfig().
		WithCompilationCache(h.cache).
		WithMemoryLimitPages(pages)
	r := wazero.NewRuntimeWithConfig(ctx, cfg)
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, r); err != nil {
		_ = r.Close(ctx)
		return nil, fmt.Errorf("instantiate WASI: %w", err)
	}
	if err := instantiateHostModule(ctx, r); err != nil {
		_ = r.Close(ctx)
		return nil, fmt.Errorf("instantiate the host module: %w", err)
	}
	w := &wrt{r: r, pages: pages, offered: map[string]bool{}, compiled: map[string]*compiled{}}
	for _, m := range []string{WASIModule, HostModule} {
		for name := range r.Module(m).ExportedFunctionDefinitions() {
			w.offered[m+"."+name] = true
		}
	}
	h.rts[pages] = w
	return w, nil
}

// Sum is the sha256 of module in lower-case hex: the name of its artifact.
func Sum(module []byte) string {
	s := sha256.Sum256(module)
	return hex.EncodeToString(s[:])
}

// short is the first 12 characters of a sha256, as errors and logs name a module.
func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}

var wasmMagic = []byte("\x00asm")

// compile returns module compiled in the runtime of memory limit mib, from the process's
// cache when it was compiled before; sha is its sha256 (Sum), checked when it is compiled.
// It refuses a module that is not
// WebAssembly, does not compile, imports what the host does not offer or lacks an export of
// the ABI.
func (h *Host) compile(ctx context.Context, sha string, module []byte, mib int32) (wazero.CompiledModule, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w, err := h.runtime(ctx, mib)
	if err != nil {
		return nil, err
	}
	w.tick++
	if c, ok := w.compiled[sha]; ok {
		c.used = w.tick
		return c.m, nil
	}
	// The bytes are checked against sha when they are compiled; a module compiled before runs
	// the code of sha whatever bytes come with it (hashing megabytes would cost a warm start
	// more than the rest of it).
	if got := Sum(module); got != sha {
		return nil, fmt.Errorf("%w: the artifact's bytes have sha256 %s, not %s", ErrInvalid, got, sha)
	}
	if !bytes.HasPrefix(module, wasmMagic) {
		head := module[:min(len(module), 8)]
		return nil, fmt.Errorf("%w: it starts with %q, not the magic %q (%d bytes)", ErrNotWasm, head, wasmMagic, len(module))
	}
	inst, err := rewrite(module, !h.noChecks)
	if errors.Is(err, ErrNotWasm) || errors.Is(err, ErrInvalid) { // not the binary format
		return nil, fmt.Errorf("%w (module %s)", err, short(sha))
	} else if err != nil {
		return nil, fmt.Errorf("%w: module %s cannot be instrumented for the call time limit (DESIGN.md, \"Limits\"): %v", ErrInvalid, short(sha), err)
	}
	m, err := w.r.CompileModule(ctx, inst)
	if err != nil {
		return nil, fmt.Errorf("%w: module %s does not compile: %v", ErrInvalid, short(sha), err)
	}
	if err := checkModule(m, w.offered); err != nil {
		_ = m.Close(ctx)
		return nil, fmt.Errorf("%w: module %s %v", ErrInvalid, short(sha), err)
	}
	if len(w.compiled) >= MaxCompiledModules {
		oldest := ""
		for k, c := range w.compiled {
			if oldest == "" || c.used < w.compiled[oldest].used {
				oldest = k
			}
		}
		h.dropWarm(warmKey{sha: oldest, pages: w.pages})
		_ = w.compiled[oldest].m.Close(ctx)
		delete(w.compiled, oldest)
	}
	w.compiled[sha] = &compiled{m: m, used: w.tick}
	return m, nil
}

// checkModule refuses a module that imports what the host does not offer, or lacks the
// memory and the allocator the ABI needs.
func checkModule(m wazero.CompiledModule, offered map[string]bool) error {
	for _, d := range m.ImportedFunctions() {
		mod, name, _ := d.Import()
		if !offered[mod+"."+name] {
			return notOffered(mod, name)
		}
	}
	for _, d := range m.ImportedMemories() {
		mod, name, _ := d.Import()
		return fmt.Errorf("imports the memory %s.%s, which the host does not offer (a module exports its own memory)", mod, name)
	}
	if len(m.ExportedMemories()) == 0 {
		return errors.New("exports no memory: the ABI passes records through the module's memory (DESIGN.md)")
	}
	if _, ok := m.ExportedFunctions()[ExportAlloc]; !ok {
		return fmt.Errorf("does not export %s: the ABI's allocator of the input buffer (the SDK exports it)", ExportAlloc)
	}
	return nil
}

// Validate checks module as a TaskManager would before it runs it (at submit): WebAssembly,
// compiling, importing only what the host offers, exporting the ABI's memory and allocator.
// The error wraps ErrNotWasm or ErrInvalid and names the cause.
func Validate(module []byte) error { return Default().Validate(module) }

// Validate is the package's Validate on h (its compiled module is kept in h's cache).
func (h *Host) Validate(module []byte) error {
	_, err := h.compile(context.Background(), Sum(module), module, 0)
	return err
}

// Exports lists the functions module exports, sorted (for a caller that checks a spec's
// function before it runs).
func (h *Host) Exports(module []byte) ([]string, error) {
	m, err := h.compile(context.Background(), Sum(module), module, 0)
	if err != nil {
		return nil, err
	}
	var names []string
	for name := range m.ExportedFunctions() {
		names = append(names, name)
	}
	sort.Strings(names)
	return names, nil
}

// hostFunctionNames are the functions of HostModule, sorted.
func hostFunctionNames() []string {
	names := make([]string, 0, len(hostFunctions))
	for _, f := range hostFunctions {
		names = append(names, f.name)
	}
	slices.Sort(names)
	return names
}

// checkSignature refuses an export of the wrong signature (a batch function, jm_init and
// jm_timer take the input's length and return a status; jm_alloc takes a size and returns a
// pointer: all i32).
func checkSignature(name string, f api.Function) error {
	d := f.Definition()
	p, r := d.ParamTypes(), d.ResultTypes()
	if len(p) != 1 || p[0] != api.ValueTypeI32 || len(r) != 1 || r[0] != api.ValueTypeI32 {
		return fmt.Errorf("export %s has the signature %v -> %v, not (i32) -> i32 (DESIGN.md, \"ABI\")", name, typeNames(p), typeNames(r))
	}
	return nil
}

func typeNames(ts []api.ValueType) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = api.ValueTypeName(t)
	}
	return out
}

// Compiled is the number of compiled modules h holds (over its memory limits).
func (h *Host) Compiled() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, w := range h.rts {
		n += len(w.compiled)
	}
	return n
}
