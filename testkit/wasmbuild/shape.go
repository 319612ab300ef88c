package wasmbuild

// Shape is a WebAssembly module written byte by byte, for a test that needs a module's shape
// (what it imports and exports, its size) and not a function that runs: the JobMaster's check
// at submit reads only that. It exports a memory, jm_alloc and Functions, each a function of
// no parameter and no result that returns at once (calling one is not the ABI: a task of it
// fails), and a custom section that pads it to Size bytes with bytes that Seed varies (so
// modules of one size differ). With InvalidCode, every function's body pops an operand that
// is not there: the module's imports and exports are in order, but it does not validate, so
// it does not compile.
type Shape struct {
	Functions   []string
	Size        int // at least; 0: as small as it gets
	Seed        byte
	InvalidCode bool
}

// Bytes is the module.
func (s Shape) Bytes() []byte {
	n := 1 + len(s.Functions) // jm_alloc, then Functions
	out := []byte("\x00asm\x01\x00\x00\x00")
	out = section(out, 1, []byte{1, 0x60, 0, 0}) // one type: func() -> ()
	funcs := uleb(nil, n)
	for range n {
		funcs = append(funcs, 0)
	}
	out = section(out, 3, funcs)
	out = section(out, 5, []byte{1, 0, 1}) // one memory of 1 page at least
	exports := uleb(nil, n+1)
	exports = export(exports, "memory", 2, 0)
	exports = export(exports, "jm_alloc", 0, 0)
	for i, f := range s.Functions {
		exports = export(exports, f, 0, i+1)
	}
	out = section(out, 7, exports)
	body := []byte{2, 0, 0x0b} // size, no locals, end
	if s.InvalidCode {
		body = []byte{3, 0, 0x6a, 0x0b} // i32.add on an empty stack
	}
	code := uleb(nil, n)
	for range n {
		code = append(code, body...)
	}
	out = section(out, 10, code)
	if s.Size == 0 {
		return out
	}
	return pad(out, s.Size, s.Seed)
}

// pad appends a custom section "pad" that makes module size bytes long (or as short as a
// custom section gets, when it is near that already: one byte of content, as wazero reads
// no empty one).
func pad(module []byte, size int, seed byte) []byte {
	const name = "pad"
	head := 1 + 5 + 1 + len(name) // id, size as 5 bytes at most, the name's length and name
	fill := max(size-len(module)-head, 1)
	payload := append(uleb(nil, len(name)), name...)
	for i := range fill {
		payload = append(payload, byte(i>>8)^byte(i*31)^seed)
	}
	// The payload's size as a LEB128 of exactly 5 bytes (padded), so the size comes out exact.
	out := append(module, 0)
	v := len(payload)
	for i := range 5 {
		b := byte(v & 0x7f)
		v >>= 7
		if i < 4 {
			b |= 0x80
		}
		out = append(out, b)
	}
	return append(out, payload...)
}

func section(out []byte, id byte, payload []byte) []byte {
	out = append(out, id)
	out = uleb(out, len(payload))
	return append(out, payload...)
}

func export(out []byte, name string, kind byte, index int) []byte {
	out = uleb(out, len(name))
	out = append(out, name...)
	out = append(out, kind)
	return uleb(out, index)
}

// uleb appends v as an unsigned LEB128.
func uleb(out []byte, v int) []byte {
	for {
		b := byte(v & 0x7f)
		v >>= 7
		if v == 0 {
			return append(out, b)
		}
		out = append(out, b|0x80)
	}
}
