package jobmaster

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/internal/logsum"
	"github.com/jmcluster/jmcluster/transport/pb"
	"google.golang.org/protobuf/proto"
)

// The checkpoint coordinator decides, then acts (docs/checkpoints.md). This file is the
// decision: every rule the coordinator applies, as a pure function of plain data (a job's
// committed record or what a round reads of it, the settings, the leader's clock passed in, a
// command's error), returning what to do. None does I/O, reads a clock or keeps anything; the
// coordinator (checkpoints.go, checkpoint_failover.go, checkpointacks.go) reads the record
// under the FSM's read lock, applies these, and carries out what they return.
// TestCheckpointRules has a named case for every rule and every branch of it.

// Abort reasons the coordinator writes (the FSM writes "subsumed" and "retained").
const (
	reasonLeaderChanged = "leader changed before every task acknowledged"
)

// jobView is what one round needs of a job, read under the state's read lock.
type jobView struct {
	status     pb.JobStatus
	notRunning string              // the first subtask whose current attempt is not RUNNING
	failed     bool                // and it failed (or is cancelled), rather than not yet running or finished
	sources    map[string][]string // TM gRPC address -> source attempt ids there
	tmIDs      map[string]string   // TM gRPC address -> TM id (for abort reasons)
	addrs      []string            // every TM address running a current attempt
	attempts   int64               // the sum of the current attempt numbers
	tasks      int
	pending    []pendingView
	due        bool // a trigger is due: sources is filled in
}

// pendingView is a pending checkpoint as a round sees it.
type pendingView struct {
	id        uint64
	triggerMs int64
	// stale names an acknowledgement from an attempt that is no longer current ("" when none).
	stale string
	acked int
}

// viewOf reads a job's record for the coordinator; its source attempts only when a trigger is
// due. Its addrs are the TMs a completion or an abort of the job's checkpoints is announced to:
// those running a current attempt of the job.
func viewOf(rec *pb.JobRecord, due bool) jobView {
	v := jobView{status: rec.Status, sources: map[string][]string{}, tmIDs: map[string]string{}, due: due}
	sources := sourceVertices(rec.GetJobGraph())
	addrs := map[string]bool{}
	forEachExecution(rec, func(ev *pb.ExecutionVertex) {
		v.tasks++
		cur := ev.GetCurrent()
		if cur == nil {
			if v.notRunning == "" {
				v.notRunning = fmt.Sprintf("%s[%d] has no attempt", ev.VertexId, ev.SubtaskIndex)
			}
			return
		}
		v.attempts += int64(cur.AttemptNumber)
		if cur.State != stRunning && v.notRunning == "" {
			v.notRunning = fmt.Sprintf("%s[%d] attempt %d is %s", ev.VertexId, ev.SubtaskIndex, cur.AttemptNumber, graph.ExecutionStateName(cur.State))
			v.failed = cur.State == stFailed || cur.State == stCanceling || cur.State == stCanceled
		}
		if a := cur.TmGrpcAddress; a != "" && cur.State == stRunning {
			addrs[a] = true // notifications go to the TMs running tasks of the job
			if due && sources[ev.VertexId] && cur.State == stRunning {
				v.sources[a] = append(v.sources[a], cur.AttemptId)
				v.tmIDs[a] = cur.GetSlot().GetTmId()
			}
		}
	})
	for a := range addrs {
		v.addrs = append(v.addrs, a)
	}
	sort.Strings(v.addrs)
	for _, ck := range rec.GetCheckpoints().GetPending() {
		p := pendingView{id: ck.Id, triggerMs: ck.TriggerUnixMs, acked: len(ck.Acks)}
		for _, a := range ck.Acks {
			cur := graph.FindVertex(rec.ExecutionGraph, a.VertexId, a.SubtaskIndex).GetCurrent()
			if cur == nil || cur.AttemptNumber != a.AttemptNumber {
				p.stale = fmt.Sprintf("%s[%d] restarted (attempt %d acknowledged, attempt %s is current)", a.VertexId, a.SubtaskIndex, a.AttemptNumber, attemptName(cur))
				break
			}
		}
		v.pending = append(v.pending, p)
	}
	return v
}

// sourceVertices: the vertices whose operator is a source (no inputs): the barriers start there.
func sourceVertices(jg *pb.JobGraph) map[string]bool {
	out := map[string]bool{}
	for _, v := range jg.GetVertices() {
		if graph.OperatorRoleOf(v.Operator) == graph.RoleSource {
			out[v.Id] = true
		}
	}
	return out
}

func attemptName(cur *pb.Execution) string {
	if cur == nil {
		return "none"
	}
	return fmt.Sprint(cur.AttemptNumber)
}

// triggerDue: the job's next trigger is due an interval after this term's last trigger of it
// (last); a job the term has not seen yet (seen false) is not due, and its interval counts
// from now.
func triggerDue(last time.Time, seen bool, s graph.CheckpointSettings, now time.Time) bool {
	return seen && now.Sub(last) >= time.Duration(s.IntervalMs)*time.Millisecond
}

// pendingAbortReason says why a pending checkpoint must be aborted now ("" when it need not):
// the job's view, the checkpoint, the settings, the leader's clock, and (ours) the sum of the
// attempt numbers when this term triggered it.
func pendingAbortReason(v jobView, ck pendingView, s graph.CheckpointSettings, nowMs, triggeredAttempts int64, ours bool) string {
	if v.status != jobRunning {
		return "job is " + graph.JobStatusName(v.status)
	}
	if age := nowMs - ck.triggerMs; age > s.TimeoutMs {
		return fmt.Sprintf("timeout after %dms (checkpoint_config.timeout_ms %d)", age, s.TimeoutMs)
	}
	if v.notRunning != "" {
		if v.failed {
			return "task failure: " + v.notRunning
		}
		return "not every task is running: " + v.notRunning
	}
	if ck.stale != "" {
		return "task failure: " + ck.stale
	}
	if ours && triggeredAttempts != v.attempts {
		return "task failure: a subtask was restarted after the trigger"
	}
	return ""
}

// allAcknowledged: a pending checkpoint completes once every subtask of the job acknowledged it.
func allAcknowledged(acked, tasks int) bool { return acked >= tasks }

// ckStepKind says what a step of a round does.
type ckStepKind int

const (
	ckAbort    ckStepKind = iota // commit ABORT_CHECKPOINT for id, with reason, then delete and tell the TMs
	ckComplete                   // every subtask acknowledged id: complete it (in the background)
	ckTrigger                    // commit the job's next TRIGGER_CHECKPOINT, then inject it
)

// ckStep is one step of a round over a job, carried out in order.
type ckStep struct {
	kind   ckStepKind
	id     uint64 // ckAbort, ckComplete
	reason string // ckAbort
}

// roundSteps is a round's decision for one checkpointed job: abort every pending checkpoint
// pendingAbortReason condemns; complete every other one that every subtask acknowledged (a
// completion that failed to commit, say); then trigger the next one when the store is
// configured, the job RUNNING, a trigger due, every current attempt RUNNING ("not all
// required tasks are currently running" skips the round, as Flink does) and fewer than
// max_concurrent remain pending once the aborts are counted. triggered holds, for the
// checkpoints this term triggered, the sum of the job's attempt numbers then.
func roundSteps(v jobView, s graph.CheckpointSettings, nowMs int64, triggered map[uint64]int64, stored bool) []ckStep {
	var steps []ckStep
	pending := len(v.pending)
	for _, ck := range v.pending {
		sum, ours := triggered[ck.id]
		if reason := pendingAbortReason(v, ck, s, nowMs, sum, ours); reason != "" {
			steps = append(steps, ckStep{kind: ckAbort, id: ck.id, reason: reason})
			pending--
		} else if allAcknowledged(ck.acked, v.tasks) {
			steps = append(steps, ckStep{kind: ckComplete, id: ck.id})
		}
	}
	if stored && v.status == jobRunning && v.due && v.notRunning == "" && pending < s.MaxConcurrent {
		steps = append(steps, ckStep{kind: ckTrigger})
	}
	return steps
}

// triggerOutcome is how one TM answered the injection of a checkpoint: the call's error, or
// the source attempts it does not run.
type triggerOutcome struct {
	addr, tmID string
	err        error
	notRunning []string
}

// injectAbortReason: a checkpoint whose trigger failed on a TM, or that a TM does not run every
// source attempt of, is aborted with every such TM named (sorted); "" when every TM took it.
func injectAbortReason(outcomes []triggerOutcome) string {
	var reasons []string
	for _, o := range outcomes {
		switch {
		case o.err != nil:
			reasons = append(reasons, fmt.Sprintf("trigger on TaskManager %s (%s) failed: %v", o.tmID, o.addr, o.err))
		case len(o.notRunning) > 0:
			reasons = append(reasons, fmt.Sprintf("TaskManager %s (%s) does not run source attempts %s", o.tmID, o.addr, logsum.List(o.notRunning)))
		}
	}
	if len(reasons) == 0 {
		return ""
	}
	sort.Strings(reasons)
	return logsum.Joined(reasons, "; ")
}

// notPending: a command refused because the checkpoint is no longer pending (someone else
// ended it), which counts as done.
func notPending(err error) bool {
	return errors.Is(err, fsm.ErrCheckpointCompleted) || errors.Is(err, fsm.ErrCheckpointNotPending) || errors.Is(err, fsm.ErrUnknownCheckpoint) || errors.Is(err, fsm.ErrUnknownJob)
}

// completion is what the outcome of a COMPLETE_CHECKPOINT leads to.
type completion struct {
	done  bool   // committed: discard what it subsumed, tell the TMs
	abort string // an acknowledgement is stale: abort with this reason
	warn  bool   // refused for another reason than the checkpoint's end or a missing ack: log it
}

// completionOf decides on a COMPLETE_CHECKPOINT's error.
func completionOf(err error) completion {
	switch {
	case err == nil:
		return completion{done: true}
	case errors.Is(err, fsm.ErrStaleCheckpointAck):
		return completion{abort: "task failure: " + err.Error()}
	default:
		return completion{warn: !notPending(err) && !errors.Is(err, fsm.ErrCheckpointIncomplete)}
	}
}

// commitEachAlone: when the ACK_CHECKPOINT of several calls' acknowledgements is refused, and
// not because the checkpoint ended, each call's are committed alone, so one bad call does not
// refuse the others.
func commitEachAlone(err error, calls int) bool {
	return err != nil && calls > 1 && !notPending(err)
}

// checkpointsOnTM: the pending checkpoints to abort for a lost TM: every pending one of a job
// with a current attempt on it.
func checkpointsOnTM(rec *pb.JobRecord, tmID string) []uint64 {
	var ids []uint64
	for _, ck := range rec.GetCheckpoints().GetPending() {
		ids = append(ids, ck.Id)
	}
	if len(ids) == 0 {
		return nil
	}
	on := false
	forEachExecution(rec, func(ev *pb.ExecutionVertex) {
		if ev.GetCurrent().GetSlot().GetTmId() == tmID {
			on = true
		}
	})
	if !on {
		return nil
	}
	return ids
}

// leftoverCheckpoints: of the checkpoint directories stored for a job, those the record no
// longer names (aborted, subsumed or dropped by a leader that died before deleting them); an
// id at or past the next one is a trigger in flight and is kept.
func leftoverCheckpoints(cp *pb.JobCheckpoints, stored []uint64) []uint64 {
	keep := map[uint64]bool{}
	for _, ck := range append(slices.Clone(cp.GetPending()), cp.GetCompleted()...) {
		keep[ck.Id] = true
	}
	var out []uint64
	for _, id := range stored {
		if !keep[id] && id < cp.GetNextCheckpointId() {
			out = append(out, id)
		}
	}
	return out
}

// earlierEpochs: the pending checkpoints a new term resolves, newest first: those triggered in
// an earlier epoch than epoch.
func earlierEpochs(pending []*pb.CheckpointRecord, epoch uint64) []*pb.CheckpointRecord {
	var out []*pb.CheckpointRecord
	for i := len(pending) - 1; i >= 0; i-- {
		if pending[i].Epoch != epoch {
			out = append(out, pending[i])
		}
	}
	return out
}

// resolution decides a pending checkpoint of an earlier epoch (the failover rule): when every
// subtask has an acknowledgement, in the checkpoint's record or among the reported ones (of its
// current attempt, for this checkpoint), it returns those the record lacks (to be committed
// before the completion); otherwise the reason to abort it.
func resolution(rec *pb.JobRecord, ck *pb.CheckpointRecord, reported []ReportedCheckpointAck) (missing []*pb.TaskCheckpointAck, abort string) {
	if st := rec.GetStatus(); st != jobRunning && st != stReconcilingJob {
		return nil, "job is " + graph.JobStatusName(st)
	}
	byAttempt := map[string]*pb.TaskCheckpointAck{}
	for _, r := range reported {
		if r.CheckpointID == ck.GetId() && r.Ack != nil {
			byAttempt[r.AttemptID] = r.Ack
		}
	}
	tasks, lacking, first := 0, 0, ""
	forEachExecution(rec, func(ev *pb.ExecutionVertex) {
		tasks++
		if fsm.FindCheckpointAck(ck, ev.VertexId, ev.SubtaskIndex) != nil {
			return
		}
		cur := ev.GetCurrent()
		a := byAttempt[cur.GetAttemptId()]
		if cur != nil && a != nil && a.VertexId == ev.VertexId && a.SubtaskIndex == ev.SubtaskIndex && a.AttemptNumber == cur.AttemptNumber {
			missing = append(missing, a)
			return
		}
		if lacking++; first == "" {
			first = fmt.Sprintf("%s[%d]", ev.VertexId, ev.SubtaskIndex)
		}
	})
	if lacking > 0 {
		return nil, fmt.Sprintf("%s (%d of %d subtasks acknowledged, not %s)", reasonLeaderChanged, tasks-lacking, tasks, first)
	}
	return missing, ""
}

// latestToAnnounce: a new term announces a RUNNING job's latest completed checkpoint again
// (the previous leader may have died between the completion and its notifications); a job
// that is not RUNNING, or has none, gets nothing.
func latestToAnnounce(rec *pb.JobRecord) (uint64, bool) {
	completed := rec.GetCheckpoints().GetCompleted()
	if rec.GetStatus() != jobRunning || len(completed) == 0 {
		return 0, false
	}
	return completed[len(completed)-1].Id, true
}

// announceTargets is which of the TMs running a job's tasks (addrs) get its latest completed
// checkpoint again: every TM whose report did not list its executions (it did not report, or
// answered as expected), and those that listed a committing sink of the job behind latest. A
// TM whose listed sinks of the job all committed latest, or that listed none, is skipped: a
// sink deployed since then restores from the latest completed checkpoint and commits it then.
// Without any reports (commits.Listed nil) every TM gets it.
func announceTargets(jobID string, latest uint64, addrs []string, commits SinkCommits) []string {
	if commits.Listed == nil {
		return addrs
	}
	var out []string
	for _, a := range addrs {
		lowest, has := commits.Lowest[jobID][a]
		if !commits.Listed[a] || (has && lowest < latest) {
			out = append(out, a)
		}
	}
	return out
}

// ackVerdicts sorts a TM's acknowledgements of a checkpoint by the job's committed record: the
// ones to commit (current attempts, not recorded yet), the reasons of those refused (stale
// attempts), or why the checkpoint takes none (ended: no longer pending; a retry of
// acknowledgements its completed record holds is accepted). An acknowledgement with a negative
// alignment, of a subtask the job lacks or one assigned to another TM is an error.
func ackVerdicts(rec *pb.JobRecord, req *pb.AcknowledgeCheckpointRequest) (fresh []*pb.TaskCheckpointAck, refused []string, ended string, err error) {
	cp := rec.GetCheckpoints()
	var ck *pb.CheckpointRecord
	for _, p := range cp.GetPending() {
		if p.Id == req.CheckpointId {
			ck = p
		}
	}
	if ck == nil {
		return nil, nil, checkpointEnded(cp, req), nil
	}
	for _, a := range req.Acks {
		// Checked here, not in the FSM: a replica of an earlier build keeps alignment_us as
		// an unknown field and would apply what a newer one refused.
		if a.GetAlignmentUs() < 0 {
			return fresh, refused, "", errorf(ErrInvalidRequest, "acknowledge checkpoint %d: %s[%d]'s alignment_us %d is negative", req.CheckpointId, a.GetVertexId(), a.GetSubtaskIndex(), a.GetAlignmentUs())
		}
		ev := graph.FindVertex(rec.ExecutionGraph, a.GetVertexId(), a.GetSubtaskIndex())
		if ev == nil {
			return fresh, refused, "", errorf(ErrInvalidRequest, "acknowledge checkpoint %d: job %s has no subtask %s[%d]", req.CheckpointId, req.JobId, a.GetVertexId(), a.GetSubtaskIndex())
		}
		cur := ev.GetCurrent()
		if tm := cur.GetSlot().GetTmId(); tm != req.TmId {
			return fresh, refused, "", errorf(ErrNotAssigned, "acknowledge checkpoint %d: %s[%d] attempt %s is assigned to %s, not %s", req.CheckpointId, a.VertexId, a.SubtaskIndex, attemptName(cur), tm, req.TmId)
		}
		if cur.AttemptNumber != a.AttemptNumber {
			refused = append(refused, fmt.Sprintf("%s[%d] attempt %d is not current (attempt %d is)", a.VertexId, a.SubtaskIndex, a.AttemptNumber, cur.AttemptNumber))
			continue
		}
		if old := fsm.FindCheckpointAck(ck, a.VertexId, a.SubtaskIndex); old != nil && proto.Equal(old, a) {
			continue // a retry
		}
		fresh = append(fresh, a)
	}
	return fresh, refused, "", nil
}

// checkpointEnded says why a checkpoint takes no acknowledgement, or "" when req only repeats
// acknowledgements its completed record holds.
func checkpointEnded(cp *pb.JobCheckpoints, req *pb.AcknowledgeCheckpointRequest) string {
	for _, c := range cp.GetCompleted() {
		if c.Id != req.CheckpointId {
			continue
		}
		for _, a := range req.Acks {
			if old := fsm.FindCheckpointAck(c, a.GetVertexId(), a.GetSubtaskIndex()); old == nil || !proto.Equal(old, a) {
				return fmt.Sprintf("checkpoint %d of job %s is completed without this acknowledgement of %s[%d]", req.CheckpointId, req.JobId, a.GetVertexId(), a.GetSubtaskIndex())
			}
		}
		return ""
	}
	for _, c := range cp.GetAborted() {
		if c.Id == req.CheckpointId {
			return fmt.Sprintf("checkpoint %d of job %s was aborted: %s", req.CheckpointId, req.JobId, c.AbortReason)
		}
	}
	next := cp.GetNextCheckpointId()
	if req.CheckpointId >= max(next, 1) {
		return fmt.Sprintf("checkpoint %d of job %s was never triggered (the next id is %d)", req.CheckpointId, req.JobId, max(next, 1))
	}
	return fmt.Sprintf("checkpoint %d of job %s is no longer pending", req.CheckpointId, req.JobId)
}

// pendingAcknowledged: the checkpoint is pending and every subtask of the job acknowledged it
// (a retry of acknowledgements the record holds may find it so).
func pendingAcknowledged(rec *pb.JobRecord, id uint64) bool {
	for _, ck := range rec.GetCheckpoints().GetPending() {
		if ck.Id == id {
			n := 0
			forEachExecution(rec, func(*pb.ExecutionVertex) { n++ })
			return allAcknowledged(len(ck.Acks), n)
		}
	}
	return false
}

// declineVerdict: a decline ends the checkpoint only when it comes from the current attempt of
// the subtask (current); one of a subtask the job lacks or assigned to another TM is an error.
// reason is the abort reason it writes.
func declineVerdict(rec *pb.JobRecord, req *pb.DeclineCheckpointRequest, what string) (current bool, reason string, err error) {
	ev := graph.FindVertex(rec.ExecutionGraph, req.VertexId, req.SubtaskIndex)
	if ev == nil {
		return false, "", errorf(ErrInvalidRequest, "%s: no subtask %s[%d]", what, req.VertexId, req.SubtaskIndex)
	}
	cur := ev.GetCurrent()
	if tm := cur.GetSlot().GetTmId(); tm != req.TmId {
		return false, "", errorf(ErrNotAssigned, "%s: %s[%d] is assigned to %s, not %s", what, req.VertexId, req.SubtaskIndex, tm, req.TmId)
	}
	if cur.AttemptNumber != req.AttemptNumber {
		return false, "", nil // a stale attempt's word does not end the checkpoint
	}
	why := req.Reason
	if why == "" {
		why = "no reason given"
	}
	return true, fmt.Sprintf("declined by %s[%d]: %s", req.VertexId, req.SubtaskIndex, why), nil
}
