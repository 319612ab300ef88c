package operator

import (
	"context"
	"fmt"
)

// sinkOperator runs a Sink on a task; a two-phase sink runs as a committingSink, which is
// also its Committer.
type sinkOperator struct {
	s Sink
}

type committingSink struct {
	*sinkOperator
	Committer
}

func newSinkOperator(kind string, s Sink, info Info) (Operator, error) {
	if len(info.Restored) > 0 {
		r, ok := s.(Restorer)
		if !ok {
			return nil, fmt.Errorf("%w: %s keeps no state, but the checkpoint holds %d bytes for it", ErrBadConfig, kind, len(info.Restored))
		}
		if err := r.RestoreState(info.Restored); err != nil {
			return nil, fmt.Errorf("restore %s from its checkpointed state: %w", kind, err)
		}
	}
	o := &sinkOperator{s: s}
	if c, ok := s.(Committer); ok {
		return committingSink{o, c}, nil
	}
	return o, nil
}

func (o *sinkOperator) Open(ctx context.Context) error { return o.s.Open(ctx) }
func (o *sinkOperator) Process(r Record, _ Emit) error { return o.s.Write(r) }
func (o *sinkOperator) Finish(Emit) error              { return o.s.Finish() }
func (o *sinkOperator) Close() error                   { return o.s.Close() }

// SnapshotState is the sink's state when it keeps one (Stateful), else nil.
func (o *sinkOperator) SnapshotState() ([]byte, error) {
	if st, ok := o.s.(Stateful); ok {
		return st.SnapshotState()
	}
	return nil, nil
}
