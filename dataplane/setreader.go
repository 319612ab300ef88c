package dataplane

import (
	"context"

	"github.com/jmcluster/jmcluster/operator"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// channelReader is one input channel read by a goroutine that waits for it: tools and tests
// (a task reads all its channels in its own loop, through ChannelSet.Handle).
type channelReader interface {
	// next returns the channel's next records; eop marks the last batch.
	next(ctx context.Context) (records []operator.Record, eop bool, err error)
	// close releases the channel (the producer stops sending and frees the subpartition).
	close()
}

// openChannel opens the input channel d names for consumer attempt consumer of job and waits until it is open: on this
// TM directly, or on the producer TM's Exchange stream. A refusal keeps its status code, and is
// not retried.
func (dp *Plane) openChannel(ctx context.Context, job, consumer string, d *pb.InputChannelDescriptor) (channelReader, error) {
	s := dp.NewChannelSet(ctx, job, consumer, false)
	s.Add(&InputChannel{desc: d, sub: d.GetSubpartitionIndex()})
	r := &setReader{s: s}
	// Open, or its answer and end came together (a finished partition with nothing left).
	for s.chans[0].phase != phaseOpen && s.chans[0].phase != phaseEnded && len(r.records) == 0 && !r.eop {
		if err := r.wait(ctx); err != nil {
			s.Close()
			return nil, err
		}
	}
	return r, nil
}

// setReader reads a ChannelSet of one channel for a goroutine that waits.
type setReader struct {
	s       *ChannelSet
	pending []Event
	records []operator.Record
	eop     bool
}

// wait handles the next events; it stops at the first that brings records or the end.
func (r *setReader) wait(ctx context.Context) error {
	for len(r.pending) == 0 {
		select {
		case <-r.s.in.signal:
		case <-ctx.Done():
			return ctx.Err()
		}
		r.pending = append(r.pending, r.s.in.take()...)
	}
	for len(r.pending) > 0 {
		ev := r.pending[0]
		r.pending = r.pending[1:]
		rs, eop, err := r.s.Handle(ev)
		if err != nil {
			return err
		}
		r.records, r.eop = append(r.records, rs...), r.eop || eop
		if len(r.records) > 0 || r.eop {
			return nil
		}
	}
	return nil
}

func (r *setReader) next(ctx context.Context) ([]operator.Record, bool, error) {
	for len(r.records) == 0 && !r.eop {
		if err := r.wait(ctx); err != nil {
			return nil, false, err
		}
	}
	rs, eop := r.records, r.eop
	r.records, r.eop = nil, false
	return rs, eop, nil
}

func (r *setReader) close() { r.s.Close() }

// inFlight is the batches the producer sent that the reader has not taken (a remote channel).
func (r *setReader) inFlight() int {
	if m := r.s.chans[0].mux; m != nil {
		return int(m.inFlight.Load())
	}
	return 0
}
