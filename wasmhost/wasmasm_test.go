package wasmhost

import "bytes"

// A few helpers that write WebAssembly modules by hand, for the tests of instrument.go.

func leb(v int) []byte { return appendU32(nil, uint32(v)) }

// vec is a vector: its count and its items.
func vec(items ...[]byte) []byte {
	b := leb(len(items))
	for _, it := range items {
		b = append(b, it...)
	}
	return b
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func str(s string) []byte { return append(leb(len(s)), s...) }

// sec is a section of id whose payload is the vector of items.
func sec(id byte, items ...[]byte) []byte { return appendSection(nil, id, vec(items...)) }

// custom is a custom section.
func custom(name string, data []byte) []byte {
	return appendSection(nil, secCustom, cat(str(name), data))
}

// wmod is a module of the sections.
func wmod(sections ...[]byte) []byte {
	return cat(append([][]byte{wasmMagic, wasmVersion}, sections...)...)
}

// body is a function body: its locals (a vector of (count, type)) and its code, with its size.
func body(locals []byte, code ...byte) []byte {
	b := cat(locals, code)
	return cat(leb(len(b)), b)
}

// Types and exports.
var (
	noLocals = vec()
	typeVV   = []byte{0x60, 0, 0}                       // () -> ()
	typeII   = []byte{0x60, 1, typeI32, 1, typeI32}     // (i32) -> i32
	memory1  = sec(secMemory, []byte{0, 1})             // one memory of one page
	table1   = sec(secTable, []byte{typeFuncref, 0, 1}) // one funcref table of one element
)

func export(name string, kind byte, idx int) []byte { return cat(str(name), []byte{kind}, leb(idx)) }

// v128 is v128.const 0.
func v128() []byte { return append([]byte{prefixSIMD, 0x0c}, make([]byte, 16)...) }

// instructionsBody is a body of type () -> () that uses an instruction of each group the
// decoder knows: SIMD (memarg, 16-byte, lane and multi-byte opcodes), bulk memory and
// tables, reference types, select t*, saturating conversions, sign extension, block types.
func instructionsBody() []byte {
	shuffle := append([]byte{prefixSIMD, 0x0d}, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
	return body(vec([]byte{1, typeI64}), cat(
		v128(), v128(), v128(), shuffle, []byte{prefixSIMD, 0x1b, 0, opDrop, opDrop}, // extract_lane
		v128(), v128(), []byte{prefixSIMD, 0xae, 0x01, opDrop}, // i32x4.add
		[]byte{opI32Const, 0, prefixSIMD, 0x00, 4, 0, opDrop}, // v128.load
		[]byte{opI32Const, 0}, v128(), []byte{prefixSIMD, 0x54, 0, 0, 0, opDrop}, // load8_lane
		[]byte{opI32Const, 0, opI32Const, 0, opI32Const, 0, prefixMisc, 10, 0, 0}, // memory.copy
		[]byte{opI32Const, 0, opI32Const, 0, opI32Const, 0, prefixMisc, 11, 0},    // memory.fill
		[]byte{0xd0, typeFuncref, opI32Const, 1, prefixMisc, 15, 0, opDrop},       // table.grow
		[]byte{opI32Const, 0, 0x25, 0, 0xd1, opDrop},                              // table.get, ref.is_null
		[]byte{0xd2, 0, opDrop}, // ref.func
		[]byte{opI32Const, 1, opI32Const, 2, opI32Const, 1, 0x1c, 1, typeI32, opDrop},             // select t*
		[]byte{0x43, 0, 0, 0x80, 0x3f, prefixMisc, 0, opDrop},                                     // i32.trunc_sat_f32_s
		[]byte{0x42, 0x7f, 0xc4, 0x21, 0},                                                         // i64.extend32_s, local.set
		[]byte{opLoop, typeI32, opI32Const, 7, opEnd, opDrop},                                     // a loop of a value type
		[]byte{0x02, 0x00, opEnd},                                                                 // a block of type index 0
		[]byte{0x02, blockEmpty, 0x02, blockEmpty, opI32Const, 0, 0x0e, 2, 0, 1, 0, opEnd, opEnd}, // br_table
		[]byte{opEnd},
	)...)
}

// instructionsModule is a module of instructionsBody, with a memory, a table, a global, its
// function exported, a name section and a DWARF section.
func instructionsModule() []byte {
	return wmod(
		sec(secType, typeVV),
		sec(secFunction, leb(0)),
		table1,
		memory1,
		sec(secGlobal, []byte{typeI32, 0, opI32Const, 42, opEnd}),
		sec(secExport, export("f", kindFunc, 0), export("g", kindGlobal, 0)),
		sec(secCode, instructionsBody()),
		custom(".debug_info", []byte{1, 2, 3}),
		custom("name", nil),
	)
}

// loopsModule is a module without globals or exports whose function loops 1000 times.
func loopsModule() []byte {
	return wmod(
		sec(secType, typeII),
		sec(secFunction, leb(0)),
		sec(secCode, body(noLocals,
			opLoop, blockEmpty,
			0x20, 0, opI32Const, 1, opI32Sub, 0x22, 0, // local.tee
			0x0d, 0, // br_if 0
			opEnd,
			0x20, 0, opEnd)),
	)
}

// hostileModule follows the ABI (a memory, jm_alloc) and exports functions that never end:
//   - nested: a loop of 1000 iterations inside a loop without end;
//   - tree(n): calls itself twice with n-1 down to 0 (2^n calls, no loop at all);
//   - recloop(n): calls itself down to depth n, then loops there.
func hostileModule() []byte {
	get, sub1 := []byte{0x20, 0}, []byte{opI32Const, 1, opI32Sub}
	return wmod(
		sec(secType, typeII),
		sec(secFunction, leb(0), leb(0), leb(0), leb(0)),
		memory1,
		sec(secExport, export("memory", kindMemory, 0), export(ExportAlloc, kindFunc, 0),
			export("nested", kindFunc, 1), export("tree", kindFunc, 2), export("recloop", kindFunc, 3)),
		sec(secCode,
			body(noLocals, opI32Const, 0x80, 0x08, opEnd), // 1024
			body(noLocals, cat(
				[]byte{opLoop, blockEmpty, opI32Const, 0, 0x21, 0},                    // local.set 0
				[]byte{opLoop, blockEmpty}, get, []byte{opI32Const, 1, 0x6a, 0x22, 0}, // i32.add, local.tee
				[]byte{opI32Const, 0xe8, 0x07, 0x49, 0x0d, 0, opEnd}, // < 1000: br_if 0
				[]byte{0x0c, 0, opEnd, opI32Const, 0, opEnd},         // br 0
			)...),
			body(noLocals, cat(
				get, []byte{opI32Eqz, opIf, typeI32, opI32Const, 0, 0x05}, // if n == 0: 0, else
				get, sub1, []byte{0x10, 2}, get, sub1, []byte{0x10, 2, 0x6a, opEnd, opEnd},
			)...),
			body(noLocals, cat(
				get, []byte{opIf, blockEmpty}, get, sub1, []byte{0x10, 3, opDrop, opEnd},
				[]byte{opLoop, blockEmpty, 0x0c, 0, opEnd, opI32Const, 0, opEnd},
			)...),
		),
	)
}
