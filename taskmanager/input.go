package taskmanager

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/taskmanager/operators"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// inputGate is one consumed result: a channel per producer partition.
type inputGate struct {
	resultID string
	channels []*inputChannel
}

// inputChannel reads one subpartition of one producer partition. Its descriptor may be partial
// (no producer yet) until UpdatePartitionInfo completes it.
type inputChannel struct {
	mu      sync.Mutex
	desc    *pb.InputChannelDescriptor
	updated chan struct{}
}

// inputEvent is what a channel reader hands to the task loop.
type inputEvent struct {
	records []operators.Record
	eop     bool
	err     error
}

func buildGates(tdd *pb.TaskDeploymentDescriptor) []*inputGate {
	gates := make([]*inputGate, 0, len(tdd.GetInputs()))
	for _, g := range tdd.GetInputs() {
		ig := &inputGate{resultID: g.GetResultId()}
		for _, c := range g.GetChannels() {
			d := proto.Clone(c).(*pb.InputChannelDescriptor)
			if d.GetResultId() == "" {
				d.ResultId = g.GetResultId()
			}
			ig.channels = append(ig.channels, &inputChannel{desc: d, updated: make(chan struct{}, 1)})
		}
		gates = append(gates, ig)
	}
	return gates
}

// findChannel returns the channel reading (result, partition), or nil.
func findChannel(gates []*inputGate, result string, partition int32) *inputChannel {
	for _, g := range gates {
		if g.resultID != result {
			continue
		}
		for _, c := range g.channels {
			if c.current().GetPartitionIndex() == partition {
				return c
			}
		}
	}
	return nil
}

func (c *inputChannel) current() *pb.InputChannelDescriptor {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.desc
}

// update replaces the descriptor and wakes a waiting reader.
func (c *inputChannel) update(d *pb.InputChannelDescriptor) {
	d = proto.Clone(d).(*pb.InputChannelDescriptor)
	c.mu.Lock()
	if d.GetResultId() == "" {
		d.ResultId = c.desc.GetResultId()
	}
	c.desc = d
	c.mu.Unlock()
	select {
	case c.updated <- struct{}{}:
	default:
	}
}

// readChannel connects to the producer and forwards batches until end_of_partition.
func (tm *TaskManager) readChannel(ctx context.Context, t *task, ch *inputChannel, out chan<- inputEvent) {
	send := func(ev inputEvent) bool {
		select {
		case out <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	r, desc, err := tm.connect(ctx, t, ch)
	if err != nil {
		if ctx.Err() == nil {
			send(inputEvent{err: err})
		}
		return
	}
	defer r.close()
	for {
		records, eop, err := r.next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			send(inputEvent{err: fmt.Errorf("input %s/%d: stream from producer %s at %s broke: %w",
				desc.GetResultId(), desc.GetPartitionIndex(), desc.GetProducerAttemptId(), desc.GetProducerDataAddress(), err)})
			return
		}
		if len(records) == 0 && !eop {
			continue
		}
		if !send(inputEvent{records: records, eop: eop}) || eop {
			return
		}
	}
}

var errProducerUnknown = errors.New("producer not yet known")

// connect opens the channel, retrying with backoff while the producer is unknown or its
// partition is not there yet (NotFound, Unavailable), up to InputConnectTimeout.
func (tm *TaskManager) connect(ctx context.Context, t *task, ch *inputChannel) (channelReader, *pb.InputChannelDescriptor, error) {
	deadline := time.Now().Add(tm.cfg.InputConnectTimeout)
	backoff := 10 * time.Millisecond
	lastErr := errProducerUnknown
	for {
		d := ch.current()
		if d.GetProducerAttemptId() != "" && d.GetProducerDataAddress() != "" {
			r, err := tm.openChannel(ctx, t, d)
			if err == nil {
				return r, d, nil
			}
			if ctx.Err() != nil {
				return nil, d, ctx.Err()
			}
			lastErr = err
			if c := status.Code(err); c != codes.NotFound && c != codes.Unavailable {
				return nil, d, fmt.Errorf("input %s/%d: producer %s at %s refused: %w",
					d.GetResultId(), d.GetPartitionIndex(), d.GetProducerAttemptId(), d.GetProducerDataAddress(), err)
			}
		}
		if time.Now().After(deadline) {
			return nil, d, fmt.Errorf("input %s/%d: producer %s at %q not available after %v: %w",
				d.GetResultId(), d.GetPartitionIndex(), d.GetProducerAttemptId(), d.GetProducerDataAddress(), tm.cfg.InputConnectTimeout, lastErr)
		}
		timer := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, d, ctx.Err()
		case <-ch.updated:
			backoff = 10 * time.Millisecond
		case <-timer.C:
			backoff = min(2*backoff, time.Second)
		}
		timer.Stop()
	}
}
