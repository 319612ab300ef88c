package operator

import (
	"github.com/jmcluster/jmcluster/transport/pb"
)

func init() {
	register("sequence_source", runtime{source: func(op *pb.Operator, _ Info) Source { return newSequenceSource(op.GetSequenceSource()) }})
}

// sequenceSource has one split per subtask, split i the sequence of origin i: it emits
// value = start + seq, key = value % keys (numeric: 8 bytes each, big endian), for seq in [0, count) or forever when count is 0,
// paced to rate records per second. A split's position is the seq of its next record.
type sequenceSource struct {
	start, count, keys int64
	rate               float64
}

func newSequenceSource(cfg *pb.SequenceSource) *sequenceSource {
	keys := cfg.GetKeys()
	if keys <= 0 {
		keys = 1
	}
	return &sequenceSource{start: cfg.GetStart(), count: cfg.GetCount(), keys: keys, rate: cfg.GetRatePerSecond()}
}

// Splits is one sequence per subtask.
func (s *sequenceSource) Splits(parallelism int32) []Split {
	out := make([]Split, parallelism)
	for i := range out {
		out[i] = Split{ID: int32(i), End: s.count}
	}
	return out
}

// Read emits the sequence of each split in turn, paced by a pacer.
func (s *sequenceSource) Read(sc *SourceContext, splits []Split) error {
	for i, sp := range splits {
		if err := s.read(sc, i, sp); err != nil {
			return err
		}
	}
	return nil
}

func (s *sequenceSource) read(sc *SourceContext, split int, sp Split) error {
	p := newPacer(s.rate)
	var nums slab // the records' keys and values: an allocation per 256 records
	for i := sp.Next; s.count == 0 || i < s.count; i++ {
		if err := p.wait(sc, i); err != nil {
			return err
		}
		v := s.start + i
		key := v % s.keys
		if key < 0 {
			key += s.keys
		}
		r := Record{Key: nums.int64Bytes(key), Value: nums.int64Bytes(v), Time: NoTimestamp, Origin: sp.ID, Seq: i}
		if err := sc.Emit(split, i, r); err != nil {
			return err
		}
	}
	return nil
}
