package operator

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Record is the unit of data flowing between operators: a key and a value of arbitrary
// bytes, an event time, and the lineage the checkers use (the source subtask it came from
// and its sequence number there). A record is data unless it is a control element: a
// checkpoint's barrier (Barrier non-zero) or a watermark (Watermark, at Time). The TaskManager
// handles control elements; operators never see one.
//
// Key and Value are never changed in place once emitted (a record broadcast to several
// subpartitions, or read by a local channel, shares them): an operator makes a new slice for
// a new value (Context.Int64Bytes for a number).
type Record struct {
	Key   []byte
	Value []byte
	// Time is the record's event time in milliseconds since the Unix epoch, NoTimestamp when
	// it has none; a watermark's time.
	Time int64
	Seq  int64 // sequence number at the source subtask
	// Barrier, when non-zero, makes the record the barrier of that checkpoint instead of data
	// (docs/checkpoints.md).
	Barrier uint64
	Origin  int32 // source subtask index
	// Watermark makes the record a watermark at Time instead of data: no record of an event
	// time at or before it is to follow on its channel.
	Watermark bool
	// Idle, with Watermark, tells the consumer the channel is idle (Time unset): it holds
	// back no watermark until its next record or watermark.
	Idle bool
}

// RecordOverhead is the bytes of a Record besides its key's and value's: two slice headers,
// time, seq, barrier, origin and the watermark and idle flags (TestRecordOverhead).
const RecordOverhead = 80

// NoTimestamp is the Time of a record without event time.
const NoTimestamp int64 = math.MinInt64

// Control reports whether r is a control element (a barrier or a watermark), not data.
func (r *Record) Control() bool { return r.Barrier != 0 || r.Watermark }

// Size is what a record's key and value hold, the size MaxRecordSize limits (a Record itself
// is RecordOverhead bytes in memory).
func (r *Record) Size() int { return len(r.Key) + len(r.Value) }

// The built-in numeric operators' records: a number is 8 bytes, big endian (two's
// complement), in the key and in the value. Int64Bytes and PutInt64 write one; Int64Of reads
// one.

// Int64Size is the length of a numeric key or value.
const Int64Size = 8

// Int64Bytes returns n as 8 bytes, big endian, in a new slice.
func Int64Bytes(n int64) []byte {
	return binary.BigEndian.AppendUint64(make([]byte, 0, Int64Size), uint64(n))
}

// Int64Of reads a numeric key or value: false for one that is not 8 bytes.
func Int64Of(b []byte) (int64, bool) {
	if len(b) != Int64Size {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(b)), true
}

// NumericRecord is a record of the built-in numeric operators: key and value as 8 bytes each,
// from one allocation, and no event time.
func NumericRecord(key, value int64, origin int32, seq int64) Record {
	b := make([]byte, 2*Int64Size)
	binary.BigEndian.PutUint64(b, uint64(key))
	binary.BigEndian.PutUint64(b[Int64Size:], uint64(value))
	return Record{Key: b[:Int64Size:Int64Size], Value: b[Int64Size:], Time: NoTimestamp, Origin: origin, Seq: seq}
}

// ErrNotNumeric: a numeric operator got a key or value that is not 8 bytes.
var ErrNotNumeric = fmt.Errorf("not a number (%d bytes, big endian)", Int64Size)

// numericValue reads r's value for the numeric operator kind.
func numericValue(kind string, r *Record) (int64, error) {
	v, ok := Int64Of(r.Value)
	if !ok {
		return 0, fmt.Errorf("%s: the value of record %d/%d is %d bytes: %w", kind, r.Origin, r.Seq, len(r.Value), ErrNotNumeric)
	}
	return v, nil
}

// slab hands out 8-byte slices carved from a larger one: a numeric operator's new values cost
// an allocation per slabNumbers records, not one each. A slice handed out is never reused
// (records downstream keep it); the slab's memory is freed when none of its slices is held.
type slab struct{ buf []byte }

// slabNumbers is the numbers one slab allocation holds.
const slabNumbers = 512

// int64Bytes returns n as 8 bytes, big endian, of the slab.
func (s *slab) int64Bytes(n int64) []byte {
	if len(s.buf) < Int64Size {
		s.buf = make([]byte, slabNumbers*Int64Size)
	}
	b := s.buf[:Int64Size:Int64Size]
	s.buf = s.buf[Int64Size:]
	binary.BigEndian.PutUint64(b, uint64(n))
	return b
}
