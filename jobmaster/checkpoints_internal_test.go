package jobmaster

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/transport/pb"
)

var testSettings = graph.CheckpointSettings{IntervalMs: 100, TimeoutMs: 1000, MaxConcurrent: 1, Retained: 1}

func ckAck(vertex string, subtask, attempt int32) *pb.TaskCheckpointAck {
	return &pb.TaskCheckpointAck{VertexId: vertex, SubtaskIndex: subtask, AttemptNumber: attempt, StateSizeBytes: 1,
		StatePath: fmt.Sprintf("job/chk-1/%s-%d-%d.state", vertex, subtask, attempt)}
}

// TestViewOf: what a round reads of a job: the first subtask not RUNNING and whether it
// failed, the source attempts by TM (only when a trigger is due), every TM of the job, and
// an acknowledgement from an attempt that is no longer current.
func TestViewOf(t *testing.T) {
	rec := planJob(t, planChain(2), jobRunning, 0, every(2, stRunning))
	v := viewOf(rec, true)
	if v.notRunning != "" || v.tasks != 6 || !slices.Equal(v.addrs, []string{"tm1:1", "tm2:1"}) {
		t.Fatalf("view %+v", v)
	}
	if got := v.sources["tm1:1"]; !slices.Equal(got, []string{"source-0-a0"}) || len(v.sources) != 2 {
		t.Errorf("sources %v, want source[0] on tm1 and source[1] on tm2", v.sources)
	}
	if v := viewOf(rec, false); len(v.sources) != 0 {
		t.Errorf("sources %v read with no trigger due", v.sources)
	}
	failed := viewOf(planJob(t, planChain(2), jobRunning, 0, with(every(2, stRunning), "map[1]", stFailed)), false)
	if failed.notRunning != "map[1] attempt 0 is FAILED" || !failed.failed {
		t.Errorf("failed: %q %v", failed.notRunning, failed.failed)
	}
	deploying := viewOf(planJob(t, planChain(2), jobRunning, 1, with(every(2, stRunning), "sink[0]", stDeploying)), false)
	if deploying.notRunning != "sink[0] attempt 1 is DEPLOYING" || deploying.failed {
		t.Errorf("deploying: %q %v", deploying.notRunning, deploying.failed)
	}
	restarted := planJob(t, planChain(2), jobRunning, 1, every(2, stRunning))
	restarted.Checkpoints = &pb.JobCheckpoints{NextCheckpointId: 2, Pending: []*pb.CheckpointRecord{{Id: 1, Acks: []*pb.TaskCheckpointAck{ckAck("map", 0, 0)}}}}
	if p := viewOf(restarted, false).pending; len(p) != 1 || p[0].stale != "map[0] restarted (attempt 0 acknowledged, attempt 1 is current)" || p[0].acked != 1 {
		t.Errorf("pending %+v", p)
	}
}

// TestPendingAbortReason: every rule that aborts a pending checkpoint, and the cases that
// keep it.
func TestPendingAbortReason(t *testing.T) {
	running := jobView{status: jobRunning, attempts: 6}
	cases := []struct {
		name      string
		v         jobView
		ck        pendingView
		nowMs     int64
		triggered int64
		ours      bool
		want      string
	}{
		{name: "within its timeout", v: running, ck: pendingView{id: 1, triggerMs: 1000}, nowMs: 2000, want: ""},
		{name: "past its timeout", v: running, ck: pendingView{id: 1, triggerMs: 1000}, nowMs: 2001, want: "timeout after 1001ms (checkpoint_config.timeout_ms 1000)"},
		{name: "job not running", v: jobView{status: jobCancelling}, ck: pendingView{id: 1, triggerMs: 1000}, nowMs: 1000, want: "job is CANCELLING"},
		{name: "a task failed", v: jobView{status: jobRunning, notRunning: "map[1] attempt 0 is FAILED", failed: true}, ck: pendingView{triggerMs: 1000}, nowMs: 1000, want: "task failure: map[1] attempt 0 is FAILED"},
		{name: "a task finished", v: jobView{status: jobRunning, notRunning: "source[0] attempt 0 is FINISHED"}, ck: pendingView{triggerMs: 1000}, nowMs: 1000, want: "not every task is running: source[0] attempt 0 is FINISHED"},
		{name: "a stale acknowledgement", v: running, ck: pendingView{triggerMs: 1000, stale: "map[0] restarted"}, nowMs: 1000, want: "task failure: map[0] restarted"},
		{name: "attempts changed since this term's trigger", v: running, ck: pendingView{triggerMs: 1000}, nowMs: 1000, triggered: 5, ours: true, want: "task failure: a subtask was restarted after the trigger"},
		{name: "an earlier term's trigger: no attempt sum", v: running, ck: pendingView{triggerMs: 1000}, nowMs: 1000, triggered: 5, ours: false, want: ""},
		{name: "unchanged since this term's trigger", v: running, ck: pendingView{triggerMs: 1000}, nowMs: 1000, triggered: 6, ours: true, want: ""},
	}
	for _, tc := range cases {
		if got := pendingAbortReason(tc.v, tc.ck, testSettings, tc.nowMs, tc.triggered, tc.ours); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestResolution: the failover rule. A pending checkpoint of an earlier epoch completes when
// every subtask has an acknowledgement in its record or in a report of its current attempt
// for that checkpoint; otherwise it is aborted, naming how many had and one that had not.
func TestResolution(t *testing.T) {
	all := []string{"source[0]", "source[1]", "map[0]", "map[1]", "sink[0]", "sink[1]"}
	report := func(rec *pb.JobRecord, id uint64, keys ...string) []ReportedCheckpointAck {
		var out []ReportedCheckpointAck
		for _, k := range keys {
			v, rest, _ := strings.Cut(k, "[")
			var i int32
			fmt.Sscanf(rest, "%d]", &i)
			cur := graph.FindVertex(rec.ExecutionGraph, v, i).Current
			out = append(out, ReportedCheckpointAck{JobID: "job", AttemptID: cur.AttemptId, CheckpointID: id, Ack: ckAck(v, i, cur.AttemptNumber)})
		}
		return out
	}
	rec := planJob(t, planChain(2), jobRunning, 0, every(2, stRunning))
	inRecord := &pb.CheckpointRecord{Id: 3, Acks: []*pb.TaskCheckpointAck{ckAck("map", 0, 0), ckAck("source", 0, 0)}}
	cases := []struct {
		name        string
		rec         *pb.JobRecord
		reported    []ReportedCheckpointAck
		wantMissing int
		wantAbort   string
	}{
		{name: "every acknowledgement in the record and the reports", rec: rec, reported: report(rec, 3, "source[1]", "map[1]", "sink[0]", "sink[1]"), wantMissing: 4},
		{name: "reports repeat what the record holds", rec: rec, reported: report(rec, 3, all...), wantMissing: 4},
		{name: "one subtask without any", rec: rec, reported: report(rec, 3, "source[1]", "map[1]", "sink[0]"),
			wantAbort: "leader changed before every task acknowledged (5 of 6 subtasks acknowledged, not sink[1])"},
		{name: "reports of another checkpoint", rec: rec, reported: report(rec, 4, all...),
			wantAbort: "leader changed before every task acknowledged (2 of 6 subtasks acknowledged, not source[1])"},
		{name: "no reports", rec: rec,
			wantAbort: "leader changed before every task acknowledged (2 of 6 subtasks acknowledged, not source[1])"},
		{name: "the job failed", rec: planJob(t, planChain(2), jobFailing, 0, every(2, stRunning)), reported: report(rec, 3, all...), wantAbort: "job is FAILING"},
	}
	for _, tc := range cases {
		missing, abort := resolution(tc.rec, inRecord, tc.reported)
		if abort != tc.wantAbort || len(missing) != tc.wantMissing {
			t.Errorf("%s: %d missing, abort %q; want %d, %q", tc.name, len(missing), abort, tc.wantMissing, tc.wantAbort)
		}
	}
	// A report from an attempt that is not the current one does not count.
	restarted := planJob(t, planChain(2), jobRunning, 1, every(2, stRunning))
	old := report(rec, 3, "source[1]", "map[1]", "sink[0]", "sink[1]") // attempt 0's
	if _, abort := resolution(restarted, &pb.CheckpointRecord{Id: 3, Acks: []*pb.TaskCheckpointAck{ckAck("map", 0, 1), ckAck("source", 0, 1)}}, old); !strings.Contains(abort, "2 of 6") {
		t.Errorf("acknowledgements of earlier attempts counted: %q", abort)
	}
}

// TestAnnounceTargets: a new leader announces the latest completed checkpoint again only to
// the TMs whose reports do not show every committing sink of the job at it: one that did not
// list its executions (no report, or an as-expected answer), and one that listed a sink
// behind; not one whose sinks committed it or that runs no sink of the job. Without reports,
// every TM.
func TestAnnounceTargets(t *testing.T) {
	addrs := []string{"tm1:1", "tm2:1", "tm3:1", "tm4:1"}
	commits := SinkCommits{
		Listed: map[string]bool{"tm1:1": true, "tm2:1": true, "tm3:1": true},
		Lowest: map[string]map[string]uint64{
			"job": {"tm1:1": 7, "tm2:1": 6}, // tm3 listed no sink of the job, tm4 no executions
			"old": {"tm1:1": 1, "tm3:1": 0}, // another job's sinks do not count
		},
	}
	if got, want := announceTargets("job", 7, addrs, commits), []string{"tm2:1", "tm4:1"}; !slices.Equal(got, want) {
		t.Fatalf("targets %v, want %v (tm2's sink committed 6 of 7; tm4 listed nothing)", got, want)
	}
	if got := announceTargets("job", 6, addrs, commits); !slices.Equal(got, []string{"tm4:1"}) {
		t.Fatalf("targets at 6: %v, want only tm4", got)
	}
	if got := announceTargets("job", 7, addrs, SinkCommits{}); !slices.Equal(got, addrs) {
		t.Fatalf("without reports: %v, want every TM", got)
	}
}
