package graph

import (
	"fmt"
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

// share returns the 1-based shared list the channels of subtask c's gate of result r can
// refer to, and their subpartition; ok false: send them inline. Every consumer of r reads the
// same producer partitions, so the first gate of r makes the list and the others refer to it.
func (b *DescriptorBuilder) share(r *pb.IntermediateResult, c int32) (ref uint32, sub int32, ok bool) {
	if r.GetDistribution() == pb.Distribution_DISTRIBUTION_FORWARD || channelsOf(r) < MinSharedChannels {
		return 0, 0, false
	}
	i, known := b.byResult[r.ResultId]
	if !known {
		n := channelsOf(r)
		chs := make([]pb.InputChannelDescriptor, n)
		list := &pb.SharedChannels{Channels: make([]*pb.InputChannelDescriptor, n)}
		for k := range chs {
			fillChannel(&chs[k], r, 0, k) // at subpartition 0: each gate says its own
			list.Channels[k] = &chs[k]
		}
		b.Shared = append(b.Shared, list)
		i = len(b.Shared) - 1
		b.byResult[r.ResultId] = i
	}
	return uint32(i + 1), c, true
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
	share func(r *pb.IntermediateResult, c int32) (uint32, int32, bool)) (*pb.TaskDeploymentDescriptor, error) {
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
	if _, on := Checkpointing(jg.GetCheckpointConfig()); on {
		tdd.Checkpointed = true
		if ck, ack := RestoreFrom(rec, vertexID, subtask); ack != nil {
			tdd.RestoreCheckpointId, tdd.RestoreFrom = ck.GetId(), proto.CloneOf(ack)
		}
	}
	for _, res := range eg.Results {
		if res.ProducerVertexId == vertexID {
			p := res.Partitions[subtask]
			tdd.Produced = append(tdd.Produced, &pb.ResultPartitionDeploymentDescriptor{
				ResultId: res.ResultId, PartitionIndex: subtask, NumSubpartitions: p.NumSubpartitions,
				Distribution: res.Distribution, ResultType: res.ResultType,
				DeadLetters: carriesDeadLetters(jg, res),
			})
		}
	}
	// A gate per consumed result, in result-id order, its channels in partition order (Inputs).
	var consumed []*pb.IntermediateResult
	for _, r := range eg.Results {
		if consumes(r, vertexID) {
			consumed = append(consumed, r)
		}
	}
	sort.Slice(consumed, func(i, j int) bool { return consumed[i].ResultId < consumed[j].ResultId })
	for _, r := range consumed {
		g := &pb.InputGateDeploymentDescriptor{ResultId: r.ResultId, Distribution: r.Distribution, ResultType: r.ResultType}
		tdd.Inputs = append(tdd.Inputs, g)
		if share != nil {
			if ref, sub, ok := share(r, subtask); ok {
				g.SharedChannels, g.SubpartitionIndex = ref, sub
				continue
			}
		}
		n := channelsOf(r)
		chs := make([]pb.InputChannelDescriptor, n)
		g.Channels = make([]*pb.InputChannelDescriptor, n)
		for k := range chs {
			fillChannel(&chs[k], r, subtask, k)
			g.Channels[k] = &chs[k]
		}
	}
	return tdd, nil
}

// carriesDeadLetters reports whether result r is made by an edge that carries its producer's
// dead letters (JobEdge.dead_letters): one result per edge (BuildExecutionGraph), named by
// its producer and consumer.
func carriesDeadLetters(jg *pb.JobGraph, r *pb.IntermediateResult) bool {
	for _, e := range jg.GetEdges() {
		if e.GetSource() == r.ProducerVertexId && e.GetTarget() == r.ConsumerVertexId {
			return e.GetDeadLetters()
		}
	}
	return false
}

// RestoreFrom returns the job's latest completed checkpoint and the acknowledgement of the
// subtask in it (the state a new attempt of the subtask starts from), or nils when the job has
// none or the checkpoint has no acknowledgement of the subtask.
func RestoreFrom(rec *pb.JobRecord, vertexID string, subtask int32) (*pb.CheckpointRecord, *pb.TaskCheckpointAck) {
	done := rec.GetCheckpoints().GetCompleted()
	if len(done) == 0 {
		return nil, nil
	}
	ck := done[len(done)-1]
	acks := ck.GetAcks() // ordered by vertex id, then subtask
	i := sort.Search(len(acks), func(i int) bool {
		a := acks[i]
		return a.GetVertexId() > vertexID || (a.GetVertexId() == vertexID && a.GetSubtaskIndex() >= subtask)
	})
	if i < len(acks) && acks[i].GetVertexId() == vertexID && acks[i].GetSubtaskIndex() == subtask {
		return ck, acks[i]
	}
	return nil, nil
}
