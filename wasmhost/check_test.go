package wasmhost_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jmcluster/jmcluster/wasmhost"
)

// TestCheckWithoutCompiling: Check refuses, naming the cause, what compile refuses (a module
// that is not WebAssembly, an import the host does not offer, a function it does not export)
// and passes the test modules and the examples.
func TestCheckWithoutCompiling(t *testing.T) {
	for _, name := range []string{"kinds", "wordsplit", "loop", "alloc", "boom"} {
		if err := wasmhost.Check(modules[name]); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := wasmhost.Check(modules["kinds"], "upper", "count", wasmhost.ExportInit); err != nil {
		t.Errorf("kinds' functions: %v", err)
	}
	for _, c := range []struct {
		name   string
		module []byte
		fns    []string
		is     error
		says   string
	}{
		{"importer", modules["importer"], nil, wasmhost.ErrInvalid, "imports env.foo, which the host does not offer"},
		{"a shell script", []byte("#!/bin/sh\necho hello\n"), nil, wasmhost.ErrNotWasm, `it starts with "#!/bin/s"`},
		{"nothing", nil, nil, wasmhost.ErrNotWasm, "(0 bytes)"},
		{"a component", []byte("\x00asm\x0d\x00\x01\x00"), nil, wasmhost.ErrInvalid, "version is 0d000100, not 1"},
		{"a cut module", modules["kinds"][:len(modules["kinds"])/2], nil, wasmhost.ErrInvalid, "truncated"},
		{"a function it lacks", modules["kinds"], []string{"nosuch"}, wasmhost.ErrInvalid, "does not export the function nosuch"},
		{"an empty module", []byte("\x00asm\x01\x00\x00\x00"), nil, wasmhost.ErrInvalid, "exports no memory"},
		// An exported memory "m" and an export "jm_stop" (function 0); a start section (function 0).
		{"jm_stop", []byte("\x00asm\x01\x00\x00\x00\x07\x0f\x02\x01m\x02\x00\x07jm_stop\x00\x00"), nil, wasmhost.ErrInvalid, "exports jm_stop, a name the host reserves"},
		{"a start section", []byte("\x00asm\x01\x00\x00\x00\x07\x05\x01\x01m\x02\x00\x08\x01\x00"), nil, wasmhost.ErrInvalid, "has a start section"},
	} {
		err := wasmhost.Check(c.module, c.fns...)
		if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: got %v, want %v saying %q", c.name, err, c.is, c.says)
		}
	}
}

// FuzzInspect: any bytes are read or refused, never a panic.
func FuzzInspect(f *testing.F) {
	f.Add([]byte("\x00asm\x01\x00\x00\x00"))
	f.Add([]byte("\x00asm\x01\x00\x00\x00\x02\x08\x01\x03env\x01f\x00\x00"))
	f.Add([]byte("\x00asm\x01\x00\x00\x00\x07\x05\x01\x01m\x02\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		info, err := wasmhost.Inspect(b)
		if err == nil && info == nil {
			t.Fatal("no error and no info")
		}
		_ = wasmhost.Check(b, "f")
	})
}
