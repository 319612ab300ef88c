package fn

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
)

// batchOf encodes records as the host does (wasmhost.Batch).
func batchOf(n int) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(n))
	for i := range n {
		k, v := fmt.Appendf(nil, "user-%05d", i), fmt.Appendf(nil, "%090d", i)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(k)))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(v)))
		b = binary.LittleEndian.AppendUint64(b, uint64(i))
		b = append(append(b, k...), v...)
	}
	return b
}

// TestCodec: a batch decoded, each kind's output encoded with the flags of what it kept.
func TestCodec(t *testing.T) {
	in := batchOf(2)
	o := &Output{}
	err := o.handle(in, mapEach(func(r Record) (Record, error) { r.Value = bytes.ToUpper(r.Value); return r, nil }))
	if err != nil || o.Count() != 2 {
		t.Fatalf("%v, %d records", err, o.Count())
	}
	if src, flags := binary.LittleEndian.Uint32(o.buf), binary.LittleEndian.Uint32(o.buf[4:]); src != 0 || flags != sameKey|sameTime {
		t.Errorf("first output: src %d flags %d, want 0 and SameKey|SameTime", src, flags)
	}
	_ = o.handle(in, filterEach(func(r Record) (bool, error) { return r.Time == 1, nil }))
	if len(o.buf) != outHeader || binary.LittleEndian.Uint32(o.buf) != 1 || binary.LittleEndian.Uint32(o.buf[4:]) != sameKey|sameValue|sameTime {
		t.Errorf("filter output %x", o.buf)
	}
	if err := decode(in[:len(in)-1], func(Record) error { return nil }); err != errShort {
		t.Errorf("a batch cut short: %v", err)
	}
}

// BenchmarkMapHandle: the SDK's cost of one record of a MAP, natively (the module runs the same
// code compiled to WebAssembly).
func BenchmarkMapHandle(b *testing.B) {
	in := batchOf(256)
	o := &Output{}
	each := mapEach(func(r Record) (Record, error) { r.Value = bytes.ToUpper(r.Value); return r, nil })
	for b.Loop() {
		_ = o.handle(in, each)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*256), "ns/record")
}
