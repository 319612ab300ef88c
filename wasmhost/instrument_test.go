package wasmhost

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/jmcluster/jmcluster/testkit/wasmbuild"
)

// compileBoth compiles module and its instrumented form in r, failing the test when either
// does not compile; it returns the instrumented bytes.
func compileBoth(t *testing.T, r wazero.Runtime, module []byte) []byte {
	t.Helper()
	ctx := t.Context()
	if _, err := r.CompileModule(ctx, module); err != nil {
		t.Fatalf("the module as written does not compile (a bug of the test): %v", err)
	}
	out, err := instrument(module)
	if err != nil {
		t.Fatalf("instrument: %v", err)
	}
	if _, err := r.CompileModule(ctx, out); err != nil {
		t.Fatalf("the instrumented module does not compile: %v", err)
	}
	return out
}

// TestInstrumentKeepsIndices: the globals instrument appends come after the module's own
// (imported first, then defined), whose indices and values do not move; $stop is exported;
// a module without a global or an export section gets them; DWARF is dropped, "name" kept;
// every group of instructions the decoder knows survives compilation.
func TestInstrumentKeepsIndices(t *testing.T) {
	ctx := t.Context()
	r := wazero.NewRuntime(ctx)
	defer r.Close(ctx)
	env := wmod(sec(secGlobal, []byte{typeI32, 0, opI32Const, 5, opEnd}), sec(secExport, export("g", kindGlobal, 0)))
	if _, err := r.InstantiateWithConfig(ctx, env, wazero.NewModuleConfig().WithName("env")); err != nil {
		t.Fatal(err)
	}
	// An imported global, a defined one (42), the function reading both.
	m := wmod(
		sec(secType, []byte{0x60, 0, 1, typeI32}),
		sec(secImport, cat(str("env"), str("g"), []byte{kindGlobal, typeI32, 0})),
		sec(secFunction, leb(0)),
		sec(secGlobal, []byte{typeI32, 0, opI32Const, 42, opEnd}),
		sec(secExport, export("sum", kindFunc, 0), export("mine", kindGlobal, 1)),
		sec(secCode, body(noLocals, opGlobalGet, 0, opGlobalGet, 1, 0x6a, opEnd)),
	)
	out := compileBoth(t, r, m)
	mod, err := r.Instantiate(ctx, out)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := mod.ExportedFunction("sum").Call(ctx); err != nil || res[0] != 47 {
		t.Errorf("sum of the imported and the defined global: %v %v, want 47", res, err)
	}
	if g := mod.ExportedGlobal("mine"); g == nil || g.Get() != 42 {
		t.Errorf("the module's global after instrumenting: %v", g)
	}
	if _, ok := mod.ExportedGlobal(ExportStop).(api.MutableGlobal); !ok {
		t.Errorf("%s is not exported as a mutable global", ExportStop)
	}

	out = compileBoth(t, r, loopsModule())
	mod, err = r.Instantiate(ctx, out)
	if err != nil {
		t.Fatal(err)
	}
	if mod.ExportedGlobal(ExportStop) == nil {
		t.Errorf("a module without an export section: no %s", ExportStop)
	}

	out = compileBoth(t, r, instructionsModule())
	info, err := sectionNames(out)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(info, ".debug_info") || !strings.Contains(info, "name") {
		t.Errorf("custom sections after instrumenting: %s", info)
	}
	mod, err = r.Instantiate(ctx, out)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mod.ExportedFunction("f").Call(ctx); err != nil {
		t.Errorf("the function of every instruction group: %v", err)
	}
}

func sectionNames(module []byte) (string, error) {
	secs, err := sections(module)
	var names []string
	for _, s := range secs {
		names = append(names, fmt.Sprintf("%d%s", s.id, s.name))
	}
	return strings.Join(names, " "), err
}

// TestInstrumentRefuses: a module exporting the reserved name, an instruction the decoder does
// not know (an exception handling try), a start section: each refused, naming the cause.
func TestInstrumentRefuses(t *testing.T) {
	for _, c := range []struct {
		name   string
		module []byte
		says   string
	}{
		{"jm_stop", wmod(sec(secType, typeVV), sec(secFunction, leb(0)), sec(secExport, export(ExportStop, kindFunc, 0)), sec(secCode, body(noLocals, opEnd))),
			"it exports jm_stop, a name the host reserves"},
		{"try", wmod(sec(secType, typeVV), sec(secFunction, leb(0)), sec(secCode, body(noLocals, 0x06, blockEmpty, opEnd, opEnd))),
			"function body 0: an opcode 0x6 the host does not know at byte 23"},
		{"simd", wmod(sec(secType, typeVV), sec(secFunction, leb(0)), sec(secCode, body(noLocals, prefixSIMD, 0x9a, 0x01, opEnd))),
			"an opcode 0xfd 0x9a the host does not know"},
		{"start", wmod(sec(secType, typeVV), sec(secFunction, leb(0)), appendSection(nil, secStart, leb(0)), sec(secCode, body(noLocals, opEnd))),
			"it has a start section (function 0)"},
		{"truncated", wmod(sec(secType, typeVV), sec(secFunction, leb(0)), sec(secCode, body(noLocals, opI32Const))),
			"truncated"},
	} {
		_, err := instrument(c.module)
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want %q in it", c.name, err, c.says)
		}
	}
}

// FuzzInstrument: any bytes are instrumented or refused, never a panic; what is instrumented
// is a module of sections; and when the input compiles, so does what instrument made of it.
func FuzzInstrument(f *testing.F) {
	for _, m := range [][]byte{instructionsModule(), loopsModule(), hostileModule(), wmod()} {
		f.Add(m)
	}
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler())
	f.Cleanup(func() { _ = r.Close(ctx) })
	f.Fuzz(func(t *testing.T, b []byte) {
		out, err := instrument(b)
		if err != nil {
			return
		}
		if _, err := sections(out); err != nil {
			t.Fatalf("instrumented into something that is not a module: %v", err)
		}
		in, err := r.CompileModule(ctx, b)
		if err != nil {
			return
		}
		_ = in.Close(ctx)
		m, err := r.CompileModule(ctx, out)
		if err != nil {
			t.Fatalf("the module compiles, the instrumented one does not: %v", err)
		}
		_ = m.Close(ctx)
	})
}

// TestLoopsStopped: a call that never ends — in a nested loop, in 2^n calls of a function
// without a loop, in a loop at the bottom of a recursion — is stopped at its time limit and
// reported as such; the host's other instances go on.
func TestLoopsStopped(t *testing.T) {
	h := New()
	m := hostileModule()
	cfg := Config{Label: "t", CallTimeout: 100 * time.Millisecond}
	for _, fn := range []string{"nested", "tree", "recloop"} {
		in, err := h.Instantiate(t.Context(), Sum(m), m, cfg)
		if err != nil {
			t.Fatal(err)
		}
		var b Batch
		b.Add([]byte("k"), make([]byte, 64), 1) // tree(n) for n of the batch's bytes: 2^85 calls
		_, err = in.Call(fn, &b, nil)
		want := "function " + fn + ": the call ran over its time limit of 100ms (call_timeout_ms) and was stopped"
		if !errors.Is(err, ErrTrap) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", fn, err, want)
		}
		_ = in.Close()
	}
}

// TestWatchdogFiresAsCallReturns: a watchdog that fires after the call's last check, as it
// returns, leaves $stop set; the next call of the instance still runs (disarm clears it). The
// race is made deterministic by firing by hand between a call and its disarm.
func TestWatchdogFiresAsCallReturns(t *testing.T) {
	kinds := wasmbuild.MustRead("kinds")["kinds"]
	in, err := Default().Instantiate(t.Context(), Sum(kinds), kinds, Config{Label: "t"})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	upper := func() string {
		var b Batch
		b.Add([]byte("k"), []byte("abc"), 1)
		out, err := in.Call("upper", &b, nil)
		if err != nil {
			return err.Error()
		}
		return string(out[OutHeader:])
	}
	if got := upper(); got != "ABC" {
		t.Fatalf("upper: %q", got)
	}
	in.dog.arm(time.Now(), time.Hour)
	in.dog.mu.Lock()
	in.dog.deadline = time.Now().Add(-time.Millisecond) // its limit passed as the call returned
	in.dog.mu.Unlock()
	in.dog.fire()
	if in.dog.stop.Get() != 1 {
		t.Fatalf("the watchdog fired, $stop is %d", in.dog.stop.Get())
	}
	if !in.dog.disarm() || in.dog.stop.Get() != 0 {
		t.Fatalf("after disarm: $stop %d, want 0 and a fired watchdog", in.dog.stop.Get())
	}
	for i := range 3 * FuelPerCheck / 1000 { // past a read of $stop
		if got := upper(); got != "ABC" {
			t.Fatalf("call %d after the watchdog fired: %q", i, got)
		}
	}
	// A timer of an earlier call firing late does not stop the next one.
	in.dog.arm(time.Now(), time.Hour)
	in.dog.fire()
	if in.dog.disarm() {
		t.Errorf("a timer firing before the call's deadline stopped it")
	}
}

// TestSameResultsWithChecks: each function of the kinds module gives the same output with the
// stop checks as without them (the same records, the same label: the same randomness).
func TestSameResultsWithChecks(t *testing.T) {
	kinds := wasmbuild.MustRead("kinds")["kinds"]
	plain := NewWithCacheDir(wasmbuild.CacheDir())
	plain.noChecks = true
	run := func(h *Host) []string {
		in, err := h.Instantiate(t.Context(), Sum(kinds), kinds, Config{Label: "job/v/0"})
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		var outs []string
		if err := in.Init([]byte(`{"suffix":"?"}`)); err != nil {
			t.Fatal(err)
		}
		for _, fn := range []string{"upper", "echo", "dup", "even", "first", "probe", "probe"} {
			var b Batch
			for i := range 50 {
				b.Add(fmt.Appendf(nil, "key-%d", i), fmt.Appendf(nil, "value+%d", i*i), int64(i))
			}
			out, err := in.Call(fn, &b, nil)
			outs = append(outs, fmt.Sprintf("%s: %q %v", fn, out, err))
		}
		return outs
	}
	a, b := run(Default()), run(plain)
	for i := range a {
		if a[i] != b[i] {
			t.Errorf("with checks:    %s\nwithout checks: %s", a[i], b[i])
		}
	}
}
