package operator

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestNumericRecordsAreBigEndianBytes: the numeric operators' records carry their numbers as
// 8 bytes, big endian, in the key and the value.
func TestNumericRecordsAreBigEndianBytes(t *testing.T) {
	r := NumericRecord(-2, 258, 3, 4)
	if want := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe}; !reflect.DeepEqual(r.Key, want) {
		t.Fatalf("key -2 is % x, want % x", r.Key, want)
	}
	if want := []byte{0, 0, 0, 0, 0, 0, 1, 2}; !reflect.DeepEqual(r.Value, want) {
		t.Fatalf("value 258 is % x, want % x", r.Value, want)
	}
	if r.Time != NoTimestamp || r.Control() || r.Size() != 16 {
		t.Fatalf("%+v: time %d, control %v, size %d", r, r.Time, r.Control(), r.Size())
	}
	if _, ok := Int64Of([]byte("1234567")); ok {
		t.Fatal("7 bytes read as a number")
	}
	if FormatKey(r.Key) != "-2" || FormatKey([]byte("user-1")) != `"user-1"` {
		t.Fatalf("keys shown as %s and %s", FormatKey(r.Key), FormatKey([]byte("user-1")))
	}
}

// TestNumericOperatorRefusesBytes: a numeric operator given a value that is not 8 bytes fails
// with an error naming the operator, the record and the value's size.
func TestNumericOperatorRefusesBytes(t *testing.T) {
	for _, op := range []*pb.Operator{
		{Kind: &pb.Operator_Map{Map: &pb.MapOperator{Multiply: 2}}},
		{Kind: &pb.Operator_Filter{Filter: &pb.FilterOperator{Modulus: 2}}},
		{Kind: &pb.Operator_KeyBySum{KeyBySum: &pb.KeyBySumOperator{}}},
		{Kind: &pb.Operator_FlatMap{FlatMap: &pb.FlatMapOperator{}}},
	} {
		o, err := New(op, Info{})
		if err != nil {
			t.Fatal(err)
		}
		err = o.Process(Record{Key: []byte("k"), Value: []byte(`{"a":1}`), Origin: 1, Seq: 7}, func(Record) error { return nil })
		if !errors.Is(err, ErrNotNumeric) || !strings.Contains(err.Error(), "record 1/7 is 7 bytes") {
			t.Errorf("%T: %v, want the record and its size", op.GetKind(), err)
		}
	}
}

// TestKeyedStateOfBytesKeys: a keyed transform's values and timers of keys that are not
// numbers survive a snapshot and restore next to numeric ones, and the numeric keys keep the
// format of a checkpoint before keys were bytes.
func TestKeyedStateOfBytesKeys(t *testing.T) {
	c := newContext(Info{})
	for _, k := range [][]byte{[]byte("user-2"), Int64Bytes(-5), []byte(""), []byte("user-1"), Int64Bytes(3)} {
		c.key = k
		c.SetInt64(int64(len(k)))
		c.RegisterTimer(7)
	}
	b, err := c.snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"keys":[-5,3]`) || !strings.Contains(string(b), `{"key":-5,"at":7}`) {
		t.Fatalf("numeric keys not in the numeric format: %s", b)
	}
	again := newContext(Info{})
	if err := again.restore(b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again.values, c.values) || !reflect.DeepEqual(again.timers, c.timers) {
		t.Fatalf("restored %v %v, want %v %v", again.values, again.timers, c.values, c.timers)
	}
	var fired []string
	h := timerFunc(func(ctx *Context, at int64) error {
		fired = append(fired, FormatKey(ctx.Key()))
		return nil
	})
	if err := again.advance(7, h); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(fired, " "); got != `-5 3 "" "user-1" "user-2"` {
		t.Fatalf("timers fired for %s: numeric keys first by number, then the others by bytes", got)
	}
	if _, err := KeyedValues(b); !errors.Is(err, ErrNotNumeric) {
		t.Fatalf("KeyedValues of bytes keys: %v", err)
	}
}

type timerFunc func(ctx *Context, at int64) error

func (f timerFunc) OnTimer(ctx *Context, at int64) error { return f(ctx, at) }

// TestFileSinkLines: a numeric key or value is written as its number, another quoted.
func TestFileSinkLines(t *testing.T) {
	got, err := appendLine(nil, &Record{Key: []byte("a b"), Value: Int64Bytes(-3)}, pb.FileSinkFormat_FILE_SINK_FORMAT_UNSPECIFIED)
	if err != nil || string(got) != "\"a b\" -3\n" {
		t.Fatalf("line %q, %v", got, err)
	}
}

// TestRecordOverhead: a record costs RecordOverhead bytes besides its key and value.
func TestRecordOverhead(t *testing.T) {
	if n := unsafe.Sizeof(Record{}); n != RecordOverhead {
		t.Fatalf("a Record is %d bytes, RecordOverhead says %d", n, RecordOverhead)
	}
}
