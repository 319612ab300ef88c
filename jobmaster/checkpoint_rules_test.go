package jobmaster

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// renderView is what a round reads of a job, on one line.
func renderView(v jobView) string {
	var pending []string
	for _, p := range v.pending {
		pending = append(pending, fmt.Sprintf("%d@%d acked %d stale %q", p.id, p.triggerMs, p.acked, p.stale))
	}
	return fmt.Sprintf("%d tasks, attempts %d, not running %q failed %v, tms %v, sources %v by %v, pending %v",
		v.tasks, v.attempts, v.notRunning, v.failed, v.addrs, v.sources, v.tmIDs, pending)
}

// renderSteps is a round's decision, one step after another.
func renderSteps(steps []ckStep) string {
	var out []string
	for _, s := range steps {
		switch s.kind {
		case ckAbort:
			out = append(out, fmt.Sprintf("abort %d: %s", s.id, s.reason))
		case ckComplete:
			out = append(out, fmt.Sprintf("complete %d", s.id))
		case ckTrigger:
			out = append(out, "trigger")
		}
	}
	return strings.Join(out, "; ")
}

// withPending is a RUNNING chain of parallelism 2, every current attempt number n and RUNNING
// (subtask i on tm<i+1>), with the pending checkpoints given and 9 as the next id.
func withPending(t *testing.T, n int32, pending ...*pb.CheckpointRecord) *pb.JobRecord {
	rec := planJob(t, planChain(2), jobRunning, n, every(2, stRunning))
	rec.Checkpoints = &pb.JobCheckpoints{NextCheckpointId: 9, Pending: pending}
	return rec
}

func ackReqOf(tm string, id uint64, acks ...*pb.TaskCheckpointAck) *pb.AcknowledgeCheckpointRequest {
	return &pb.AcknowledgeCheckpointRequest{TmId: tm, JobId: "job", CheckpointId: id, Acks: acks}
}

// renderAcks is ackVerdicts' answer on one line.
func renderAcks(fresh []*pb.TaskCheckpointAck, refused []string, ended string, err error) string {
	var f []string
	for _, a := range fresh {
		f = append(f, fmt.Sprintf("%s[%d]#%d", a.VertexId, a.SubtaskIndex, a.AttemptNumber))
	}
	return fmt.Sprintf("fresh %v refused %q ended %q error %v", f, refused, ended, err)
}

// TestCheckpointRules: every rule of checkpoint_rules.go, one named case per branch, each
// rendered as the decision the coordinator carries out.
func TestCheckpointRules(t *testing.T) {
	s := testSettings // interval 100 ms, timeout 1000 ms, one pending at a time
	running := jobView{status: jobRunning, attempts: 6, tasks: 6, due: true}
	pendingAt := func(v jobView, ps ...pendingView) jobView { v.pending = ps; return v }
	at := time.UnixMilli(10_000)
	// Every subtask's, in the record's order (by vertex, then subtask).
	sixAcks := []*pb.TaskCheckpointAck{ckAck("map", 0, 0), ckAck("map", 1, 0), ckAck("sink", 0, 0), ckAck("sink", 1, 0), ckAck("source", 0, 0), ckAck("source", 1, 0)}
	cases := []struct {
		name string
		run  func(t *testing.T) string
		want string
	}{
		// What a round reads of a job.
		{"viewOf: every task running, a trigger due -> source attempts by TM", func(t *testing.T) string {
			return renderView(viewOf(planJob(t, planChain(2), jobRunning, 0, every(2, stRunning)), true))
		}, `6 tasks, attempts 0, not running "" failed false, tms [tm1:1 tm2:1], sources map[tm1:1:[source-0-a0] tm2:1:[source-1-a0]] by map[tm1:1:tm1 tm2:1:tm2], pending []`},
		{"viewOf: no trigger due -> no sources read", func(t *testing.T) string {
			return renderView(viewOf(planJob(t, planChain(1), jobRunning, 2, every(1, stRunning)), false))
		}, `3 tasks, attempts 6, not running "" failed false, tms [tm1:1], sources map[] by map[], pending []`},
		{"viewOf: a subtask never deployed -> not running", func(t *testing.T) string {
			return renderView(viewOf(planJob(t, planChain(1), jobRunning, 0, with(every(1, stRunning), "map[0]", nil)), false))
		}, `3 tasks, attempts 0, not running "map[0] has no attempt" failed false, tms [tm1:1], sources map[] by map[], pending []`},
		{"viewOf: a failed attempt -> not running, failed", func(t *testing.T) string {
			return renderView(viewOf(planJob(t, planChain(1), jobRunning, 0, with(every(1, stRunning), "sink[0]", stFailed)), false))
		}, `3 tasks, attempts 0, not running "sink[0] attempt 0 is FAILED" failed true, tms [tm1:1], sources map[] by map[], pending []`},
		{"viewOf: a deploying attempt -> not running, not failed", func(t *testing.T) string {
			return renderView(viewOf(planJob(t, planChain(1), jobRunning, 0, with(every(1, stRunning), "source[0]", stDeploying)), true))
		}, `3 tasks, attempts 0, not running "source[0] attempt 0 is DEPLOYING" failed false, tms [tm1:1], sources map[] by map[], pending []`},
		{"viewOf: an acknowledgement of an earlier attempt -> the pending checkpoint is stale", func(t *testing.T) string {
			return renderView(viewOf(withPending(t, 1, &pb.CheckpointRecord{Id: 4, TriggerUnixMs: 7, Acks: []*pb.TaskCheckpointAck{ckAck("map", 0, 0)}}), false))
		}, `6 tasks, attempts 6, not running "" failed false, tms [tm1:1 tm2:1], sources map[] by map[], pending [4@7 acked 1 stale "map[0] restarted (attempt 0 acknowledged, attempt 1 is current)"]`},
		{"attemptName: the current attempt's number, or none", func(*testing.T) string {
			return attemptName(&pb.Execution{AttemptNumber: 2}) + " " + attemptName(nil)
		}, "2 none"},
		{"sourceVertices: the vertices whose operator has no input", func(t *testing.T) string {
			return fmt.Sprint(sourceVertices(planChain(1)))
		}, "map[source:true]"},

		// When a trigger is due.
		{"triggerDue: a job first seen -> not due", func(*testing.T) string { return fmt.Sprint(triggerDue(time.Time{}, false, s, at)) }, "false"},
		{"triggerDue: within the interval -> not due", func(*testing.T) string { return fmt.Sprint(triggerDue(at, true, s, at.Add(99*time.Millisecond))) }, "false"},
		{"triggerDue: an interval since the last trigger -> due", func(*testing.T) string { return fmt.Sprint(triggerDue(at, true, s, at.Add(100*time.Millisecond))) }, "true"},

		// When a pending checkpoint is aborted, and why.
		{"pendingAbortReason: the job left RUNNING", func(*testing.T) string {
			return pendingAbortReason(jobView{status: jobFailing}, pendingView{triggerMs: 1000}, s, 1000, 0, false)
		}, "job is FAILING"},
		{"pendingAbortReason: past its timeout", func(*testing.T) string {
			return pendingAbortReason(running, pendingView{triggerMs: 1000}, s, 2001, 0, false)
		}, "timeout after 1001ms (checkpoint_config.timeout_ms 1000)"},
		{"pendingAbortReason: a task failed", func(*testing.T) string {
			return pendingAbortReason(jobView{status: jobRunning, notRunning: "map[1] attempt 0 is FAILED", failed: true}, pendingView{triggerMs: 1000}, s, 1000, 0, false)
		}, "task failure: map[1] attempt 0 is FAILED"},
		{"pendingAbortReason: a task not running (finished, deploying)", func(*testing.T) string {
			return pendingAbortReason(jobView{status: jobRunning, notRunning: "source[0] attempt 0 is FINISHED"}, pendingView{triggerMs: 1000}, s, 1000, 0, false)
		}, "not every task is running: source[0] attempt 0 is FINISHED"},
		{"pendingAbortReason: an acknowledgement of an attempt no longer current", func(*testing.T) string {
			return pendingAbortReason(running, pendingView{triggerMs: 1000, stale: "map[0] restarted"}, s, 1000, 0, false)
		}, "task failure: map[0] restarted"},
		{"pendingAbortReason: attempts changed since this term's trigger", func(*testing.T) string {
			return pendingAbortReason(running, pendingView{triggerMs: 1000}, s, 1000, 5, true)
		}, "task failure: a subtask was restarted after the trigger"},
		{"pendingAbortReason: unchanged since this term's trigger -> kept", func(*testing.T) string {
			return pendingAbortReason(running, pendingView{triggerMs: 1000}, s, 2000, 6, true)
		}, ""},
		{"pendingAbortReason: an earlier term's trigger has no attempt sum -> kept", func(*testing.T) string {
			return pendingAbortReason(running, pendingView{triggerMs: 1000}, s, 1000, 5, false)
		}, ""},

		// When a checkpoint completes.
		{"allAcknowledged: every subtask -> complete", func(*testing.T) string { return fmt.Sprint(allAcknowledged(6, 6)) }, "true"},
		{"allAcknowledged: one missing -> wait", func(*testing.T) string { return fmt.Sprint(allAcknowledged(5, 6)) }, "false"},
		{"pendingAcknowledged: pending, every subtask acknowledged", func(t *testing.T) string {
			return fmt.Sprint(pendingAcknowledged(withPending(t, 0, &pb.CheckpointRecord{Id: 4, Acks: sixAcks}), 4))
		}, "true"},
		{"pendingAcknowledged: pending, one subtask missing", func(t *testing.T) string {
			return fmt.Sprint(pendingAcknowledged(withPending(t, 0, &pb.CheckpointRecord{Id: 4, Acks: sixAcks[1:]}), 4))
		}, "false"},
		{"pendingAcknowledged: not pending", func(t *testing.T) string { return fmt.Sprint(pendingAcknowledged(withPending(t, 0), 4)) }, "false"},

		// A round: aborts, completions, then a trigger.
		{"roundSteps: nothing pending, a trigger due -> trigger", func(*testing.T) string { return renderSteps(roundSteps(running, s, 1000, nil, true)) }, "trigger"},
		{"roundSteps: no trigger due -> nothing", func(*testing.T) string {
			v := running
			v.due = false
			return renderSteps(roundSteps(v, s, 1000, nil, true))
		}, ""},
		{"roundSteps: no checkpoint store -> nothing triggered", func(*testing.T) string { return renderSteps(roundSteps(running, s, 1000, nil, false)) }, ""},
		{"roundSteps: a task not running -> no trigger this round", func(*testing.T) string {
			return renderSteps(roundSteps(jobView{status: jobRunning, notRunning: "map[0] attempt 1 is DEPLOYING", due: true}, s, 1000, nil, true))
		}, ""},
		{"roundSteps: max_concurrent pending -> no trigger", func(*testing.T) string {
			return renderSteps(roundSteps(pendingAt(running, pendingView{id: 3, triggerMs: 900, acked: 2}), s, 1000, nil, true))
		}, ""},
		{"roundSteps: the job left RUNNING -> its pending one aborted, nothing triggered", func(*testing.T) string {
			return renderSteps(roundSteps(pendingAt(jobView{status: jobCancelling, due: true}, pendingView{id: 3, triggerMs: 900}), s, 1000, nil, true))
		}, "abort 3: job is CANCELLING"},
		{"roundSteps: an abort frees its place -> abort, then trigger", func(*testing.T) string {
			return renderSteps(roundSteps(pendingAt(running, pendingView{id: 3, triggerMs: 900}), s, 1000, map[uint64]int64{3: 4}, true))
		}, "abort 3: task failure: a subtask was restarted after the trigger; trigger"},
		{"roundSteps: every subtask acknowledged -> complete, no trigger beside it", func(*testing.T) string {
			return renderSteps(roundSteps(pendingAt(running, pendingView{id: 3, triggerMs: 900, acked: 6}), s, 1000, map[uint64]int64{3: 6}, true))
		}, "complete 3"},
		{"roundSteps: several pending -> each decided, oldest first", func(*testing.T) string {
			two := graphSettings(s, 2)
			return renderSteps(roundSteps(pendingAt(running, pendingView{id: 3, triggerMs: 1}, pendingView{id: 4, triggerMs: 900, acked: 6}), two, 1002, nil, true))
		}, "abort 3: timeout after 1001ms (checkpoint_config.timeout_ms 1000); complete 4; trigger"},

		// What the TMs answered the injection.
		{"injectAbortReason: every TM took it -> kept", func(*testing.T) string {
			return injectAbortReason([]triggerOutcome{{addr: "tm1:1", tmID: "tm1"}, {addr: "tm2:1", tmID: "tm2"}})
		}, ""},
		{"injectAbortReason: a call failed, a TM lacks a source attempt -> abort naming both, sorted", func(*testing.T) string {
			return injectAbortReason([]triggerOutcome{{addr: "tm2:1", tmID: "tm2", err: errors.New("unavailable")}, {addr: "tm1:1", tmID: "tm1", notRunning: []string{"source-0-a0"}}})
		}, "TaskManager tm1 (tm1:1) does not run source attempts source-0-a0; trigger on TaskManager tm2 (tm2:1) failed: unavailable"},

		// What a refused command means.
		{"notPending: completed, not pending, unknown checkpoint or job -> ended elsewhere", func(*testing.T) string {
			var out []bool
			for _, err := range []error{fsm.ErrCheckpointCompleted, fsm.ErrCheckpointNotPending, fsm.ErrUnknownCheckpoint, fsm.ErrUnknownJob, fsm.ErrCheckpointIncomplete, nil} {
				out = append(out, notPending(fmt.Errorf("wrapped: %w", err)))
			}
			return fmt.Sprint(out)
		}, "[true true true true false false]"},
		{"completionOf: committed -> done", func(*testing.T) string { return fmt.Sprintf("%+v", completionOf(nil)) }, "{done:true abort: warn:false}"},
		{"completionOf: a stale acknowledgement -> abort", func(*testing.T) string { return fmt.Sprintf("%+v", completionOf(fsm.ErrStaleCheckpointAck)) }, "{done:false abort:task failure: checkpoint acknowledged by an attempt that is not current warn:false}"},
		{"completionOf: ended elsewhere -> nothing", func(*testing.T) string { return fmt.Sprintf("%+v", completionOf(fsm.ErrCheckpointCompleted)) }, "{done:false abort: warn:false}"},
		{"completionOf: not every ack yet -> nothing", func(*testing.T) string { return fmt.Sprintf("%+v", completionOf(fsm.ErrCheckpointIncomplete)) }, "{done:false abort: warn:false}"},
		{"completionOf: another refusal -> logged", func(*testing.T) string { return fmt.Sprintf("%+v", completionOf(errors.New("no quorum"))) }, "{done:false abort: warn:true}"},
		{"commitEachAlone: several calls refused -> each alone", func(*testing.T) string { return fmt.Sprint(commitEachAlone(fsm.ErrStaleCheckpointAck, 2)) }, "true"},
		{"commitEachAlone: one call -> its refusal stands", func(*testing.T) string { return fmt.Sprint(commitEachAlone(fsm.ErrStaleCheckpointAck, 1)) }, "false"},
		{"commitEachAlone: the checkpoint ended -> no retry", func(*testing.T) string { return fmt.Sprint(commitEachAlone(fsm.ErrCheckpointNotPending, 3)) }, "false"},
		{"commitEachAlone: committed -> nothing", func(*testing.T) string { return fmt.Sprint(commitEachAlone(nil, 3)) }, "false"},

		// A lost TaskManager; the failover of a new term.
		{"checkpointsOnTM: a current attempt on the TM -> every pending one", func(t *testing.T) string {
			return fmt.Sprint(checkpointsOnTM(withPending(t, 0, &pb.CheckpointRecord{Id: 3}, &pb.CheckpointRecord{Id: 4}), "tm2"))
		}, "[3 4]"},
		{"checkpointsOnTM: nothing on the TM -> none", func(t *testing.T) string {
			return fmt.Sprint(checkpointsOnTM(withPending(t, 0, &pb.CheckpointRecord{Id: 3}), "tm9"))
		}, "[]"},
		{"checkpointsOnTM: nothing pending -> none", func(t *testing.T) string { return fmt.Sprint(checkpointsOnTM(withPending(t, 0), "tm1")) }, "[]"},
		{"earlierEpochs: newest first, this term's own left alone", func(*testing.T) string {
			var ids []uint64
			for _, ck := range earlierEpochs([]*pb.CheckpointRecord{{Id: 3, Epoch: 1}, {Id: 4, Epoch: 2}, {Id: 5, Epoch: 3}}, 3) {
				ids = append(ids, ck.Id)
			}
			return fmt.Sprint(ids)
		}, "[4 3]"},
		{"resolution: every acknowledgement in the record or a report -> the reported ones committed, then complete", func(t *testing.T) string {
			rec := withPending(t, 0)
			rep := []ReportedCheckpointAck{{JobID: "job", AttemptID: "source-1-a0", CheckpointID: 3, Ack: ckAck("source", 1, 0)}}
			missing, abort := resolution(rec, &pb.CheckpointRecord{Id: 3, Acks: sixAcks[:5]}, rep)
			return fmt.Sprintf("%d missing, abort %q", len(missing), abort)
		}, `1 missing, abort ""`},
		{"resolution: a subtask without one -> abort", func(t *testing.T) string {
			_, abort := resolution(withPending(t, 0), &pb.CheckpointRecord{Id: 3, Acks: sixAcks[:5]}, nil)
			return abort
		}, "leader changed before every task acknowledged (5 of 6 subtasks acknowledged, not source[1])"},
		{"resolution: a job still RECONCILING resolves like a running one", func(t *testing.T) string {
			rec := withPending(t, 0)
			rec.Status = stReconcilingJob
			missing, abort := resolution(rec, &pb.CheckpointRecord{Id: 3, Acks: sixAcks}, nil)
			return fmt.Sprintf("%d missing, abort %q", len(missing), abort)
		}, `0 missing, abort ""`},
		{"resolution: the job left RUNNING -> abort", func(t *testing.T) string {
			rec := withPending(t, 0)
			rec.Status = jobCancelling
			_, abort := resolution(rec, &pb.CheckpointRecord{Id: 3, Acks: sixAcks}, nil)
			return abort
		}, "job is CANCELLING"},

		// What a completion announces, and to whom.
		{"latestToAnnounce: a RUNNING job's newest completed checkpoint", func(t *testing.T) string {
			rec := withPending(t, 0)
			rec.Checkpoints.Completed = []*pb.CheckpointRecord{{Id: 5}, {Id: 7}}
			id, ok := latestToAnnounce(rec)
			return fmt.Sprint(id, ok)
		}, "7 true"},
		{"latestToAnnounce: none completed -> nothing", func(t *testing.T) string { id, ok := latestToAnnounce(withPending(t, 0)); return fmt.Sprint(id, ok) }, "0 false"},
		{"latestToAnnounce: a job not RUNNING -> nothing", func(t *testing.T) string {
			rec := withPending(t, 0)
			rec.Status, rec.Checkpoints.Completed = jobFailing, []*pb.CheckpointRecord{{Id: 7}}
			id, ok := latestToAnnounce(rec)
			return fmt.Sprint(id, ok)
		}, "0 false"},
		{"announceTargets: TMs that did not list their executions or have a sink behind", func(*testing.T) string {
			commits := SinkCommits{Listed: map[string]bool{"tm1:1": true, "tm2:1": true, "tm3:1": true}, Lowest: map[string]map[string]uint64{"job": {"tm1:1": 7, "tm2:1": 6}}}
			return fmt.Sprint(announceTargets("job", 7, []string{"tm1:1", "tm2:1", "tm3:1", "tm4:1"}, commits))
		}, "[tm2:1 tm4:1]"},
		{"announceTargets: no reports -> every TM", func(*testing.T) string {
			return fmt.Sprint(announceTargets("job", 7, []string{"tm1:1", "tm2:1"}, SinkCommits{}))
		}, "[tm1:1 tm2:1]"},

		// Retention of the stored directories.
		{"leftoverCheckpoints: those the record no longer names; a trigger in flight kept", func(*testing.T) string {
			cp := &pb.JobCheckpoints{NextCheckpointId: 6, Pending: []*pb.CheckpointRecord{{Id: 5}}, Completed: []*pb.CheckpointRecord{{Id: 3}}}
			return fmt.Sprint(leftoverCheckpoints(cp, []uint64{1, 2, 3, 4, 5, 6}))
		}, "[1 2 4]"},

		// Which acknowledgements a TM's call commits.
		{"ackVerdicts: current attempts, not recorded yet -> committed", func(t *testing.T) string {
			return renderAcks(ackVerdicts(withPending(t, 0, &pb.CheckpointRecord{Id: 3}), ackReqOf("tm1", 3, ckAck("source", 0, 0), ckAck("map", 0, 0))))
		}, `fresh [source[0]#0 map[0]#0] refused [] ended "" error <nil>`},
		{"ackVerdicts: a retry of a recorded one -> skipped", func(t *testing.T) string {
			return renderAcks(ackVerdicts(withPending(t, 0, &pb.CheckpointRecord{Id: 3, Acks: sixAcks[:1]}), ackReqOf("tm1", 3, ckAck("map", 0, 0))))
		}, `fresh [] refused [] ended "" error <nil>`},
		{"ackVerdicts: an attempt no longer current -> refused", func(t *testing.T) string {
			return renderAcks(ackVerdicts(withPending(t, 1, &pb.CheckpointRecord{Id: 3}), ackReqOf("tm1", 3, ckAck("source", 0, 0))))
		}, `fresh [] refused ["source[0] attempt 0 is not current (attempt 1 is)"] ended "" error <nil>`},
		{"ackVerdicts: a subtask of another TM -> error", func(t *testing.T) string {
			return renderAcks(ackVerdicts(withPending(t, 0, &pb.CheckpointRecord{Id: 3}), ackReqOf("tm2", 3, ckAck("source", 0, 0))))
		}, `fresh [] refused [] ended "" error acknowledge checkpoint 3: source[0] attempt 0 is assigned to tm1, not tm2`},
		{"ackVerdicts: no such subtask -> error", func(t *testing.T) string {
			return renderAcks(ackVerdicts(withPending(t, 0, &pb.CheckpointRecord{Id: 3}), ackReqOf("tm1", 3, ckAck("nope", 0, 0))))
		}, `fresh [] refused [] ended "" error acknowledge checkpoint 3: job job has no subtask nope[0]`},
		{"ackVerdicts: a negative alignment -> error", func(t *testing.T) string {
			a := ckAck("source", 0, 0)
			a.AlignmentUs = -1
			return renderAcks(ackVerdicts(withPending(t, 0, &pb.CheckpointRecord{Id: 3}), ackReqOf("tm1", 3, a)))
		}, `fresh [] refused [] ended "" error acknowledge checkpoint 3: source[0]'s alignment_us -1 is negative`},
		{"ackVerdicts: not pending -> why it ended", func(t *testing.T) string {
			return renderAcks(ackVerdicts(withPending(t, 0), ackReqOf("tm1", 3, ckAck("source", 0, 0))))
		}, `fresh [] refused [] ended "checkpoint 3 of job job is no longer pending" error <nil>`},
		{"checkpointEnded: completed with these very acknowledgements -> a retry, accepted", func(*testing.T) string {
			return checkpointEnded(&pb.JobCheckpoints{Completed: []*pb.CheckpointRecord{{Id: 3, Acks: sixAcks}}}, ackReqOf("tm1", 3, ckAck("source", 0, 0)))
		}, ""},
		{"checkpointEnded: completed without this one", func(*testing.T) string {
			return checkpointEnded(&pb.JobCheckpoints{Completed: []*pb.CheckpointRecord{{Id: 3, Acks: sixAcks[1:]}}}, ackReqOf("tm1", 3, ckAck("map", 0, 0)))
		}, "checkpoint 3 of job job is completed without this acknowledgement of map[0]"},
		{"checkpointEnded: aborted", func(*testing.T) string {
			return checkpointEnded(&pb.JobCheckpoints{Aborted: []*pb.CheckpointRecord{{Id: 3, AbortReason: "timeout"}}}, ackReqOf("tm1", 3))
		}, "checkpoint 3 of job job was aborted: timeout"},
		{"checkpointEnded: never triggered", func(*testing.T) string {
			return checkpointEnded(&pb.JobCheckpoints{NextCheckpointId: 3}, ackReqOf("tm1", 3))
		}, "checkpoint 3 of job job was never triggered (the next id is 3)"},
		{"checkpointEnded: dropped from the record", func(*testing.T) string {
			return checkpointEnded(&pb.JobCheckpoints{NextCheckpointId: 9}, ackReqOf("tm1", 3))
		}, "checkpoint 3 of job job is no longer pending"},

		// A task that declines.
		{"declineVerdict: the current attempt -> abort with its reason", func(t *testing.T) string {
			cur, reason, err := declineVerdict(withPending(t, 0), &pb.DeclineCheckpointRequest{TmId: "tm2", VertexId: "map", SubtaskIndex: 1, Reason: "disk full"}, "decline")
			return fmt.Sprintf("%v %s %v", cur, reason, err)
		}, "true declined by map[1]: disk full <nil>"},
		{"declineVerdict: no reason given", func(t *testing.T) string {
			_, reason, _ := declineVerdict(withPending(t, 0), &pb.DeclineCheckpointRequest{TmId: "tm1", VertexId: "map"}, "decline")
			return reason
		}, "declined by map[0]: no reason given"},
		{"declineVerdict: an earlier attempt -> ignored", func(t *testing.T) string {
			cur, reason, err := declineVerdict(withPending(t, 1), &pb.DeclineCheckpointRequest{TmId: "tm1", VertexId: "map"}, "decline")
			return fmt.Sprintf("%v %s %v", cur, reason, err)
		}, "false  <nil>"},
		{"declineVerdict: a subtask of another TM -> error", func(t *testing.T) string {
			_, _, err := declineVerdict(withPending(t, 0), &pb.DeclineCheckpointRequest{TmId: "tm2", VertexId: "map"}, "decline")
			return fmt.Sprint(err)
		}, "decline: map[0] is assigned to tm1, not tm2"},
		{"declineVerdict: no such subtask -> error", func(t *testing.T) string {
			_, _, err := declineVerdict(withPending(t, 0), &pb.DeclineCheckpointRequest{TmId: "tm1", VertexId: "nope"}, "decline")
			return fmt.Sprint(err)
		}, "decline: no subtask nope[0]"},
	}
	seen := map[string]bool{}
	for _, tc := range cases {
		if seen[tc.name] {
			t.Fatalf("two cases named %q", tc.name)
		}
		seen[tc.name] = true
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.run(t); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
	// Every rule of checkpoint_rules.go has a case.
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "checkpoint_rules.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Recv != nil {
			continue
		}
		if !slices.ContainsFunc(slices.Collect(maps.Keys(seen)), func(name string) bool { return strings.HasPrefix(name, fn.Name.Name+":") }) {
			t.Errorf("no case for the rule %s", fn.Name.Name)
		}
	}
}

// graphSettings is s with max_concurrent n.
func graphSettings(s graph.CheckpointSettings, n int) graph.CheckpointSettings {
	s.MaxConcurrent = n
	return s
}

// TestCheckpointRulesArePure: checkpoint_rules.go reads no clock, imports nothing that does
// I/O, and declares no method: every rule is a function of what it is given.
func TestCheckpointRulesArePure(t *testing.T) {
	allowed := map[string]bool{
		"errors": true, "fmt": true, "slices": true, "sort": true, "time": true,
		"google.golang.org/protobuf/proto":               true, // proto.Equal
		"github.com/jmcluster/jmcluster/fsm":             true, // its errors and FindCheckpointAck
		"github.com/jmcluster/jmcluster/graph":           true,
		"github.com/jmcluster/jmcluster/internal/logsum": true,
		"github.com/jmcluster/jmcluster/transport/pb":    true,
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "checkpoint_rules.go", nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); !allowed[p] {
			t.Errorf("%s: checkpoint_rules.go imports %s", fset.Position(imp.Pos()), p)
		}
	}
	clock := map[string]bool{"Now": true, "Since": true, "Until": true, "Tick": true, "After": true, "AfterFunc": true, "NewTimer": true, "NewTicker": true, "Sleep": true}
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == "time" && clock[sel.Sel.Name] {
				t.Errorf("%s: checkpoint_rules.go uses time.%s", fset.Position(sel.Pos()), sel.Sel.Name)
			}
		}
		if _, ok := n.(*ast.GoStmt); ok {
			t.Errorf("%s: checkpoint_rules.go starts a goroutine", fset.Position(n.Pos()))
		}
		return true
	})
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv != nil {
			t.Errorf("%s: %s is a method", fset.Position(fn.Pos()), fn.Name.Name)
		}
	}
}
