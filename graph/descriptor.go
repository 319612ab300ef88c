package graph

import (
	"fmt"
	"slices"
	"sort"

	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// TaskDeploymentDescriptor builds the descriptor of one ExecutionVertex's current attempt from
// a committed job record: the operator and parallelism of its JobVertex, the partitions it
// produces (one per result it is the producer of, with the result's subpartition count) and
// its input gates (one per consumed result, in result-id order, holding its channels in
// graph order). Everything it returns is copied, so it may be called on the FSM's live
// record under its read lock. It is a pure function of the record.
func TaskDeploymentDescriptor(rec *pb.JobRecord, vertexID string, subtask int32) (*pb.TaskDeploymentDescriptor, error) {
	return taskDescriptor(rec, vertexID, subtask, nil)
}

// MinSharedChannels is the fewest channels a gate must have for DescriptorBuilder to list them
// once for all its consumers; smaller gates are sent inline.
const MinSharedChannels = 16

// DescriptorBuilder builds the descriptors of many attempts of one job, with the channels of
// the gates that read the same producer partitions listed once (Shared): a gate of at least
// MinSharedChannels channels, all at one subpartition, whose producers (partition, attempt,
// data address, in order) are those of the list made for the first such gate of its result,
// refers to that list (shared_channels, 1-based into Shared; subpartition_index) instead of
// carrying a copy of each channel. The consumers of an ALL_TO_ALL edge are such gates; any
// other gate is inline, as TaskDeploymentDescriptor builds it. Like TaskDeploymentDescriptor,
// it copies what it takes from the record and is a pure function of it and of the order of
// the calls.
type DescriptorBuilder struct {
	rec      *pb.JobRecord
	Shared   []*pb.SharedChannels
	byResult map[string]int // result id -> index in Shared
}

// NewDescriptorBuilder starts building descriptors from rec.
func NewDescriptorBuilder(rec *pb.JobRecord) *DescriptorBuilder {
	return &DescriptorBuilder{rec: rec, byResult: map[string]int{}}
}

// Build is TaskDeploymentDescriptor with shared channel lists.
func (b *DescriptorBuilder) Build(vertexID string, subtask int32) (*pb.TaskDeploymentDescriptor, error) {
	return taskDescriptor(b.rec, vertexID, subtask, b.share)
}

// share returns the 1-based shared list the channels ins (of one gate, result id) can refer
// to, and their subpartition; ok false: send them inline.
func (b *DescriptorBuilder) share(resultID string, ins []*pb.InputChannelDescriptor) (ref uint32, sub int32, ok bool) {
	if len(ins) < MinSharedChannels {
		return 0, 0, false
	}
	sub = ins[0].SubpartitionIndex
	for _, in := range ins {
		if in.SubpartitionIndex != sub {
			return 0, 0, false
		}
	}
	i, known := b.byResult[resultID]
	if !known {
		list := &pb.SharedChannels{Channels: make([]*pb.InputChannelDescriptor, len(ins))}
		for k, in := range ins {
			list.Channels[k] = &pb.InputChannelDescriptor{ResultId: resultID, PartitionIndex: in.PartitionIndex,
				ProducerAttemptId: in.ProducerAttemptId, ProducerDataAddress: in.ProducerDataAddress}
		}
		b.Shared = append(b.Shared, list)
		i = len(b.Shared) - 1
		b.byResult[resultID] = i
		return uint32(i + 1), sub, true
	}
	list := b.Shared[i].Channels
	if len(list) != len(ins) {
		return 0, 0, false
	}
	for k, in := range ins {
		c := list[k]
		if c.PartitionIndex != in.PartitionIndex || c.ProducerAttemptId != in.ProducerAttemptId || c.ProducerDataAddress != in.ProducerDataAddress {
			return 0, 0, false
		}
	}
	return uint32(i + 1), sub, true
}

// InlineShared replaces every shared channel reference in tdd's gates by copies of the
// channels, at the gate's subpartition: the descriptor a receiver without shared lists (an
// older TaskManager, SubmitTask) is sent.
func InlineShared(tdd *pb.TaskDeploymentDescriptor, shared []*pb.SharedChannels) error {
	for _, g := range tdd.Inputs {
		if g.SharedChannels == 0 {
			continue
		}
		if int(g.SharedChannels) > len(shared) {
			return fmt.Errorf("gate %s refers to shared channel list %d of %d", g.ResultId, g.SharedChannels, len(shared))
		}
		for _, c := range shared[g.SharedChannels-1].Channels {
			d := proto.CloneOf(c)
			d.SubpartitionIndex = g.SubpartitionIndex
			g.Channels = append(g.Channels, d)
		}
		g.SharedChannels, g.SubpartitionIndex = 0, 0
	}
	return nil
}

func taskDescriptor(rec *pb.JobRecord, vertexID string, subtask int32,
	share func(resultID string, ins []*pb.InputChannelDescriptor) (uint32, int32, bool)) (*pb.TaskDeploymentDescriptor, error) {
	jg := rec.JobGraph
	eg := rec.ExecutionGraph
	ev := FindVertex(eg, vertexID, subtask)
	if ev == nil || ev.Current == nil {
		return nil, fmt.Errorf("no current attempt for %s[%d]", vertexID, subtask)
	}
	var jv *pb.JobVertex
	for _, v := range jg.Vertices {
		if v.Id == vertexID {
			jv = v
		}
	}
	if jv == nil {
		return nil, fmt.Errorf("unknown vertex %s", vertexID)
	}
	e := ev.Current
	tdd := &pb.TaskDeploymentDescriptor{
		JobId: jg.JobId, VertexId: vertexID, SubtaskIndex: subtask, Parallelism: jv.Parallelism,
		AttemptId: e.AttemptId, AttemptNumber: e.AttemptNumber, StartTimestamp: e.StartTimestamp,
		SlotIndex: e.GetSlot().GetIndex(), Operator: proto.CloneOf(jv.Operator), JobType: jg.Type,
	}
	for _, res := range eg.Results {
		if res.ProducerVertexId == vertexID {
			p := res.Partitions[subtask]
			tdd.Produced = append(tdd.Produced, &pb.ResultPartitionDeploymentDescriptor{
				ResultId: res.ResultId, PartitionIndex: subtask, NumSubpartitions: p.NumSubpartitions,
				Distribution: res.Distribution, ResultType: res.ResultType,
			})
		}
	}
	// The channels of each consumed result, in graph order, then a gate per result.
	byResult, order := channelsByResult(ev.Inputs)
	for _, id := range order {
		g := &pb.InputGateDeploymentDescriptor{ResultId: id}
		for _, res := range eg.Results {
			if res.ResultId == id {
				g.Distribution, g.ResultType = res.Distribution, res.ResultType
			}
		}
		ins := byResult[id]
		if share != nil {
			if ref, sub, ok := share(id, ins); ok {
				g.SharedChannels, g.SubpartitionIndex = ref, sub
				tdd.Inputs = append(tdd.Inputs, g)
				continue
			}
		}
		for _, in := range ins {
			g.Channels = append(g.Channels, proto.CloneOf(in))
		}
		tdd.Inputs = append(tdd.Inputs, g)
	}
	return tdd, nil
}

// channelsByResult groups a vertex's input channels by result id, each group in graph order,
// and lists the result ids in sorted order. The channels of one result are usually one run of
// the list (BuildExecutionGraph appends them edge by edge): then a group is that part of the
// list itself, not a copy.
func channelsByResult(inputs []*pb.InputChannelDescriptor) (map[string][]*pb.InputChannelDescriptor, []string) {
	byResult := map[string][]*pb.InputChannelDescriptor{}
	var order []string
	for start := 0; start < len(inputs); {
		id := inputs[start].ResultId
		end := start + 1
		for end < len(inputs) && inputs[end].ResultId == id {
			end++
		}
		run := inputs[start:end:end]
		if prev, seen := byResult[id]; seen {
			byResult[id] = append(slices.Clip(prev), run...)
		} else {
			order = append(order, id)
			byResult[id] = run
		}
		start = end
	}
	sort.Strings(order)
	return byResult, order
}
