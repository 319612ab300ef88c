package nemesis

import (
	"context"
	"fmt"
	"math/rand"
)

// DamageKind is how a checkpoint's state file is damaged: the modes of the store faults
// (corrupt.go). In a checkpoint state, BitFlip flips the lowest bit of the last digit of a number
// in the payload (the digit stays a digit, so the JSON state still parses, and only the CRC-32C
// tells), Truncate cuts the file short somewhere after its first byte, and CopyChunk copies a
// chunk of the payload over another place of the payload (the file keeps its length).
type DamageKind = CorruptMode

// DamageKinds lists the damages, in the order a fault's pick chooses among them.
func DamageKinds() []DamageKind { return CorruptModes() }

// CheckpointDamage is a corrupt-checkpoint fault's damage: its kind and the seed of its
// choices (which task's state, where in the file).
type CheckpointDamage struct {
	Kind DamageKind `json:"kind"`
	Seed int64      `json:"seed"`
}

// orTMs is list, or else def when list is empty.
func orTMs(list, def []string) []string {
	if len(list) > 0 {
		return list
	}
	return def
}

func resolveDamage(rng *rand.Rand) *CheckpointDamage {
	kinds := DamageKinds()
	return &CheckpointDamage{Kind: kinds[rng.Intn(len(kinds))], Seed: rng.Int63()}
}

// CheckpointCorrupter is implemented by targets that can damage a state file of the stream
// job's newest completed checkpoint: one written by a task that ran on tm (killed), chosen with
// d.Seed. It returns what it did ("" and no error when tm held no task of the job, or the
// newest checkpoint was damaged already).
type CheckpointCorrupter interface {
	CorruptCheckpoint(ctx context.Context, tm string, d CheckpointDamage) (string, error)
}

// corruptCheckpoint carries out a's damage once its TMs are down.
func (e *Executor) corruptCheckpoint(ctx context.Context, a Action) error {
	if a.CorruptCheckpoint == nil {
		return nil
	}
	cc, ok := e.T.(CheckpointCorrupter)
	if !ok {
		return fmt.Errorf("%w: damage a checkpoint", ErrUnsupportedFault)
	}
	for _, tm := range a.Kill {
		what, err := cc.CorruptCheckpoint(ctx, tm, *a.CorruptCheckpoint)
		if err != nil {
			return err
		}
		if e.Logf != nil {
			if what == "" {
				what = "nothing damaged (no state of the stream job's tasks on " + tm + " in a checkpoint not damaged yet)"
			}
			e.Logf("corrupt-checkpoint: %s", what)
		}
	}
	return nil
}

// Damage returns a copy of a state file's bytes damaged as kind says, with every choice from
// rng, and where: header is the length of the file's header (the payload follows it). A bit
// flip and a copied chunk stay in the payload; a truncation may cut the header too. The result
// always differs from b.
func Damage(b []byte, header int, kind DamageKind, rng *rand.Rand) ([]byte, string, error) {
	if len(b) <= header+1 {
		return nil, "", fmt.Errorf("a state of %d bytes has no payload to damage (header %d bytes)", len(b), header)
	}
	out := append([]byte(nil), b...)
	payload := out[header:]
	switch kind {
	case BitFlip:
		var last []int // the last digit of each number
		for i, c := range payload {
			if isDigit(c) && (i+1 == len(payload) || !isDigit(payload[i+1])) {
				last = append(last, i)
			}
		}
		i := rng.Intn(len(payload))
		if len(last) > 0 {
			i = last[rng.Intn(len(last))]
		}
		payload[i] ^= 1
		return out, fmt.Sprintf("bit 0 of byte %d flipped (%q -> %q)", header+i, b[header+i], payload[i]), nil
	case Truncate:
		n := 1 + rng.Intn(len(b)-1)
		return out[:n], fmt.Sprintf("truncated from %d to %d bytes", len(b), n), nil
	case CopyChunk:
		size := max(1, min(4+rng.Intn(13), len(payload)/2))
		for range 16 {
			from, to := rng.Intn(len(payload)-size+1), rng.Intn(len(payload)-size+1)
			if from == to || string(payload[from:from+size]) == string(payload[to:to+size]) {
				continue
			}
			copy(payload[to:to+size], b[header+from:header+from+size])
			return out, fmt.Sprintf("%d bytes at %d copied over %d", size, header+from, header+to), nil
		}
		payload[0] ^= 1 // a payload of one repeated byte: no chunk differs
		return out, fmt.Sprintf("bit 0 of byte %d flipped (no chunk differed)", header), nil
	}
	return nil, "", fmt.Errorf("unknown damage %q", kind)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
