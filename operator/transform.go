package operator

import (
	"context"
)

// base gives the stateless operators no-op lifecycle methods.
type base struct{}

func (base) Open(context.Context) error { return nil }
func (base) Finish(Emit) error          { return nil }
func (base) Close() error               { return nil }

// mapOp: value = value*multiply + add.
type mapOp struct {
	base
	multiply, add int64
}

func (m *mapOp) Process(r Record, out Emit) error {
	r.Value = r.Value*m.multiply + m.add
	return out(r)
}

// filterOp keeps records with value % modulus == remainder.
type filterOp struct {
	base
	modulus, remainder int64
}

func (f *filterOp) Process(r Record, out Emit) error {
	if r.Value%f.modulus != f.remainder {
		return nil
	}
	return out(r)
}

// keyBySum emits (key, running sum of the key's values); origin and seq pass through.
type keyBySum struct {
	base
	sums map[int64]int64
}

func (k *keyBySum) Process(r Record, out Emit) error {
	k.sums[r.Key] += r.Value
	r.Value = k.sums[r.Key]
	return out(r)
}
