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

// outputs decodes o's output records (src, flags, key, value).
func outputs(t *testing.T, b []byte) (recs []string) {
	t.Helper()
	for len(b) > 0 {
		if len(b) < outHeader {
			t.Fatalf("output cut short: %x", b)
		}
		kl, vl := int(binary.LittleEndian.Uint32(b[8:])), int(binary.LittleEndian.Uint32(b[12:]))
		recs = append(recs, fmt.Sprintf("%d %d %s %s", binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint32(b[4:]), b[outHeader:outHeader+kl], b[outHeader+kl:outHeader+kl+vl]))
		b = b[outHeader+kl+vl:]
	}
	return recs
}

// run runs the handler f, of any kind's shape, over batch b into o.
func run(o *Output, b []byte, f any) error {
	var h handler
	switch f := f.(type) {
	case func(Record) (Record, error):
		h.mapF = f
	case func(Record, *Output) error:
		h.each = f
	case func(Record) (bool, error):
		h.filter = f
	case func(Record) ([]byte, error):
		h.keyBy = f
	}
	return o.run(b, &h)
}

// upperFast is upper case into Scratch (the kinds module's upper_fast).
func upperFast(r Record) (Record, error) {
	v := Scratch(len(r.Value) + 1)
	for i, c := range r.Value {
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		v[i] = c
	}
	v[len(r.Value)] = '!'
	r.Value = v
	return r, nil
}

// TestCodec: a batch decoded, each kind's output encoded with the flags of what it kept.
func TestCodec(t *testing.T) {
	in := batchOf(2)
	o := &Output{}
	err := run(o, in, func(r Record) (Record, error) { r.Value = bytes.ToUpper(r.Value); return r, nil })
	if err != nil || o.Count() != 2 {
		t.Fatalf("%v, %d records", err, o.Count())
	}
	if src, flags := binary.LittleEndian.Uint32(o.buf), binary.LittleEndian.Uint32(o.buf[4:]); src != 0 || flags != sameKey|sameTime {
		t.Errorf("first output: src %d flags %d, want 0 and SameKey|SameTime", src, flags)
	}
	_ = run(o, in, func(r Record) (bool, error) { return r.Time == 1, nil })
	if len(o.buf) != outHeader || binary.LittleEndian.Uint32(o.buf) != 1 || binary.LittleEndian.Uint32(o.buf[4:]) != sameKey|sameValue|sameTime {
		t.Errorf("filter output %x", o.buf)
	}
	_ = run(o, in, func(r Record) ([]byte, error) { return r.Value[89:], nil })
	if got := outputs(t, o.buf); fmt.Sprint(got) != "[0 6 0  1 6 1 ]" {
		t.Errorf("key-by output %q", got)
	}
	_ = run(o, in, func(r Record, out *Output) error {
		out.Emit([]byte("k"), []byte("v"), 7)
		out.EmitKeyValue(r.Key[:4], nil)
		return nil
	})
	if got := outputs(t, o.buf); fmt.Sprint(got) != "[0 0 k v 0 4 user  1 0 k v 1 4 user ]" {
		t.Errorf("flat-map output %q", got)
	}
	for _, cut := range [][]byte{in[:len(in)-1], in[:3], in[:4+inHeader-1]} {
		if err := run(o, cut, upperFast); err != errShort {
			t.Errorf("a batch of %d bytes cut short: %v", len(cut), err)
		}
	}
}

// TestScratch: Scratch's bytes are zero, distinct within a call (capacity n: an append past
// them does not overwrite the next), from a larger chunk when the first is used up, and
// reused by the next call.
func TestScratch(t *testing.T) {
	o := &Output{}
	var first []byte
	err := run(o, batchOf(2), func(r Record) (Record, error) {
		a, b := Scratch(3), Scratch(arenaMinBytes) // b needs a chunk of its own
		c := Scratch(0)
		if len(a) != 3 || cap(a) != 3 || len(b) != arenaMinBytes || len(c) != 0 {
			t.Fatalf("Scratch lengths %d/%d %d %d", len(a), cap(a), len(b), len(c))
		}
		if !bytes.Equal(a, []byte{0, 0, 0}) || bytes.Count(b, []byte{0}) != len(b) {
			t.Fatalf("Scratch bytes not zero: %x", a)
		}
		copy(a, "abc")
		a = append(a, 'd') // past its capacity: a new array
		copy(b, "xyz")
		if r.Time == 0 {
			first = b
		}
		r.Value = a
		return r, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := outputs(t, o.buf); fmt.Sprint(got) != "[0 5  abcd 1 5  abcd]" {
		t.Errorf("output %q", got)
	}
	if string(first[:3]) != "xyz" {
		t.Errorf("a Scratch of the call was overwritten within it: %q", first[:3])
	}
	_ = run(o, batchOf(1), func(r Record) (Record, error) {
		if v := Scratch(3); !bytes.Equal(v, []byte{0, 0, 0}) {
			t.Errorf("the next call's Scratch is not zero: %x", v)
		}
		return r, nil
	})
	_ = run(o, batchOf(1), func(r Record) (Record, error) { _ = Scratch(arenaKeepBytes + 1); return r, nil })
	_ = run(o, batchOf(1), func(r Record) (Record, error) { return r, nil })
	if len(scratch.buf) != 0 {
		t.Errorf("a chunk of %d bytes kept after the call, over arenaKeepBytes", len(scratch.buf))
	}
}

// TestNoAllocationPerRecord: once the buffers have grown, a batch through echo, through
// upper case into Scratch, and through a flat-map that emits two records allocates nothing.
func TestNoAllocationPerRecord(t *testing.T) {
	in := batchOf(256)
	o := &Output{}
	for name, run := range map[string]func() error{
		"echo":       func() error { return run(o, in, echoRecord) },
		"upper_fast": func() error { return run(o, in, upperFast) },
		"flat_map":   func() error { return run(o, in, emitTwice) },
		"filter":     func() error { return run(o, in, keepEven) },
	} {
		if err := run(); err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(20, func() { _ = run() }); n != 0 {
			t.Errorf("%s: %v allocations per batch of 256 records", name, n)
		}
	}
}

func echoRecord(r Record) (Record, error)   { return r, nil }
func keepEven(r Record) (bool, error)       { return r.Time%2 == 0, nil }
func emitTwice(r Record, out *Output) error { out.Forward(); out.EmitValue(r.Value[:1]); return nil }
func upperIdiomatic(r Record) (Record, error) {
	r.Value = append(bytes.ToUpper(r.Value), '!')
	return r, nil
}

// BenchmarkMap: the SDK's cost of one 100-byte record of a MAP natively (the module runs the
// same code compiled to WebAssembly): echo (the SDK alone), upper (bytes.ToUpper and an
// append: two allocations per record) and upper_fast (upper case into Scratch).
func BenchmarkMap(b *testing.B) {
	in := batchOf(256)
	for _, c := range []struct {
		name string
		f    func(Record) (Record, error)
	}{{"echo", echoRecord}, {"upper", upperIdiomatic}, {"upper_fast", upperFast}} {
		b.Run(c.name, func(b *testing.B) {
			o := &Output{}
			b.ReportAllocs()
			for b.Loop() {
				_ = run(o, in, c.f)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*256), "ns/record")
		})
	}
}
