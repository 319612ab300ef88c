package wasmhost

import "fmt"

// The instructions of a function body, as instrument walks them: each opcode's immediates
// (core specification 2.0: MVP, sign extension, non-trapping conversions, bulk memory and
// table instructions, reference types, fixed-width SIMD — what wazero compiles by default).
// An opcode outside them (threads, tail calls, exceptions, relaxed SIMD...) is refused.

// Prefixes of multi-byte opcodes.
const (
	prefixMisc = 0xfc
	prefixSIMD = 0xfd
	opLoop     = 0x03
)

// skipImmediates reads past the immediates of op, whose byte r has just read; loop reports a
// loop (its block type read). An opcode it does not know is an error naming it.
func skipImmediates(r *reader, op byte) (loop bool, err error) {
	switch {
	case op == 0x00, op == 0x01, op == 0x05, op == 0x0b, op == 0x0f, op == 0x1a, op == 0x1b, op == 0xd1:
		// unreachable, nop, else, end, return, drop, select, ref.is_null
	case op >= 0x45 && op <= 0xc4:
		// numeric instructions, sign extension
	case op == 0x02, op == opLoop, op == 0x04:
		r.sleb(33) // block type: empty, a value type or a type index
		return op == opLoop, nil
	case op == 0x0c, op == 0x0d, op == 0x10, op >= 0x20 && op <= 0x26, op == 0xd2:
		// br, br_if, call, local.*, global.*, table.get/set, ref.func
		r.u32()
	case op == 0x0e: // br_table: the labels and the default
		for n := uint64(r.u32()) + 1; n > 0 && r.err == nil; n-- {
			r.u32()
		}
	case op == 0x11: // call_indirect: type, table
		r.u32()
		r.u32()
	case op == 0x1c: // select t*
		for n := r.u32(); n > 0 && r.err == nil; n-- {
			r.byte()
		}
	case op >= 0x28 && op <= 0x3e: // loads and stores: memarg
		r.u32()
		r.u32()
	case op == 0x3f, op == 0x40: // memory.size, memory.grow: the memory
		r.u32()
	case op == 0x41:
		r.sleb(32)
	case op == 0x42:
		r.sleb(64)
	case op == 0x43:
		r.bytes(4)
	case op == 0x44:
		r.bytes(8)
	case op == 0xd0: // ref.null: the reference type
		r.byte()
	case op == prefixMisc:
		return false, skipMisc(r)
	case op == prefixSIMD:
		return false, skipSIMD(r)
	default:
		return false, fmt.Errorf("an opcode %#x the host does not know", op)
	}
	return false, nil
}

// skipMisc reads a 0xfc instruction: saturating conversions, bulk memory and table operations.
func skipMisc(r *reader) error {
	sub := r.u32()
	if r.err != nil {
		return nil
	}
	switch sub {
	case 0, 1, 2, 3, 4, 5, 6, 7: // i*.trunc_sat_f*
	case 9, 11, 13, 15, 16, 17: // data.drop, memory.fill, elem.drop, table.grow/size/fill
		r.u32()
	case 8, 10, 12, 14: // memory.init, memory.copy, table.init, table.copy
		r.u32()
		r.u32()
	default:
		return fmt.Errorf("an opcode 0xfc %d the host does not know", sub)
	}
	return nil
}

// simdUndefined are the 0xfd opcodes below 256 that the SIMD proposal leaves unassigned.
var simdUndefined = map[uint32]bool{
	0x9a: true, 0xa2: true, 0xa5: true, 0xa6: true, 0xaf: true, 0xb0: true, 0xb2: true,
	0xb3: true, 0xb4: true, 0xbb: true, 0xc2: true, 0xc5: true, 0xc6: true, 0xcf: true,
	0xd0: true, 0xd2: true, 0xd3: true, 0xd4: true, 0xe2: true, 0xee: true,
}

// skipSIMD reads a 0xfd instruction (fixed-width SIMD).
func skipSIMD(r *reader) error {
	sub := r.u32()
	if r.err != nil {
		return nil
	}
	switch {
	case sub <= 0x0b, sub == 0x5c, sub == 0x5d: // v128.load*, v128.store, load*_zero: memarg
		r.u32()
		r.u32()
	case sub == 0x0c, sub == 0x0d: // v128.const, i8x16.shuffle
		r.bytes(16)
	case sub >= 0x15 && sub <= 0x22: // extract_lane, replace_lane
		r.byte()
	case sub >= 0x54 && sub <= 0x5b: // load*_lane, store*_lane: memarg, lane
		r.u32()
		r.u32()
		r.byte()
	case sub <= 0xff && !simdUndefined[sub]:
		// no immediates
	default:
		return fmt.Errorf("an opcode 0xfd %#x the host does not know", sub)
	}
	return nil
}
