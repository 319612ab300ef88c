package dataplane

import (
	"errors"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// InputGate is one consumed result: a channel per producer partition.
type InputGate struct {
	resultID string
	channels []*InputChannel
}

// InputChannel reads one subpartition of one producer partition. Its descriptor may be partial
// (no producer yet) until UpdatePartitionInfo completes it. A channel of a shared list (a wide
// gate's) holds the list's descriptor, shared with the other gates of its batch and never
// changed (Update replaces it), and its own subpartition.
type InputChannel struct {
	mu   sync.Mutex
	desc *pb.InputChannelDescriptor
	sub  int32 // the subpartition it reads
	// set and idx: the ChannelSet reading it, and its index there, told when the descriptor
	// changes (evUpdated).
	set *ChannelSet
	idx int
	// found: where the gates of one shared list keep the partition each of the list's local
	// channels was found (Lookups): the consumers of a batch read the same producer
	// partitions, so each is looked up in the registry once, not once per consumer. nil for
	// an inline channel, and once Update replaced the list's descriptor.
	found *atomic.Pointer[Partition]
}

// Lookups are the lookup slots of a request's shared channel lists: per list, per channel,
// the producer partition a consumer of the batch found here (InputChannel.found), made with
// the list's first gate. The zero value is ready.
type Lookups struct {
	mu    sync.Mutex
	found [][]atomic.Pointer[Partition]
}

// in is the lookup slots of list i of lists.
func (l *Lookups) in(lists []*pb.SharedChannels, i int) []atomic.Pointer[Partition] {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.found == nil {
		l.found = make([][]atomic.Pointer[Partition], len(lists))
	}
	if l.found[i] == nil {
		l.found[i] = make([]atomic.Pointer[Partition], len(lists[i].GetChannels()))
	}
	return l.found[i]
}

// BuildGates makes a task's input gates from a validated descriptor (shared references are in
// range of shared, the request's shared channel lists, whose lookup slots are lookups).
func BuildGates(tdd *pb.TaskDeploymentDescriptor, shared []*pb.SharedChannels, lookups *Lookups) []*InputGate {
	gates := make([]*InputGate, 0, len(tdd.GetInputs()))
	for _, g := range tdd.GetInputs() {
		ig := &InputGate{resultID: g.GetResultId()}
		if r := g.GetSharedChannels(); r != 0 {
			chs := shared[r-1].GetChannels()
			found := lookups.in(shared, int(r-1))
			ig.channels = make([]*InputChannel, len(chs))
			all := make([]InputChannel, len(chs)) // one allocation for the gate's channels
			for i, c := range chs {
				all[i].desc, all[i].sub, all[i].found = c, g.GetSubpartitionIndex(), &found[i]
				ig.channels[i] = &all[i]
			}
			gates = append(gates, ig)
			continue
		}
		for _, c := range g.GetChannels() {
			d := proto.Clone(c).(*pb.InputChannelDescriptor)
			if d.GetResultId() == "" {
				d.ResultId = g.GetResultId()
			}
			ig.channels = append(ig.channels, &InputChannel{desc: d, sub: d.GetSubpartitionIndex()})
		}
		gates = append(gates, ig)
	}
	return gates
}

// FindChannel returns the channel reading (result, partition), or nil.
func FindChannel(gates []*InputGate, result string, partition int32) *InputChannel {
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

// Consumed appends the partitions the gates' channels read (as their descriptors now say), for
// a report to the leader.
func Consumed(dst []*pb.ConsumedPartitionReport, gates []*InputGate) []*pb.ConsumedPartitionReport {
	for _, g := range gates {
		for _, c := range g.channels {
			cd := c.current()
			dst = append(dst, &pb.ConsumedPartitionReport{
				ResultId: cd.GetResultId(), PartitionIndex: cd.GetPartitionIndex(), ProducerAttemptId: cd.GetProducerAttemptId(),
			})
		}
	}
	return dst
}

func (c *InputChannel) current() *pb.InputChannelDescriptor {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.desc
}

// Update replaces the descriptor and tells the channel's reader.
func (c *InputChannel) Update(d *pb.InputChannelDescriptor) {
	d = proto.Clone(d).(*pb.InputChannelDescriptor)
	c.mu.Lock()
	if d.GetResultId() == "" {
		d.ResultId = c.desc.GetResultId()
	}
	c.desc, c.sub, c.found = d, d.GetSubpartitionIndex(), nil
	set, idx := c.set, c.idx
	c.mu.Unlock()
	if set != nil {
		set.in.push(Event{kind: evUpdated, ch: idx})
	}
}

// watch makes set (nil: none) the reader told of updates, as its channel idx.
func (c *InputChannel) watch(set *ChannelSet, idx int) {
	c.mu.Lock()
	c.set, c.idx = set, idx
	c.mu.Unlock()
}

// attach is watch, returning what open needs (snapshot), under one lock.
func (c *InputChannel) attach(set *ChannelSet, idx int) (*pb.InputChannelDescriptor, int32, *atomic.Pointer[Partition]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.set, c.idx = set, idx
	return c.desc, c.sub, c.found
}

// snapshot is the channel's descriptor, subpartition and shared lookup slot.
func (c *InputChannel) snapshot() (*pb.InputChannelDescriptor, int32, *atomic.Pointer[Partition]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.desc, c.sub, c.found
}

var errProducerUnknown = errors.New("producer not yet known")
