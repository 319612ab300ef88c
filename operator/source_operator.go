package operator

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
)

// SourceContext is what a source reaches its task through while it reads its splits. It is
// used on the task's goroutine only.
type SourceContext struct {
	ctx    context.Context
	info   Info
	out    Emit
	splits []Split // the task's splits; Next is the position a checkpoint keeps
}

// Context is cancelled when the task ends.
func (c *SourceContext) Context() context.Context { return c.ctx }

// Info describes the task the source runs in.
func (c *SourceContext) Info() Info { return c.info }

// Emit hands r, read at position pos of the split at index split of Read's splits, to the
// downstream partitions. A checkpoint taken in front of r keeps pos as the split's position,
// so a source restored from it reads r again; once r is emitted, the position is pos+1.
func (c *SourceContext) Emit(split int, pos int64, r Record) error {
	c.splits[split].Next = pos
	if err := c.out(r); err != nil {
		return err
	}
	c.splits[split].Next = pos + 1
	return nil
}

// DeadLetter sends r, read at position pos of the split at index split, to the job's
// dead-letter output with the reason it could not be emitted (DeadLetterRecord); the split's
// position moves past it as Emit's does.
func (c *SourceContext) DeadLetter(split int, pos int64, r Record, reason string) error {
	c.splits[split].Next = pos
	if err := sendDeadLetter(c.info, r, reason); err != nil {
		return err
	}
	c.splits[split].Next = pos + 1
	return nil
}

// sourceOperator runs a Source on a task: it assigns the task its splits, keeps their
// positions (sourceState) and restores them.
type sourceOperator struct {
	src Source
	sc  SourceContext
}

// sourceState is the positions of a source task's splits: {"next":N} for a task of one split
// (the format of a single position), {"splits":[{"id":I,"next":N},...]} for one of several.
type sourceState struct {
	Next   *int64  `json:"next,omitempty"`
	Splits []Split `json:"splits,omitempty"`
}

func newSourceOperator(kind string, src Source, info Info) (*sourceOperator, error) {
	par := max(info.Parallelism, info.Subtask+1, 1) // a task outside its parallelism reads the split of its index
	o := &sourceOperator{src: src, sc: SourceContext{info: info}}
	o.sc.splits = AssignSplits(src.Splits(par), info.Subtask, par)
	if len(info.Restored) > 0 {
		if err := o.restore(info.Restored); err != nil {
			return nil, fmt.Errorf("restore %s from its checkpointed state: %w", kind, err)
		}
	}
	return o, nil
}

// Run reads the task's splits.
func (o *sourceOperator) Run(ctx context.Context, out Emit) error {
	o.sc.ctx, o.sc.out = ctx, out
	return o.src.Read(&o.sc, slices.Clone(o.sc.splits))
}

// SnapshotState returns the position of each split: the record being emitted when the
// barrier is injected comes after the barrier (the TaskManager injects it in front of it).
func (o *sourceOperator) SnapshotState() ([]byte, error) {
	if len(o.sc.splits) == 1 {
		return json.Marshal(sourceState{Next: &o.sc.splits[0].Next})
	}
	return json.Marshal(sourceState{Splits: o.sc.splits})
}

func (o *sourceOperator) restore(b []byte) error {
	var st sourceState
	if err := json.Unmarshal(b, &st); err != nil {
		return err
	}
	restored := st.Splits
	if st.Next != nil {
		if len(o.sc.splits) != 1 || len(st.Splits) > 0 {
			return fmt.Errorf("one position for %d splits", len(o.sc.splits))
		}
		restored = []Split{{ID: o.sc.splits[0].ID, Next: *st.Next}}
	}
	if len(restored) != len(o.sc.splits) {
		return fmt.Errorf("positions of %d splits for the %d splits of this subtask", len(restored), len(o.sc.splits))
	}
	for _, r := range restored {
		i := slices.IndexFunc(o.sc.splits, func(s Split) bool { return s.ID == r.ID })
		if i < 0 {
			return fmt.Errorf("split %d is not one of this subtask's", r.ID)
		}
		s := &o.sc.splits[i]
		switch {
		case r.Next < 0:
			return fmt.Errorf("split %d: position %d is negative", r.ID, r.Next)
		case s.End > 0 && r.Next > s.End:
			return fmt.Errorf("split %d: position %d is outside the sequence [0, %d)", r.ID, r.Next, s.End)
		}
		s.Next = r.Next
	}
	return nil
}
