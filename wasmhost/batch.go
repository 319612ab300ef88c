package wasmhost

import (
	"encoding/binary"
	"fmt"
)

// The batch layout (DESIGN.md, "Batches"); every integer little-endian.
//
//	input  := count u32, count × (key_len u32, value_len u32, time i64, key, value)
//	output := any number of (src u32, flags u32, key_len u32, value_len u32, time i64, key, value)
//
// An output record names the input record it comes from (src, its index in the batch); flags
// say which of its fields it keeps from that record, whose bytes are then left out.
const (
	// InHeader and OutHeader are the sizes of a record's header in a batch.
	InHeader  = 16
	OutHeader = 24
	// SameKey, SameValue and SameTime are the flags of an output record: the field is the
	// input record's (its length is 0 and no bytes follow).
	SameKey   = 1
	SameValue = 2
	SameTime  = 4
	// allFlags is every flag; another bit is an error.
	allFlags = SameKey | SameValue | SameTime
)

// Batch is an input batch being built. The zero Batch is empty.
type Batch struct {
	buf []byte
	n   int
}

// Reset empties b, keeping its buffer.
func (b *Batch) Reset() {
	b.buf, b.n = b.buf[:0], 0
}

// Add appends a record.
func (b *Batch) Add(key, value []byte, time int64) {
	if len(b.buf) == 0 {
		b.buf = append(b.buf, 0, 0, 0, 0)
	}
	b.buf = binary.LittleEndian.AppendUint32(b.buf, uint32(len(key)))
	b.buf = binary.LittleEndian.AppendUint32(b.buf, uint32(len(value)))
	b.buf = binary.LittleEndian.AppendUint64(b.buf, uint64(time))
	b.buf = append(b.buf, key...)
	b.buf = append(b.buf, value...)
	b.n++
}

// Len is the number of records; Size the bytes of the encoded batch.
func (b *Batch) Len() int  { return b.n }
func (b *Batch) Size() int { return len(b.buf) }

// Bytes is the encoded batch (valid until the next Add or Reset).
func (b *Batch) Bytes() []byte {
	if len(b.buf) == 0 {
		b.buf = append(b.buf, 0, 0, 0, 0)
	}
	binary.LittleEndian.PutUint32(b.buf, uint32(b.n))
	return b.buf
}

// Out is an output record of a call. Key and Value are nil where Flags keep the input's.
type Out struct {
	Src        uint32
	Flags      uint32
	Key, Value []byte
	Time       int64
}

// Decode reads the output records of a call whose batch had n records, in order, calling f
// with each. The Key and Value of an Out alias b. A record that names no input record, goes
// back in the batch, sets an unknown flag or is cut short is an error.
func Decode(b []byte, n int, f func(o Out) error) error {
	var last uint32
	for i := 0; len(b) > 0; i++ {
		if len(b) < OutHeader {
			return fmt.Errorf("output record %d is cut short: %d bytes left, a header is %d", i, len(b), OutHeader)
		}
		o := Out{
			Src:   binary.LittleEndian.Uint32(b),
			Flags: binary.LittleEndian.Uint32(b[4:]),
			Time:  int64(binary.LittleEndian.Uint64(b[16:])),
		}
		kl, vl := uint64(binary.LittleEndian.Uint32(b[8:])), uint64(binary.LittleEndian.Uint32(b[12:]))
		b = b[OutHeader:]
		switch {
		case int(o.Src) >= n:
			return fmt.Errorf("output record %d names input record %d of a batch of %d", i, o.Src, n)
		case o.Src < last:
			return fmt.Errorf("output record %d names input record %d after one of record %d: outputs go in the order of their inputs", i, o.Src, last)
		case o.Flags&^allFlags != 0:
			return fmt.Errorf("output record %d has flags %#x: only SameKey 1, SameValue 2, SameTime 4 are defined", i, o.Flags)
		case kl+vl > uint64(len(b)):
			return fmt.Errorf("output record %d is cut short: key %d and value %d bytes, %d left", i, kl, vl, len(b))
		}
		last = o.Src
		if o.Flags&SameKey == 0 {
			o.Key = b[:kl:kl]
		}
		if o.Flags&SameValue == 0 {
			o.Value = b[kl : kl+vl : kl+vl]
		}
		b = b[kl+vl:]
		if err := f(o); err != nil {
			return err
		}
	}
	return nil
}
