package fn

// Scratch returns n zero bytes of the call's scratch memory, as make([]byte, n) would, but
// without a garbage-collected allocation: the bytes are valid until the call (the batch)
// returns, and the next call reuses them. A handler builds a record's new key or value in
// them (the SDK copies what a handler emits or returns before the call returns):
//
//	v := fn.Scratch(len(r.Value))
//	for i, c := range r.Value { ... v[i] = ... }
//	r.Value = v
//
// The slice's capacity is n: an append past it allocates (the bytes after it are another
// Scratch's). Keeping the bytes past the call (in a global, in the state without SetState's
// copy) is a bug: the next call overwrites them. An allocation inside a module is costly
// (docs/user-functions.md, "Performance"); Scratch is a bump of an offset.
func Scratch(n int) []byte {
	if n < 0 {
		panic("fn.Scratch: a negative size")
	}
	a := &scratch
	if n > len(a.buf)-a.off {
		a.more(n)
	}
	b := a.buf[a.off : a.off+n : a.off+n]
	a.off += n
	return b
}

// scratch is the memory of Scratch: one chunk, handed out from off on, cleared and reused at
// each call.
var scratch arena

const (
	// arenaMinBytes is the arena's first chunk.
	arenaMinBytes = 64 << 10
	// arenaKeepBytes: a chunk larger than this is dropped at the call's end, not kept for the
	// next (a call that needed much memory does not hold it for good).
	arenaKeepBytes = 4 << 20
)

type arena struct {
	buf []byte
	off int // buf[:off] is handed out in this call
}

// more replaces the chunk by one with room for n bytes (at least double): the old chunk stays
// valid for the slices handed out of it, and is garbage once they are.
func (a *arena) more(n int) {
	a.buf, a.off = make([]byte, max(2*len(a.buf), n, arenaMinBytes)), 0
}

// reset makes the whole chunk free again, zeroed, at a call's start.
func (a *arena) reset() {
	if len(a.buf) > arenaKeepBytes {
		a.buf = nil
	} else {
		clear(a.buf[:a.off])
	}
	a.off = 0
}
