package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestRecordSteps: the demo's reconciliation steps come from the record alone, one per phase
// and per TaskManager, at the record's times, with the reconciler's step names and details.
func TestRecordSteps(t *testing.T) {
	counts := &pb.ReconciliationCounts{Executions: 9, KeptRunning: 6, Missing: 3, Reports: 2, TmsMissing: 1}
	cases := []struct {
		name string
		rec  *pb.ReconciliationRecord
		want []string
	}{{
		name: "every TM reports",
		rec: &pb.ReconciliationRecord{Epoch: 2, StartedAt: 1000, CollectedAt: 1004, MergedAt: 1005, JobsCommittedAt: 1008, EndedAt: 1010,
			Outcome: "completed", Jobs: []string{"j1"}, Counts: &pb.ReconciliationCounts{Executions: 9, KeptRunning: 9, Reports: 3},
			Reports: []*pb.ReconciliationReport{
				{TmId: "tm1", Outcome: "reported", At: 1002, Executions: 3},
				{TmId: "tm3", Outcome: "reported", At: 1003, Executions: 3},
				{TmId: "tm2", Outcome: "reported", At: 1004, Executions: 3}}},
		want: []string{
			"1000 begin 1 jobs RECONCILING",
			"1002 report tm1 reported 3 executions",
			"1003 report tm3 reported 3 executions",
			"1004 report tm2 reported 3 executions",
			"1005 merged 1 jobs, 9 executions: 9 running, 0 finished, 0 failed, 0 canceled, 0 missing, 0 rejected; cancel 0 unknown, 0 stale, 0 duplicate; 3 reports, 0 TMs missing",
			"1010 committed reconciled graph committed in 10ms",
		},
	}, {
		name: "a TM refused, one missing, one dead",
		rec: &pb.ReconciliationRecord{Epoch: 3, StartedAt: 2000, CollectedAt: 5000, MergedAt: 5001, JobsCommittedAt: 5002, EndedAt: 5003,
			Outcome: "completed", Jobs: []string{"j1", "j2"}, Counts: counts,
			Reports: []*pb.ReconciliationReport{
				{TmId: "tm1", Outcome: "reported", At: 2100, Executions: 6},
				{TmId: "tm2", Outcome: "refused", At: 2200, Detail: "report over 10 executions"},
				{TmId: "tm3", Outcome: "missing", At: 5000},
				{TmId: "tm4", Outcome: "dead", At: 5000},
				{TmId: "tm5", Outcome: "missing", At: 5000}}},
		want: []string{
			"2000 begin 2 jobs RECONCILING",
			"2100 report tm1 reported 6 executions",
			"2200 report-refused report over 10 executions; tm2 counts as not reported",
			"5000 deadline report deadline passed; no report from tm3, tm5",
			"5001 merged 2 jobs, 9 executions: 6 running, 0 finished, 0 failed, 0 canceled, 3 missing, 0 rejected; cancel 0 unknown, 0 stale, 0 duplicate; 2 reports, 1 TMs missing",
			"5003 committed reconciled graph committed in 3.003s",
		},
	}, {
		name: "a TM proven dead by refused connections",
		rec: &pb.ReconciliationRecord{Epoch: 4, StartedAt: 3000, CollectedAt: 3450, MergedAt: 3451, JobsCommittedAt: 3452, EndedAt: 3453,
			Outcome: "completed", Jobs: []string{"j1"}, Counts: counts,
			Reports: []*pb.ReconciliationReport{
				{TmId: "tm1", Outcome: "reported", At: 3010, Executions: 6},
				{TmId: "tm2", Outcome: "dead", At: 3440, Detail: "TaskManager tm2 lost: connection refused 3 times over 300ms at 127.0.0.1:7402 (its process is gone)"}}},
		want: []string{
			"3000 begin 1 jobs RECONCILING",
			"3010 report tm1 reported 6 executions",
			"3440 dead TaskManager tm2 lost: connection refused 3 times over 300ms at 127.0.0.1:7402 (its process is gone); not waited for",
			"3451 merged 1 jobs, 9 executions: 6 running, 0 finished, 0 failed, 0 canceled, 3 missing, 0 rejected; cancel 0 unknown, 0 stale, 0 duplicate; 2 reports, 1 TMs missing",
			"3453 committed reconciled graph committed in 453ms",
		},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			for _, s := range recordSteps(c.rec) {
				got = append(got, fmt.Sprintf("%d %s %s", s.at.UnixMilli(), s.name, s.detail))
			}
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Fatalf("steps:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"))
			}
		})
	}
}

// TestPlacementLines: the demo's placement lines name each region's members and the slots
// they share, from the committed record.
func TestPlacementLines(t *testing.T) {
	jg := &pb.JobGraph{JobId: "j", Vertices: []*pb.JobVertex{{Id: "a", Parallelism: 2}, {Id: "b", Parallelism: 2}},
		Edges: []*pb.JobEdge{{Source: "a", Target: "b", Distribution: pb.Distribution_DISTRIBUTION_FORWARD, ResultType: pb.ResultType_RESULT_TYPE_PIPELINED}}}
	eg := &pb.ExecutionGraph{}
	for _, v := range jg.Vertices {
		ejv := &pb.ExecutionJobVertex{VertexId: v.Id}
		for i := int32(0); i < v.Parallelism; i++ {
			tm := fmt.Sprintf("tm%d", i+1)
			ejv.Subtasks = append(ejv.Subtasks, &pb.ExecutionVertex{VertexId: v.Id, SubtaskIndex: i, Current: &pb.Execution{Slot: &pb.SlotID{TmId: tm, Index: 0}}})
		}
		eg.Vertices = append(eg.Vertices, ejv)
	}
	got := placementLines(&pb.JobRecord{JobGraph: jg, ExecutionGraph: eg})
	want := []string{
		"placement: 2 failover regions; a region's tasks share a slot (one subtask of each vertex), regions spread over the TaskManagers:",
		"  region 0: a[0] b[0] in slot tm1/0 (1 TaskManager)",
		"  region 1: a[1] b[1] in slot tm2/0 (1 TaskManager)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
