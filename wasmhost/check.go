package wasmhost

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// offered is the set of functions the host offers a module to import ("module.name"): WASI
// preview 1's and the host module's. Read once from a runtime of its own (milliseconds: it
// compiles no user module).
var offered = sync.OnceValue(func() map[string]bool {
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer r.Close(ctx)
	names := map[string]bool{}
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, r); err == nil {
		for name := range r.Module(WASIModule).ExportedFunctionDefinitions() {
			names[WASIModule+"."+name] = true
		}
	}
	for _, f := range hostFunctions {
		names[HostModule+"."+f.name] = true
	}
	return names
})

// notOffered is the refusal of an import the host does not offer.
func notOffered(mod, name string) error {
	return fmt.Errorf("imports %s.%s, which the host does not offer (it offers the functions of %s and of %s: %s)",
		mod, name, WASIModule, HostModule, strings.Join(hostFunctionNames(), ", "))
}

// Check refuses a module the host would refuse to run, without compiling it: not
// WebAssembly, an import the host does not offer, no exported memory, no jm_alloc, a function
// of functions it does not export, an export named ExportStop, or a start section. A JobMaster checks a job's modules with it at
// submit; a TaskManager compiles the module (compile), which checks the code as well. The
// error wraps ErrNotWasm or ErrInvalid and names the cause (not the module: the caller does).
func Check(module []byte, functions ...string) error {
	info, err := Inspect(module)
	if err != nil {
		return err
	}
	names := offered()
	memory := false
	for _, im := range info.Imports {
		switch {
		case im.Kind == kindMemory:
			return fmt.Errorf("%w: it imports the memory %s.%s, which the host does not offer (a module exports its own memory)", ErrInvalid, im.Module, im.Name)
		case im.Kind != kindFunc || !names[im.Module+"."+im.Name]:
			return fmt.Errorf("%w: it %v", ErrInvalid, notOffered(im.Module, im.Name))
		}
	}
	for _, e := range info.Exports {
		memory = memory || e.Kind == kindMemory
		if e.Name == ExportStop {
			return fmt.Errorf("%w: it exports %s, a name the host reserves for its stop flag", ErrInvalid, ExportStop)
		}
	}
	if info.Start {
		return fmt.Errorf("%w: it has a start section, which would run as it is instantiated, outside the start's time limit: a module is built as a reactor, started by its _initialize export", ErrInvalid)
	}
	if !memory {
		return fmt.Errorf("%w: it exports no memory: the ABI passes records through the module's memory (wasmhost/DESIGN.md)", ErrInvalid)
	}
	for _, f := range append([]string{ExportAlloc}, functions...) {
		if !info.HasExport(f) {
			return fmt.Errorf("%w: it does not export the function %s", ErrInvalid, f)
		}
	}
	return nil
}
