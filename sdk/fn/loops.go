package fn

import (
	"encoding/binary"
	"unsafe"
)

// handler is the handler of a call, of one kind's shape: the one field set says which.
type handler struct {
	mapF   func(r Record) (Record, error)    // MAP
	each   func(r Record, out *Output) error // FLAT_MAP, PROCESS, a timer
	filter func(r Record) (bool, error)      // FILTER
	keyBy  func(r Record) ([]byte, error)    // KEY_BY
}

// run runs h over the records of batch b into o: each record decoded in place (its Key and
// Value are views of b), the handler called directly, its output encoded into o's buffer. One
// loop, and per record one call of the handler and one of add: in a module a call, like a
// loop's iteration, costs far more than natively (docs/user-functions.md, "Performance"). No
// allocation per record or per batch once the buffers have grown (TestNoAllocationPerRecord).
func (o *Output) run(b []byte, h *handler) error {
	o.buf, o.n = o.buf[:0], 0
	scratch.reset()
	if len(b) < 4 {
		return errShort
	}
	n := binary.LittleEndian.Uint32(b)
	b = b[4:]
	// in and m are of the stack and reused: a Record is too large for the compiler to keep in
	// locals, so each zeroing or copy of one is a memory.fill or memory.copy, costly in a
	// module (DESIGN.md).
	var in, m Record
	for i := uint32(0); i < n; i++ {
		if len(b) < inHeader {
			return errShort
		}
		kl, vl := int(binary.LittleEndian.Uint32(b)), int(binary.LittleEndian.Uint32(b[4:]))
		t := int64(binary.LittleEndian.Uint64(b[8:]))
		b = b[inHeader:]
		if kl > len(b) || vl > len(b)-kl {
			return errShort
		}
		in.Key, in.Value, in.Time, in.idx = b[:kl:kl], b[kl:kl+vl:kl+vl], t, i
		b = b[kl+vl:]
		o.src = i
		var err error
		switch {
		case h.mapF != nil:
			if m, err = h.mapF(in); err == nil {
				o.add(mapped(&in, &m), m.Key, m.Value, m.Time)
			}
		case h.each != nil:
			err = h.each(in, o)
		case h.filter != nil:
			keep, ferr := h.filter(in)
			if err = ferr; err == nil && keep {
				o.add(sameKey|sameValue|sameTime, nil, nil, 0)
			}
		default:
			k, ferr := h.keyBy(in)
			if err = ferr; err == nil {
				o.add(sameValue|sameTime, k, nil, 0)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// mapped is the flags of the record r a map handler returned for in: the fields it kept
// (same bytes, same time) are flagged, and add leaves them out.
func mapped(in, r *Record) (flags uint32) {
	if same(in.Key, r.Key) {
		flags |= sameKey
	}
	if same(in.Value, r.Value) {
		flags |= sameValue
	}
	if in.Time == r.Time {
		flags |= sameTime
	}
	return flags
}

// same reports whether a and b are the same bytes of the same buffer.
func same(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || unsafe.SliceData(a) == unsafe.SliceData(b))
}
