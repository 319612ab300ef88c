package reconcile_test

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/reconcile"
	"github.com/jmcluster/jmcluster/transport/pb"
)

type wantCancel struct{ tm, attempt, reason string }

func TestMerge(t *testing.T) {
	const p = 2 // 6 executions: subtask 0 on tm1, subtask 1 on tm2
	cases := []struct {
		name string
		// edit changes the committed job and the reports before the merge.
		edit        func(rec *pb.JobRecord, reports map[string]*reconcile.Report)
		reported    pb.ExecutionState
		wantStatus  pb.JobStatus
		wantStates  map[string]pb.ExecutionState // "vertex[subtask]" -> state; the rest as reported
		wantCancels []wantCancel
		wantCounts  *pb.ReconciliationCounts
		wantAcks    int
	}{{
		name:       "all running -> RUNNING",
		reported:   stRunning,
		wantStatus: jobRunning,
		wantCounts: &pb.ReconciliationCounts{Executions: 6, KeptRunning: 6},
	}, {
		name:       "deploying is still starting -> RUNNING with the task INITIALIZING",
		reported:   stRunning,
		edit:       func(_ *pb.JobRecord, r map[string]*reconcile.Report) { findRep(r, "sink", 1).State = stDeploying },
		wantStatus: jobRunning,
		wantStates: map[string]pb.ExecutionState{"sink[1]": pb.ExecutionState_EXECUTION_STATE_INITIALIZING},
		wantCounts: &pb.ReconciliationCounts{Executions: 6, KeptRunning: 6},
	}, {
		name:       "every task finished -> FINISHED, retained states acknowledged",
		reported:   stFinished,
		wantStatus: jobFinished,
		wantCounts: &pb.ReconciliationCounts{Executions: 6, Finished: 6},
		wantAcks:   6,
	}, {
		name:     "finished tasks in a streaming job do not prevent RUNNING",
		reported: stRunning,
		edit: func(_ *pb.JobRecord, r map[string]*reconcile.Report) {
			findRep(r, "source", 0).State = stFinished
		},
		wantStatus: jobRunning,
		wantStates: map[string]pb.ExecutionState{"source[0]": stFinished},
		wantCounts: &pb.ReconciliationCounts{Executions: 6, KeptRunning: 5, Finished: 1},
		wantAcks:   1,
	}, {
		name:     "a task FAILED during the gap -> FAILING",
		reported: stRunning,
		edit: func(_ *pb.JobRecord, r map[string]*reconcile.Report) {
			e := findRep(r, "map", 1)
			e.State, e.FailureCause = stFailed, "boom"
		},
		wantStatus: jobFailing,
		wantStates: map[string]pb.ExecutionState{"map[1]": stFailed},
		wantCounts: &pb.ReconciliationCounts{Executions: 6, KeptRunning: 5, Failed: 1},
		wantAcks:   1,
	}, {
		name:       "a task CANCELED during the gap -> FAILING",
		reported:   stRunning,
		edit:       func(_ *pb.JobRecord, r map[string]*reconcile.Report) { findRep(r, "map", 0).State = stCanceled },
		wantStatus: jobFailing,
		wantStates: map[string]pb.ExecutionState{"map[0]": stCanceled},
		wantCounts: &pb.ReconciliationCounts{Executions: 6, KeptRunning: 5, Canceled: 1},
		wantAcks:   1,
	}, {
		name:       "a CANCELING task is counted CANCELED",
		reported:   stRunning,
		edit:       func(_ *pb.JobRecord, r map[string]*reconcile.Report) { findRep(r, "map", 0).State = stCanceling },
		wantStatus: jobFailing,
		wantStates: map[string]pb.ExecutionState{"map[0]": stCanceled},
		wantCounts: &pb.ReconciliationCounts{Executions: 6, KeptRunning: 5, Canceled: 1},
		wantAcks:   1,
	}, {
		name:       "a TM holding attempts did not report -> its executions FAIL (missing), FAILING",
		reported:   stRunning,
		edit:       func(_ *pb.JobRecord, r map[string]*reconcile.Report) { delete(r, "tm2") },
		wantStatus: jobFailing,
		wantStates: map[string]pb.ExecutionState{"source[1]": stFailed, "map[1]": stFailed, "sink[1]": stFailed},
		wantCounts: &pb.ReconciliationCounts{Executions: 6, KeptRunning: 3, Missing: 3, TmsMissing: 1},
	}, {
		name:     "a TM reported but not the committed attempt -> it FAILS (missing)",
		reported: stRunning,
		edit: func(_ *pb.JobRecord, r map[string]*reconcile.Report) {
			ex := r["tm1"].Executions
			for i, e := range ex {
				if e.VertexId == "sink" {
					r["tm1"].Executions = append(ex[:i:i], ex[i+1:]...)
					break
				}
			}
		},
		wantStatus: jobFailing,
		wantStates: map[string]pb.ExecutionState{"sink[0]": stFailed},
		wantCounts: &pb.ReconciliationCounts{Executions: 6, KeptRunning: 5, Missing: 1},
	}, {
		name:     "an attempt of an unknown job -> cancel it",
		reported: stRunning,
		edit: func(_ *pb.JobRecord, r map[string]*reconcile.Report) {
			r["tm1"].Executions = append(r["tm1"].Executions, &pb.ExecutionReport{JobId: "ghost", VertexId: "source", AttemptId: "g0", State: stRunning})
		},
		wantStatus:  jobRunning,
		wantCancels: []wantCancel{{"tm1", "g0", "unknown"}},
		wantCounts:  &pb.ReconciliationCounts{Executions: 6, KeptRunning: 6, CancelledUnknown: 1},
	}, {
		name:     "an unknown attempt of an unknown vertex -> cancel it",
		reported: stRunning,
		edit: func(_ *pb.JobRecord, r map[string]*reconcile.Report) {
			r["tm2"].Executions = append(r["tm2"].Executions, &pb.ExecutionReport{JobId: "job", VertexId: "nope", AttemptId: "x0", State: stRunning})
		},
		wantStatus:  jobRunning,
		wantCancels: []wantCancel{{"tm2", "x0", "unknown"}},
		wantCounts:  &pb.ReconciliationCounts{Executions: 6, KeptRunning: 6, CancelledUnknown: 1},
	}, {
		name:     "an unknown attempt that already ended is not cancelled (nothing runs)",
		reported: stRunning,
		edit: func(_ *pb.JobRecord, r map[string]*reconcile.Report) {
			r["tm2"].Executions = append(r["tm2"].Executions, &pb.ExecutionReport{JobId: "ghost", VertexId: "source", AttemptId: "g1", State: stFinished})
		},
		wantStatus: jobRunning,
		wantCounts: &pb.ReconciliationCounts{Executions: 6, KeptRunning: 6},
	}, {
		name:     "a lower attempt number than the committed one -> stale, cancel",
		reported: stRunning,
		edit: func(rec *pb.JobRecord, r map[string]*reconcile.Report) {
			// The committed attempt of map[0] is number 1; tm3 still runs number 0.
			ev := graph.FindVertex(rec.ExecutionGraph, "map", 0)
			ev.Current.AttemptId, ev.Current.AttemptNumber = attemptID("map", 0, 1), 1
			findRep(r, "map", 0).AttemptId, findRep(r, "map", 0).AttemptNumber = attemptID("map", 0, 1), 1
			r["tm3"] = &reconcile.Report{TMID: "tm3", Addr: "tm3:1", Executions: []*pb.ExecutionReport{{
				JobId: "job", VertexId: "map", SubtaskIndex: 0, AttemptId: attemptID("map", 0, 0), AttemptNumber: 0, State: stRunning}}}
		},
		wantStatus:  jobRunning,
		wantCancels: []wantCancel{{"tm3", attemptID("map", 0, 0), "stale"}},
		wantCounts:  &pb.ReconciliationCounts{Executions: 6, KeptRunning: 6, CancelledStale: 1},
	}, {
		name:     "one ExecutionVertex reported by two TMs (the committed attempt elsewhere) -> keep the committed one, cancel the other",
		reported: stRunning,
		edit: func(_ *pb.JobRecord, r map[string]*reconcile.Report) {
			dup := proto.Clone(findRep(r, "sink", 0)).(*pb.ExecutionReport)
			r["tm2"].Executions = append(r["tm2"].Executions, dup)
		},
		wantStatus:  jobRunning,
		wantCancels: []wantCancel{{"tm2", attemptID("sink", 0, 0), "duplicate"}},
		wantCounts:  &pb.ReconciliationCounts{Executions: 6, KeptRunning: 6, CancelledDuplicate: 1},
	}, {
		name:     "one ExecutionVertex reported by two TMs (another attempt, same number) -> keep the committed one, cancel the other",
		reported: stRunning,
		edit: func(_ *pb.JobRecord, r map[string]*reconcile.Report) {
			dup := proto.Clone(findRep(r, "sink", 0)).(*pb.ExecutionReport)
			dup.AttemptId = "other"
			r["tm3"] = &reconcile.Report{TMID: "tm3", Addr: "tm3:1", Executions: []*pb.ExecutionReport{dup}}
		},
		wantStatus:  jobRunning,
		wantCancels: []wantCancel{{"tm3", "other", "duplicate"}},
		wantCounts:  &pb.ReconciliationCounts{Executions: 6, KeptRunning: 6, CancelledDuplicate: 1},
	}, {
		name:     "partition counts that do not match -> FAIL that execution, cancel it",
		reported: stRunning,
		edit: func(_ *pb.JobRecord, r map[string]*reconcile.Report) {
			e := findRep(r, "map", 1)
			e.Produced = append(e.Produced, &pb.ProducedPartitionReport{ResultId: "extra", PartitionIndex: 1})
		},
		wantStatus:  jobFailing,
		wantStates:  map[string]pb.ExecutionState{"map[1]": stFailed},
		wantCancels: []wantCancel{{"tm2", attemptID("map", 1, 0), "rejected"}},
		wantCounts:  &pb.ReconciliationCounts{Executions: 6, KeptRunning: 5, Rejected: 1},
	}, {
		name:     "a consumed partition missing -> FAIL that execution",
		reported: stRunning,
		edit: func(_ *pb.JobRecord, r map[string]*reconcile.Report) {
			findRep(r, "sink", 0).Consumed = nil
		},
		wantStatus:  jobFailing,
		wantStates:  map[string]pb.ExecutionState{"sink[0]": stFailed},
		wantCancels: []wantCancel{{"tm1", attemptID("sink", 0, 0), "rejected"}},
		wantCounts:  &pb.ReconciliationCounts{Executions: 6, KeptRunning: 5, Rejected: 1},
	}, {
		name:     "a produced partition with the wrong index -> FAIL that execution",
		reported: stRunning,
		edit: func(_ *pb.JobRecord, r map[string]*reconcile.Report) {
			findRep(r, "source", 1).Produced[0].PartitionIndex = 0
		},
		wantStatus:  jobFailing,
		wantStates:  map[string]pb.ExecutionState{"source[1]": stFailed},
		wantCancels: []wantCancel{{"tm2", attemptID("source", 1, 0), "rejected"}},
		wantCounts:  &pb.ReconciliationCounts{Executions: 6, KeptRunning: 5, Rejected: 1},
	}, {
		name:     "a job that was CANCELLING stays CANCELLING",
		reported: stRunning,
		edit: func(rec *pb.JobRecord, _ map[string]*reconcile.Report) {
			rec.History[0].Status = jobCancelling
		},
		wantStatus: jobCancelling,
		wantCounts: &pb.ReconciliationCounts{Executions: 6, KeptRunning: 6},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := reconcilingJob(t, "job", p, 0)
			reports := honestReports(rec, tc.reported)
			if tc.edit != nil {
				tc.edit(rec, reports)
			}
			before := proto.Clone(rec).(*pb.JobRecord)
			plan := reconcile.Merge([]*pb.JobRecord{rec}, reports, 999)
			if !proto.Equal(before, rec) {
				t.Fatal("Merge changed its input")
			}
			if len(plan.Jobs) != 1 {
				t.Fatalf("plan has %d jobs", len(plan.Jobs))
			}
			jp := plan.Jobs[0]
			if jp.Status != tc.wantStatus {
				t.Errorf("job status %s (cause %q), want %s", graph.JobStatusName(jp.Status), jp.Cause, graph.JobStatusName(tc.wantStatus))
			}
			if tc.wantStatus == jobFailing && jp.Cause == "" {
				t.Error("FAILING without a cause")
			}
			if len(jp.Executions) != 6 {
				t.Fatalf("%d reconciled executions, want 6", len(jp.Executions))
			}
			for _, re := range jp.Executions {
				key := fmt.Sprintf("%s[%d]", re.VertexId, re.SubtaskIndex)
				want, ok := tc.wantStates[key]
				if !ok {
					want = tc.reported
				}
				e := re.Execution
				if e.State != want {
					t.Errorf("%s: state %s, want %s", key, graph.ExecutionStateName(e.State), graph.ExecutionStateName(want))
				}
				committed := graph.FindVertex(rec.ExecutionGraph, re.VertexId, re.SubtaskIndex).Current
				if e.AttemptId != committed.AttemptId || e.AttemptNumber != committed.AttemptNumber {
					t.Errorf("%s: attempt %s#%d, the committed one is %s#%d", key, e.AttemptId, e.AttemptNumber, committed.AttemptId, committed.AttemptNumber)
				}
				last := e.StateTimestamps[len(e.StateTimestamps)-1]
				if last.State != e.State || last.Timestamp != 999 {
					t.Errorf("%s: last state timestamp %v, want %s at 999", key, last, graph.ExecutionStateName(e.State))
				}
				if e.State == stFailed && e.FailureCause == "" {
					t.Errorf("%s: FAILED without a cause", key)
				}
				if e.State == tc.reported && e.State == stRunning && e.StartTimestamp != 150 {
					t.Errorf("%s: start timestamp %d, the report says 150", key, e.StartTimestamp)
				}
			}
			var got []wantCancel
			for _, c := range plan.Cancels {
				got = append(got, wantCancel{c.TMID, c.AttemptID, c.Reason})
				if c.Addr != c.TMID+":1" {
					t.Errorf("cancel %v sent to %q", c, c.Addr)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.wantCancels) {
				t.Errorf("cancels %v, want %v", got, tc.wantCancels)
			}
			want := proto.Clone(tc.wantCounts).(*pb.ReconciliationCounts)
			if !proto.Equal(plan.Counts, want) {
				t.Errorf("counts %v, want %v", plan.Counts, want)
			}
			acks := 0
			for _, ids := range plan.Acks {
				acks += len(ids)
			}
			if acks != tc.wantAcks {
				t.Errorf("%d acknowledgements, want %d: %v", acks, tc.wantAcks, plan.Acks)
			}
		})
	}
}

// TestMergeOnlyReconcilingExecutions: executions that were already terminal when the
// reconciliation began are left alone and still count towards FINISHED.
func TestMergeOnlyReconcilingExecutions(t *testing.T) {
	rec := reconcilingJob(t, "job", 2, 0)
	reports := honestReports(rec, stFinished)
	// source[0] finished (committed) before the leader died; its TM no longer retains it.
	ev := graph.FindVertex(rec.ExecutionGraph, "source", 0)
	ev.Current.State = stFinished
	r := reports["tm1"]
	for i, e := range r.Executions {
		if e.VertexId == "source" {
			r.Executions = append(r.Executions[:i:i], r.Executions[i+1:]...)
			break
		}
	}
	plan := reconcile.Merge([]*pb.JobRecord{rec}, reports, 1)
	if got := len(plan.Jobs[0].Executions); got != 5 {
		t.Fatalf("%d reconciled executions, want 5 (source[0] was already FINISHED)", got)
	}
	if plan.Jobs[0].Status != jobFinished || plan.Counts.Finished != 5 || plan.Counts.Missing != 0 {
		t.Fatalf("status %s counts %v, want FINISHED with 5 finished", graph.JobStatusName(plan.Jobs[0].Status), plan.Counts)
	}
	if planState(plan, "source", 0) != nil {
		t.Fatal("source[0] is in the plan")
	}
}

// TestMergeDeterministic: the same inputs give the same plan whatever the order the reports
// arrived in, and jobs come out ordered by id.
func TestMergeDeterministic(t *testing.T) {
	a, b := reconcilingJob(t, "job-b", 3, 0), reconcilingJob(t, "job-a", 3, 0)
	reports := honestReports(a, stRunning)
	for tm, r := range honestReports(b, stRunning) {
		reports[tm].Executions = append(reports[tm].Executions, r.Executions...)
	}
	reports["tm1"].Executions = append(reports["tm1"].Executions, &pb.ExecutionReport{JobId: "ghost", AttemptId: "g", State: stRunning})
	reports["tm3"].Executions = append(reports["tm3"].Executions, &pb.ExecutionReport{JobId: "ghost", AttemptId: "h", State: stRunning})
	first := reconcile.Merge([]*pb.JobRecord{a, b}, reports, 5)
	for i := 0; i < 20; i++ {
		again := reconcile.Merge([]*pb.JobRecord{b, a}, reports, 5)
		if fmt.Sprint(again.Cancels) != fmt.Sprint(first.Cancels) || !proto.Equal(again.Counts, first.Counts) || len(again.Jobs) != 2 {
			t.Fatalf("plans differ:\n%v\n%v", first.Cancels, again.Cancels)
		}
		for j := range first.Jobs {
			if again.Jobs[j].JobID != first.Jobs[j].JobID {
				t.Fatalf("job order differs: %s vs %s", again.Jobs[j].JobID, first.Jobs[j].JobID)
			}
			for k, re := range first.Jobs[j].Executions {
				if !proto.Equal(re, again.Jobs[j].Executions[k]) {
					t.Fatalf("execution %d of %s differs", k, first.Jobs[j].JobID)
				}
			}
		}
	}
	if first.Jobs[0].JobID != "job-a" {
		t.Fatalf("first job %s, want job-a", first.Jobs[0].JobID)
	}
}

// TestMergeCancelsALiveAttemptTheGraphEnded: the committed current attempt of map[1] is FAILED
// or CANCELED (the old leader ended it before it died; its region is to restart), yet tm2
// reports the task still RUNNING. The execution is not RECONCILING, so step two leaves it
// alone; step one must cancel the task, or it keeps running and holding its slot while its
// region restarts. Reported as already ended, nothing runs and nothing is cancelled.
func TestMergeCancelsALiveAttemptTheGraphEnded(t *testing.T) {
	for _, committed := range []pb.ExecutionState{stFailed, stCanceled} {
		for _, reported := range []pb.ExecutionState{stRunning, stFailed} {
			t.Run(graph.ExecutionStateName(committed)+"/reported "+graph.ExecutionStateName(reported), func(t *testing.T) {
				rec := reconcilingJob(t, "job", 2, 0)
				reports := honestReports(rec, stRunning)
				ev := graph.FindVertex(rec.ExecutionGraph, "map", 1)
				ev.Current.State = committed
				findRep(reports, "map", 1).State = reported
				plan := reconcile.Merge([]*pb.JobRecord{rec}, reports, 1)
				var got []wantCancel
				for _, c := range plan.Cancels {
					got = append(got, wantCancel{c.TMID, c.AttemptID, c.Reason})
				}
				var want []wantCancel
				if reported == stRunning {
					want = []wantCancel{{"tm2", ev.Current.AttemptId, "stale"}}
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("cancels %v, want %v", got, want)
				}
				if planState(plan, "map", 1) != nil || len(plan.Jobs[0].Executions) != 5 {
					t.Fatalf("map[1] (already %s) is in the plan", graph.ExecutionStateName(committed))
				}
				if n := int64(len(want)); plan.Counts.CancelledStale != n || plan.Counts.KeptRunning != 5 {
					t.Fatalf("counts %v, want 5 kept running and %d stale", plan.Counts, n)
				}
			})
		}
	}
}

// TestMergeAsExpectedIsTheFullReport: a TM that answers as expected (no execution listed) gives
// the plan its full report would give when every execution on it runs as committed, in both
// forms of the merge; a TM missing from the reports still fails its executions.
func TestMergeAsExpectedIsTheFullReport(t *testing.T) {
	rec := reconcilingJob(t, "job-a", 3, 2)
	full := honestReports(rec, stRunning)
	for _, r := range full {
		for _, e := range r.Executions {
			e.StartTimestamp = 100 // as committed
		}
	}
	short := map[string]*reconcile.Report{}
	for id, r := range full {
		short[id] = &reconcile.Report{TMID: r.TMID, Addr: r.Addr}
		if id != "tm2" {
			short[id].AsExpected, short[id].Expected = true, int64(len(r.Executions))
		} else {
			short[id].Executions = r.Executions // one TM of an older build
		}
	}
	for _, merge := range []func([]*pb.JobRecord, map[string]*reconcile.Report, int64) *reconcile.Plan{reconcile.Merge, reconcile.MergeCompact} {
		want := describeSorted(merge([]*pb.JobRecord{rec}, full, 1000), []*pb.JobRecord{rec})
		got := describeSorted(merge([]*pb.JobRecord{rec}, short, 1000), []*pb.JobRecord{rec})
		if got != want {
			t.Fatalf("as-expected answers give another plan:\n%s\nfull reports give:\n%s", got, want)
		}
	}
	delete(short, "tm3")
	p := reconcile.MergeCompact([]*pb.JobRecord{rec}, short, 1000)
	if p.Counts.Missing != 3 || p.Counts.KeptRunning != 6 || len(p.MissingTMs) != 1 || p.MissingTMs[0] != "tm3" {
		t.Fatalf("with tm3 silent: %v, missing %v", p.Counts, p.MissingTMs)
	}
}
