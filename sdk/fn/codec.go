package fn

import (
	"encoding/binary"
	"errors"
	"math"
)

// NoTimestamp is the Time of a record without event time.
const NoTimestamp int64 = math.MinInt64

// The batch layout (wasmhost/DESIGN.md, "Batches").
const (
	inHeader  = 16
	outHeader = 24
	sameKey   = 1
	sameValue = 2
	sameTime  = 4
	// flushBytes: an Output hands what it holds to the host once it holds this much.
	flushBytes = 1 << 20
)

// Record is a record of a batch: its key, value and event time (ms since the Unix epoch,
// NoTimestamp for none). Key and Value are the SDK's buffer: valid during the call only (copy
// them to keep them).
type Record struct {
	Key, Value []byte
	Time       int64
	idx        uint32 // the record's index in its batch: the key of its state calls
}

var errShort = errors.New("fn: the batch is cut short")

// Output collects the records a handler emits, encoded into one buffer the SDK keeps from
// call to call.
type Output struct {
	buf []byte
	src uint32 // the index of the input record being handled
	n   int
	// flush hands the bytes held to the host (nil in tests: they stay in buf).
	flush func(b []byte)
}

// Emit emits a record of this key, value and time.
func (o *Output) Emit(key, value []byte, time int64) { o.add(0, key, value, time) }

// EmitValue emits a record of the input record's key and time with this value.
func (o *Output) EmitValue(value []byte) { o.add(sameKey|sameTime, nil, value, 0) }

// EmitKeyValue emits a record of the input record's time with this key and value.
func (o *Output) EmitKeyValue(key, value []byte) { o.add(sameTime, key, value, 0) }

// Forward emits the input record unchanged.
func (o *Output) Forward() { o.add(sameKey|sameValue|sameTime, nil, nil, 0) }

// Count is the number of records emitted in this call.
func (o *Output) Count() int { return o.n }

// add encodes an output record of the input record o.src into buf: the header written in
// place, the key and value copied after it unless flags keep the input's.
func (o *Output) add(flags uint32, key, value []byte, time int64) {
	if flags&sameKey != 0 {
		key = nil
	}
	if flags&sameValue != 0 {
		value = nil
	}
	size := outHeader + len(key) + len(value)
	if cap(o.buf)-len(o.buf) < size {
		o.grow(size)
	}
	at := len(o.buf)
	o.buf = o.buf[:at+size]
	b := o.buf[at:]
	binary.LittleEndian.PutUint32(b, o.src)
	binary.LittleEndian.PutUint32(b[4:], flags)
	binary.LittleEndian.PutUint32(b[8:], uint32(len(key)))
	binary.LittleEndian.PutUint32(b[12:], uint32(len(value)))
	binary.LittleEndian.PutUint64(b[16:], uint64(time))
	if len(key) > 0 {
		copy(b[outHeader:], key)
	}
	if len(value) > 0 {
		copy(b[outHeader+len(key):], value)
	}
	o.n++
	if len(o.buf) >= flushBytes && o.flush != nil {
		o.flush(o.buf)
		o.buf = o.buf[:0]
	}
}

// grow makes room for size more bytes in buf: at least double, at least 4 KiB.
func (o *Output) grow(size int) {
	b := make([]byte, len(o.buf), max(2*cap(o.buf), len(o.buf)+size, 4096))
	copy(b, o.buf)
	o.buf = b
}
