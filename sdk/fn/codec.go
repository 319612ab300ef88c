package fn

import (
	"encoding/binary"
	"errors"
	"math"
	"unsafe"
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

// decode calls f with each record of batch b.
func decode(b []byte, f func(r Record) error) error {
	if len(b) < 4 {
		return errShort
	}
	n := binary.LittleEndian.Uint32(b)
	b = b[4:]
	for i := uint32(0); i < n; i++ {
		if len(b) < inHeader {
			return errShort
		}
		kl, vl := uint64(binary.LittleEndian.Uint32(b)), uint64(binary.LittleEndian.Uint32(b[4:]))
		t := int64(binary.LittleEndian.Uint64(b[8:]))
		b = b[inHeader:]
		if kl+vl > uint64(len(b)) {
			return errShort
		}
		r := Record{Key: b[:kl:kl], Value: b[kl : kl+vl : kl+vl], Time: t, idx: i}
		b = b[kl+vl:]
		if err := f(r); err != nil {
			return err
		}
	}
	return nil
}

// Output collects the records a handler emits.
type Output struct {
	buf []byte
	cur Record // the input record being handled
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

func (o *Output) add(flags uint32, key, value []byte, time int64) {
	b := o.buf
	b = binary.LittleEndian.AppendUint32(b, o.cur.idx)
	b = binary.LittleEndian.AppendUint32(b, flags)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(key)))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(value)))
	b = binary.LittleEndian.AppendUint64(b, uint64(time))
	b = append(b, key...)
	o.buf = append(b, value...)
	o.n++
	if len(o.buf) >= flushBytes && o.flush != nil {
		o.flush(o.buf)
		o.buf = o.buf[:0]
	}
}

// emitMapped emits the record a map handler returned for in: the fields it kept are flagged,
// not copied.
func (o *Output) emitMapped(in, r Record) {
	var flags uint32
	key, value := r.Key, r.Value
	if same(in.Key, r.Key) {
		flags, key = flags|sameKey, nil
	}
	if same(in.Value, r.Value) {
		flags, value = flags|sameValue, nil
	}
	if in.Time == r.Time {
		flags |= sameTime
	}
	o.add(flags, key, value, r.Time)
}

// same reports whether a and b are the same bytes of the same buffer.
func same(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || unsafe.SliceData(a) == unsafe.SliceData(b))
}

// handle runs each over the records of batch b into o.
func (o *Output) handle(b []byte, each func(r Record, o *Output) error) error {
	o.buf, o.n = o.buf[:0], 0
	return decode(b, func(r Record) error {
		o.cur = r
		return each(r, o)
	})
}

// The kinds' handlers as one shape.

func mapEach(f func(r Record) (Record, error)) func(Record, *Output) error {
	return func(r Record, o *Output) error {
		m, err := f(r)
		if err == nil {
			o.emitMapped(r, m)
		}
		return err
	}
}

func filterEach(f func(r Record) (bool, error)) func(Record, *Output) error {
	return func(r Record, o *Output) error {
		keep, err := f(r)
		if err == nil && keep {
			o.Forward()
		}
		return err
	}
}

func keyByEach(f func(r Record) ([]byte, error)) func(Record, *Output) error {
	return func(r Record, o *Output) error {
		k, err := f(r)
		if err == nil {
			o.add(sameValue|sameTime, k, nil, 0)
		}
		return err
	}
}
