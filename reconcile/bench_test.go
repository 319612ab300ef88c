package reconcile_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/reconcile"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// benchJob is a RECONCILING job of 3 x 33,334 = 100,002 executions with honest RUNNING reports.
func benchJob(b *testing.B) (*pb.JobRecord, map[string]*reconcile.Report) {
	rec := reconcilingJob(b, "bench", 33334, 0)
	return rec, honestReports(rec, stRunning)
}

// BenchmarkMerge100k merges the reports of 100k executions into the graph: steps one and two
// of the reconciliation and the job-status rule, without I/O.
func BenchmarkMerge100k(b *testing.B) {
	rec, reports := benchJob(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		plan := reconcile.Merge([]*pb.JobRecord{rec}, reports, 1)
		if plan.Counts.KeptRunning != 100002 {
			b.Fatalf("kept running %d", plan.Counts.KeptRunning)
		}
	}
}

// BenchmarkCloneJob100k copies the same job once: the baseline Merge is compared with (a leader
// cannot decide anything about a job more cheaply than by reading it once).
func BenchmarkCloneJob100k(b *testing.B) {
	rec, _ := benchJob(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if proto.Clone(rec) == nil {
			b.Fatal("nil clone")
		}
	}
}

// BenchmarkMergeCompact100k is the merge a leader runs today on full reports that keep every
// execution as committed (their starts as committed): kept ranges, no records.
func BenchmarkMergeCompact100k(b *testing.B) {
	rec, reports := benchJob(b)
	for _, r := range reports {
		for _, e := range r.Executions {
			e.StartTimestamp = 100
		}
	}
	benchCompact(b, rec, reports)
}

// BenchmarkMergeAsExpected100k is the same merge when every TM answered as expected: no
// execution is listed, so none is looked up.
func BenchmarkMergeAsExpected100k(b *testing.B) {
	rec, reports := benchJob(b)
	for _, r := range reports {
		r.Executions, r.AsExpected = nil, true
	}
	benchCompact(b, rec, reports)
}

func benchCompact(b *testing.B, rec *pb.JobRecord, reports map[string]*reconcile.Report) {
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		plan := reconcile.MergeCompact([]*pb.JobRecord{rec}, reports, 1)
		if plan.Counts.KeptRunning != 100002 || len(plan.Jobs[0].Executions) != 0 {
			b.Fatalf("kept running %d, %d records", plan.Counts.KeptRunning, len(plan.Jobs[0].Executions))
		}
	}
}
