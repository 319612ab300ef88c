package wasmhost

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// A module is rewritten before it is compiled so that a call can be stopped cheaply (DESIGN.md,
// "Limits"): two mutable i32 globals are appended, $fuel and $stop ($stop exported as
// ExportStop), and a check is inserted at every function's entry and every loop's head. The
// check counts $fuel down; every FuelPerCheck checks it leaves the JIT code for Go (memory.grow
// 0, which wazero runs in Go: a point where the goroutine can be preempted, so a loop never
// blocks the Go scheduler or the GC's stop-the-world) and traps with unreachable when $stop is
// set (the call's watchdog sets it at the call's time limit).
const (
	// ExportStop is the name the host exports $stop under; a module may not export it itself.
	ExportStop = "jm_stop"
	// FuelPerCheck is the number of checks (function entries and loop iterations) between two
	// reads of $stop.
	FuelPerCheck = 1 << 14
)

// WebAssembly value types, as the instrumentation writes and reads them.
const (
	typeI32     = 0x7f
	typeI64     = 0x7e
	typeF32     = 0x7d
	typeF64     = 0x7c
	typeV128    = 0x7b
	typeFuncref = 0x70
	typeExtern  = 0x6f
)

// Opcodes the check is made of.
const (
	opUnreachable = 0x00
	opIf          = 0x04
	opEnd         = 0x0b
	opDrop        = 0x1a
	opGlobalGet   = 0x23
	opGlobalSet   = 0x24
	opMemoryGrow  = 0x40
	opI32Const    = 0x41
	opI32Eqz      = 0x45
	opI32Sub      = 0x6b
	blockEmpty    = 0x40
)

// sectionRank is a non-custom section's place in the order the binary format requires (the
// data count section comes before the code section, the tag section before the globals).
var sectionRank = map[byte]int{
	secType: 1, secImport: 2, secFunction: 3, secTable: 4, secMemory: 5, 13: 6, secGlobal: 7,
	secExport: 8, secStart: 9, secElement: 10, secDataCnt: 11, secCode: 12, secData: 13,
}

// layout is what instrument reads of a module before it rewrites it.
type layout struct {
	importedGlobals, definedGlobals uint32
	hasMemory                       bool
	global, export, code            int // the section's index in secs, -1 when absent
}

// instrument returns module rewritten with the stop check (above). It refuses a module it
// cannot rewrite — malformed, an instruction it does not know, an export named ExportStop —
// with an error naming the cause.
func instrument(module []byte) ([]byte, error) { return rewrite(module, true) }

// rewrite is instrument; without checks it adds the globals and the export only (the tests
// compare a module's results with and without the checks).
func rewrite(module []byte, checks bool) ([]byte, error) {
	secs, err := sections(module)
	if err != nil {
		return nil, err
	}
	lay, err := readLayout(module, secs)
	if err != nil {
		return nil, err
	}
	fuel := lay.importedGlobals + lay.definedGlobals
	var chk []byte
	if checks {
		chk = checkCode(fuel, fuel+1, lay.hasMemory)
	}

	out := make([]byte, 0, len(module)+len(module)/8+64)
	out = append(out, module[:8]...)
	pending := []byte{secGlobal, secExport}
	if lay.global >= 0 {
		pending = pending[1:]
	}
	if lay.export >= 0 {
		pending = pending[:len(pending)-1]
	}
	// emitMissing writes the sections instrument adds that come before rank.
	emitMissing := func(rank int) {
		for len(pending) > 0 && sectionRank[pending[0]] < rank {
			switch pending[0] {
			case secGlobal:
				out = appendSection(out, secGlobal, newGlobals(0, nil))
			case secExport:
				out = appendSection(out, secExport, newExports(0, nil, fuel+1))
			}
			pending = pending[1:]
		}
	}
	for i, s := range secs {
		payload := module[s.start:s.end]
		if s.id == secCustom {
			if !strings.HasPrefix(s.name, ".debug_") { // DWARF holds code offsets, which move
				out = appendSection(out, secCustom, payload)
			}
			continue
		}
		emitMissing(sectionRank[s.id])
		switch i {
		case lay.global:
			out = appendSection(out, secGlobal, newGlobals(lay.definedGlobals, vecBody(payload)))
		case lay.export:
			r := &reader{b: payload}
			n := r.u32()
			out = appendSection(out, secExport, newExports(n, payload[r.off:], fuel+1))
		case lay.code:
			code, err := instrumentCode(module, s, chk)
			if err != nil {
				return nil, err
			}
			out = appendSection(out, secCode, code)
		default:
			out = appendSection(out, s.id, payload)
		}
	}
	emitMissing(1 << 30)
	return out, nil
}

// readLayout counts the globals, finds the memory and the sections instrument rewrites, and
// refuses a module that exports ExportStop or whose sections are out of order.
func readLayout(module []byte, secs []section) (layout, error) {
	lay := layout{global: -1, export: -1, code: -1}
	last := 0
	for i, s := range secs {
		if s.id == secCustom {
			continue
		}
		rank, ok := sectionRank[s.id]
		if !ok {
			return lay, fmt.Errorf("a section of unknown id %d at byte %d", s.id, s.start)
		}
		if rank <= last {
			return lay, fmt.Errorf("section %d at byte %d is out of the binary format's order", s.id, s.start)
		}
		last = rank
		r := &reader{b: module[:s.end], off: s.start}
		switch s.id {
		case secImport:
			for n := r.u32(); n > 0 && r.err == nil; n-- {
				r.name()
				r.name()
				kind := r.byte()
				skipImportDesc(r, kind)
				switch kind {
				case kindGlobal:
					lay.importedGlobals++
				case kindMemory:
					lay.hasMemory = true
				}
			}
		case secMemory:
			lay.hasMemory = lay.hasMemory || r.u32() > 0
		case secGlobal:
			lay.global, lay.definedGlobals = i, r.u32()
		case secExport:
			lay.export = i
			for n := r.u32(); n > 0 && r.err == nil; n-- {
				name := r.name()
				r.byte()
				r.u32()
				if name == ExportStop && r.err == nil {
					return lay, fmt.Errorf("it exports %s, a name the host reserves for its stop flag", ExportStop)
				}
			}
		case secCode:
			lay.code = i
		case secStart:
			return lay, fmt.Errorf("it has a start section (function %d), which would run as it is instantiated, outside the start's time limit: a module is built as a reactor, started by its _initialize export", r.u32())
		}
		if r.err != nil {
			return lay, fmt.Errorf("section %d: %v", s.id, r.err)
		}
	}
	if lay.definedGlobals > 1<<20 || lay.importedGlobals > 1<<20 {
		return lay, fmt.Errorf("%d imported and %d defined globals, more than the host rewrites (%d)", lay.importedGlobals, lay.definedGlobals, 1<<20)
	}
	return lay, nil
}

// vecBody is a vector's payload without its count.
func vecBody(payload []byte) []byte {
	r := &reader{b: payload}
	r.u32()
	return payload[r.off:]
}

// newGlobals is a global section of the n globals in entries followed by $fuel and $stop.
func newGlobals(n uint32, entries []byte) []byte {
	b := appendU32(nil, n+2)
	b = append(b, entries...)
	b = append(b, typeI32, 1, opI32Const)
	b = appendS32(b, FuelPerCheck)
	b = append(b, opEnd)
	return append(b, typeI32, 1, opI32Const, 0, opEnd)
}

// newExports is an export section of the n exports in entries followed by $stop's.
func newExports(n uint32, entries []byte, stop uint32) []byte {
	b := appendU32(nil, n+1)
	b = append(b, entries...)
	b = appendU32(b, uint32(len(ExportStop)))
	b = append(b, ExportStop...)
	b = append(b, kindGlobal)
	return appendU32(b, stop)
}

// checkCode is the check inserted at function entries and loop heads (stack-neutral):
//
//	global.get $fuel; i32.const 1; i32.sub; global.set $fuel
//	global.get $fuel; i32.eqz
//	if
//	  i32.const FuelPerCheck; global.set $fuel
//	  i32.const 0; memory.grow 0; drop        ;; an exit into Go (left out without a memory)
//	  global.get $stop; if unreachable end
//	end
func checkCode(fuel, stop uint32, memory bool) []byte {
	get := func(b []byte, g uint32) []byte { return appendU32(append(b, opGlobalGet), g) }
	set := func(b []byte, g uint32) []byte { return appendU32(append(b, opGlobalSet), g) }
	b := get(nil, fuel)
	b = append(b, opI32Const, 1, opI32Sub)
	b = set(b, fuel)
	b = get(b, fuel)
	b = append(b, opI32Eqz, opIf, blockEmpty, opI32Const)
	b = appendS32(b, FuelPerCheck)
	b = set(b, fuel)
	if memory {
		b = append(b, opI32Const, 0, opMemoryGrow, 0, opDrop)
	}
	b = get(b, stop)
	return append(b, opIf, blockEmpty, opUnreachable, opEnd, opEnd)
}

// instrumentCode rewrites the code section s: the check after each body's locals and after
// each loop's block type; each body's size written again.
func instrumentCode(module []byte, s section, chk []byte) ([]byte, error) {
	r := &reader{b: module[:s.end], off: s.start}
	n := r.u32()
	out := make([]byte, 0, (s.end-s.start)+(s.end-s.start)/8)
	out = appendU32(out, n)
	var body []byte
	for i := uint32(0); i < n && r.err == nil; i++ {
		size := r.u32()
		start := r.off
		b := r.bytes(int(size))
		if r.err != nil {
			break
		}
		var err error
		body, err = instrumentBody(body[:0], b, start, chk)
		if err != nil {
			return nil, fmt.Errorf("function body %d: %v", i, err)
		}
		out = appendU32(out, uint32(len(body)))
		out = append(out, body...)
	}
	if r.err == nil && r.off != s.end {
		r.fail(fmt.Errorf("%d bytes after the last function body", s.end-r.off))
	}
	if r.err != nil {
		return nil, fmt.Errorf("the code section: %v", r.err)
	}
	return out, nil
}

// instrumentBody appends to out body (which starts at byte base of the module) with the check
// inserted.
func instrumentBody(out, body []byte, base int, chk []byte) ([]byte, error) {
	r := &reader{b: body}
	for n := r.u32(); n > 0 && r.err == nil; n-- {
		r.u32()
		if t := r.byte(); r.err == nil && !isValueType(t) {
			return nil, fmt.Errorf("a local of unknown type %#x at byte %d", t, base+r.off-1)
		}
	}
	last := r.off
	out = append(out, body[:last]...)
	out = append(out, chk...)
	for !r.done() {
		at := r.off
		op := r.byte()
		loop, err := skipImmediates(r, op)
		if err != nil {
			return nil, fmt.Errorf("%v at byte %d", err, base+at)
		}
		if loop && r.err == nil {
			out = append(out, body[last:r.off]...)
			out = append(out, chk...)
			last = r.off
		}
	}
	if r.err != nil {
		return nil, fmt.Errorf("%v (the body starts at byte %d)", r.err, base)
	}
	return append(out, body[last:]...), nil
}

func isValueType(t byte) bool {
	switch t {
	case typeI32, typeI64, typeF32, typeF64, typeV128, typeFuncref, typeExtern:
		return true
	}
	return false
}

func appendU32(b []byte, v uint32) []byte { return binary.AppendUvarint(b, uint64(v)) }

// appendS32 appends v as a signed LEB128.
func appendS32(b []byte, v int32) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func appendSection(b []byte, id byte, payload []byte) []byte {
	b = append(b, id)
	b = appendU32(b, uint32(len(payload)))
	return append(b, payload...)
}
