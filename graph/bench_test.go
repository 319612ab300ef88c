package graph

import (
	"fmt"
	"testing"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// wideJob is a 512 -> 512 ALL_TO_ALL job: 262,144 input channels.
func wideJob() *pb.JobGraph {
	return job([]*pb.JobVertex{source("src", 512, 0), sink("sink", 512)}, all("src", "sink"))
}

// BenchmarkBuildWide: the ExecutionGraph of a 512 x 512 ALL_TO_ALL job, which every JobMaster
// builds when the job's submission is applied, and the producers filled in once attempts exist.
func BenchmarkBuildWide(b *testing.B) {
	jg := wideJob()
	b.ReportAllocs()
	for b.Loop() {
		eg, err := BuildExecutionGraph(jg)
		if err != nil {
			b.Fatal(err)
		}
		RefreshProducers(eg)
	}
}

// BenchmarkDescriptorsWide: the 1024 descriptors of a 512 x 512 ALL_TO_ALL deployment with
// shared channel lists, as the leader builds them before it sends the first batch.
func BenchmarkDescriptorsWide(b *testing.B) {
	jg := wideJob()
	eg, err := BuildExecutionGraph(jg)
	if err != nil {
		b.Fatal(err)
	}
	for _, ev := range AllExecutions(eg) {
		ev.Current = &pb.Execution{AttemptId: fmt.Sprintf("%s-%d", ev.VertexId, ev.SubtaskIndex),
			TmDataAddress: "127.0.0.1:1", Slot: &pb.SlotID{TmId: "tm1", Index: ev.SubtaskIndex}}
	}
	RefreshProducers(eg)
	rec := &pb.JobRecord{JobGraph: jg, ExecutionGraph: eg}
	b.ReportAllocs()
	for b.Loop() {
		d := NewDescriptorBuilder(rec)
		for _, v := range []string{"src", "sink"} {
			for s := range int32(512) {
				if _, err := d.Build(v, s); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
}
