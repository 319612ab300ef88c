package wasmhost

import (
	"bytes"
	"errors"
	"fmt"
	"unicode/utf8"
)

// The WebAssembly binary format (core specification, "Binary Format"): the parts the host
// reads without compiling a module (Inspect, Check) and rewrites (instrument.go).

// Section ids.
const (
	secCustom   = 0
	secType     = 1
	secImport   = 2
	secFunction = 3
	secTable    = 4
	secMemory   = 5
	secGlobal   = 6
	secExport   = 7
	secStart    = 8
	secElement  = 9
	secCode     = 10
	secData     = 11
	secDataCnt  = 12
)

// Import and export kinds.
const (
	kindFunc   = 0
	kindTable  = 1
	kindMemory = 2
	kindGlobal = 3
)

var wasmVersion = []byte{1, 0, 0, 0}

// errTruncated: a read past the end of what it reads.
var errTruncated = errors.New("truncated")

// reader reads the binary format's values from b; the first error sticks (err), and every
// later read returns zero.
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) fail(err error) {
	if r.err == nil {
		r.err = fmt.Errorf("at byte %d: %w", r.off, err)
	}
}

func (r *reader) done() bool { return r.err != nil || r.off >= len(r.b) }

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if r.off >= len(r.b) {
		r.fail(errTruncated)
		return 0
	}
	c := r.b[r.off]
	r.off++
	return c
}

// u32 reads an unsigned LEB128 of at most 32 bits.
func (r *reader) u32() uint32 {
	var v uint32
	for shift := uint(0); shift < 35; shift += 7 {
		c := r.byte()
		if r.err != nil {
			return 0
		}
		v |= uint32(c&0x7f) << shift
		if c&0x80 == 0 {
			if shift == 28 && c > 0x0f {
				r.fail(errors.New("an unsigned 32-bit integer overflows"))
				return 0
			}
			return v
		}
	}
	r.fail(errors.New("an unsigned 32-bit integer runs over 5 bytes"))
	return 0
}

// sleb skips a signed LEB128 of at most bits bits (the immediates of const instructions and
// block types: the host never needs their value).
func (r *reader) sleb(bits uint) {
	for n := uint(0); n < (bits+6)/7; n++ {
		if r.byte()&0x80 == 0 {
			return
		}
	}
	r.fail(fmt.Errorf("a signed %d-bit integer runs over %d bytes", bits, (bits+6)/7))
}

func (r *reader) bytes(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b)-r.off {
		r.fail(errTruncated)
		return nil
	}
	b := r.b[r.off : r.off+n]
	r.off += n
	return b
}

func (r *reader) name() string {
	b := r.bytes(int(r.u32()))
	if r.err == nil && !utf8.Valid(b) {
		r.fail(errors.New("a name is not UTF-8"))
	}
	return string(b)
}

// section is one section of a module: its id and its payload (module[start:end]).
type section struct {
	id         byte
	start, end int
	name       string // a custom section's name
}

// sections checks module's magic and version and splits it into its sections, in order.
func sections(module []byte) ([]section, error) {
	if !bytes.HasPrefix(module, wasmMagic) {
		head := module[:min(len(module), 8)]
		return nil, fmt.Errorf("%w: it starts with %q, not the magic %q (%d bytes)", ErrNotWasm, head, wasmMagic, len(module))
	}
	if len(module) < 8 || !bytes.Equal(module[4:8], wasmVersion) {
		return nil, fmt.Errorf("%w: the binary format version is %x, not 1 (a WebAssembly component or another format is not a core module)", ErrInvalid, module[4:min(len(module), 8)])
	}
	r := &reader{b: module, off: 8}
	var out []section
	for !r.done() {
		id := r.byte()
		size := int(r.u32())
		start := r.off
		r.bytes(size)
		if r.err != nil {
			return nil, fmt.Errorf("%w: section %d: %v", ErrInvalid, id, r.err)
		}
		s := section{id: id, start: start, end: start + size}
		if id == secCustom {
			cr := &reader{b: module[:s.end], off: start}
			s.name = cr.name()
		}
		out = append(out, s)
	}
	return out, nil
}

// Import is one import of a module.
type Import struct {
	Module, Name string
	Kind         byte // kindFunc, kindTable, kindMemory, kindGlobal
}

// Export is one export of a module.
type Export struct {
	Name string
	Kind byte
}

// ModuleInfo is what Inspect reads of a module: its imports and exports, in order.
type ModuleInfo struct {
	Imports []Import
	Exports []Export
	Start   bool // it has a start section
}

// Inspect reads module's imports and exports without compiling it (a JobMaster checks a
// job's modules with it at submit: milliseconds for a module that takes seconds to compile).
// The error wraps ErrNotWasm or ErrInvalid.
func Inspect(module []byte) (*ModuleInfo, error) {
	secs, err := sections(module)
	if err != nil {
		return nil, err
	}
	info := &ModuleInfo{}
	for _, s := range secs {
		r := &reader{b: module[:s.end], off: s.start}
		switch s.id {
		case secStart:
			info.Start = true
		case secImport:
			for n := r.u32(); n > 0 && r.err == nil; n-- {
				im := Import{Module: r.name(), Name: r.name(), Kind: r.byte()}
				skipImportDesc(r, im.Kind)
				info.Imports = append(info.Imports, im)
			}
		case secExport:
			for n := r.u32(); n > 0 && r.err == nil; n-- {
				e := Export{Name: r.name(), Kind: r.byte()}
				r.u32()
				info.Exports = append(info.Exports, e)
			}
		}
		if r.err != nil {
			return nil, fmt.Errorf("%w: section %d: %v", ErrInvalid, s.id, r.err)
		}
	}
	return info, nil
}

// skipImportDesc reads past an import's type.
func skipImportDesc(r *reader, kind byte) {
	switch kind {
	case kindFunc:
		r.u32() // type index
	case kindTable:
		r.byte() // reference type
		skipLimits(r)
	case kindMemory:
		skipLimits(r)
	case kindGlobal:
		r.byte() // value type
		r.byte() // mutability
	default:
		r.fail(fmt.Errorf("an import of unknown kind %#x", kind))
	}
}

func skipLimits(r *reader) {
	flags := r.byte()
	r.u32()
	if flags&1 != 0 {
		r.u32()
	}
}

// HasExport reports whether the module exports a function name.
func (m *ModuleInfo) HasExport(name string) bool {
	for _, e := range m.Exports {
		if e.Kind == kindFunc && e.Name == name {
			return true
		}
	}
	return false
}
