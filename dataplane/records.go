package dataplane

import (
	"encoding/binary"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/operator"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// RecordFormat is the record format this build reads and sends (ExchangeRequest and
// ReadPartitionRequest carry it): key and value of bytes, event time, watermarks. A consumer
// that sends none reads the int64 format only (a build before bytes records).
const RecordFormat = uint32(pb.RecordFormat_RECORD_FORMAT_BYTES)

// recordFormat is the record format this plane's consumers ask for.
func (dp *Plane) recordFormat() uint32 {
	if dp.cfg.Int64Records {
		return uint32(pb.RecordFormat_RECORD_FORMAT_INT64)
	}
	return RecordFormat
}

// emptyBytes is the value of an empty key or value on the wire: set (non-nil), so that it is
// not read as the int64 0.
var emptyBytes = []byte{}

// ErrOlderConsumer: a record cannot travel to a consumer of the int64 record format without
// losing what it carries.
var ErrOlderConsumer = fmt.Errorf("the consumer reads records of the int64 format only (record format %d: a TaskManager before bytes records)", pb.RecordFormat_RECORD_FORMAT_INT64)

// toPB converts records for the wire of a consumer that reads format, with one allocation per
// batch. A numeric key or value (8 bytes) travels as the int64 of its big-endian bytes,
// another as bytes. A consumer of the int64 format is sent the records it reads whole
// (numeric key and value, no event time, no watermark, no idle marker); for another the channel fails with
// FAILED_PRECONDITION naming the record and what the consumer would lose.
func toPB(rs []operator.Record, format uint32) ([]*pb.Record, error) {
	if len(rs) == 0 {
		return nil, nil
	}
	older := format < RecordFormat
	buf := make([]pb.Record, len(rs))
	out := make([]*pb.Record, len(rs))
	for i := range rs {
		r, w := &rs[i], &buf[i]
		w.Origin, w.Seq, w.Barrier = r.Origin, r.Seq, r.Barrier
		if older {
			if err := int64Format(r); err != nil {
				return nil, err
			}
		}
		if r.Watermark {
			if w.Watermark, w.Idle = true, r.Idle; !r.Idle {
				w.Time, w.HasTime = r.Time, true
			}
			out[i] = w
			continue
		}
		if r.Barrier == 0 {
			w.Key, w.KeyBytes = wireBytes(r.Key)
			w.Value, w.ValueBytes = wireBytes(r.Value)
		}
		if r.Time != operator.NoTimestamp && r.Barrier == 0 {
			w.Time, w.HasTime = r.Time, true
		}
		out[i] = w
	}
	return out, nil
}

// int64Format refuses a record the int64 format cannot carry whole.
func int64Format(r *operator.Record) error {
	var lost string
	switch {
	case r.Watermark && r.Idle:
		lost = "an idle marker (a watermark), which it would read as a record"
	case r.Watermark:
		lost = "a watermark, which it would read as a record"
	case r.Barrier != 0:
		return nil
	case len(r.Key) != operator.Int64Size || len(r.Value) != operator.Int64Size:
		lost = fmt.Sprintf("record %d/%d has a key of %d bytes and a value of %d bytes, which it cannot read (it reads 8-byte numbers only)", r.Origin, r.Seq, len(r.Key), len(r.Value))
	case r.Time != operator.NoTimestamp:
		lost = fmt.Sprintf("record %d/%d has an event time, which it would lose", r.Origin, r.Seq)
	default:
		return nil
	}
	return status.Errorf(codes.FailedPrecondition, "%v: %s; upgrade the consumer's TaskManager", ErrOlderConsumer, lost)
}

// wireBytes is a key or value on the wire: the int64 of a numeric one, else its bytes.
func wireBytes(b []byte) (int64, []byte) {
	if len(b) == operator.Int64Size {
		return int64(binary.BigEndian.Uint64(b)), nil
	}
	if b == nil {
		return 0, emptyBytes
	}
	return 0, b
}

// fromPB converts received records, of either format. The numeric keys and values of a batch
// share one allocation.
func fromPB(rs []*pb.Record) []operator.Record {
	out := make([]operator.Record, len(rs))
	var nums []byte
	for i, r := range rs {
		o := &out[i]
		o.Origin, o.Seq, o.Barrier, o.Watermark, o.Time = r.GetOrigin(), r.GetSeq(), r.GetBarrier(), r.GetWatermark(), operator.NoTimestamp
		o.Idle = o.Watermark && r.GetIdle()
		if r.GetHasTime() {
			o.Time = r.GetTime()
		}
		if o.Barrier != 0 || o.Watermark {
			continue
		}
		if r.KeyBytes == nil || r.ValueBytes == nil {
			if len(nums) < 2*operator.Int64Size {
				nums = make([]byte, 2*operator.Int64Size*(len(rs)-i))
			}
		}
		o.Key, nums = readBytes(r.KeyBytes, r.GetKey(), nums)
		o.Value, nums = readBytes(r.ValueBytes, r.GetValue(), nums)
	}
	return out
}

// readBytes is a key or value read from the wire: b when set, else n's 8 bytes carved from
// nums.
func readBytes(b []byte, n int64, nums []byte) ([]byte, []byte) {
	if b != nil {
		return b, nums
	}
	binary.BigEndian.PutUint64(nums, uint64(n))
	return nums[:operator.Int64Size:operator.Int64Size], nums[operator.Int64Size:]
}
