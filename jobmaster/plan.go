package jobmaster

import (
	"fmt"
	"strings"
	"time"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/internal/logsum"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// The scheduler decides, then acts. nextSteps is the decision: a pure function of one job's
// committed record and a view of the term's volatile state (the time, the job's failover
// regions, the restart delays it has armed), returning the actions to carry out in order. It
// does no I/O, reads no clock and keeps nothing of the record: every action holds copies, so
// the scheduler runs it on the FSM's live record under the read lock and acts after the lock
// is released (sched.go). The actions are carried out by alloc.go (placement),
// deploy.go (write-ahead deployment) and cancel.go (write-ahead cancellation).

// actionKind says what an action does.
type actionKind int

const (
	// actStatus commits the job status to (expecting from), with cause; kick drives the job
	// again once it is committed.
	actStatus actionKind = iota
	// actCancel commits updates (CANCELING, or CANCELED for an execution that never started),
	// then sends CancelTask to sends. A failed commit sends nothing.
	actCancel
	// actArmRestart remembers that region may restart from notBefore (the restart delay).
	actArmRestart
	// actDeploy creates new attempts for tasks on free slots (placed by alloc.go) and deploys
	// them; restart counts one restart for all of its regions and ends their delays. It is
	// always the last action: what it changes is decided on the next pass, from the state it
	// committed.
	actDeploy
	// actResume finishes a deployment of this term whose DEPLOYING commit failed: it commits
	// DEPLOYING for attempts (SCHEDULED, committed) and submits them. It is the only action.
	actResume
	// actHold: region cannot restart yet, because a member's failed attempt was on a silent TM
	// the isolation rule does not yet let the leader redeploy (what says why). Logged once.
	actHold
)

// action is one step of the plan. Which fields are set depends on kind.
type action struct {
	kind actionKind

	from, to pb.JobStatus // actStatus
	cause    string       // actStatus
	kick     bool         // actStatus

	updates []*pb.ExecutionStateUpdate // actCancel
	sends   []cancelTarget             // actCancel

	region    int       // actArmRestart
	notBefore time.Time // actArmRestart

	regions []int        // actDeploy: the regions restarted (none: regions deployed for the first time)
	restart bool         // actDeploy
	what    string       // actDeploy: "region N", "regions N M ..." or "new regions" (for the log)
	tasks   []deployTask // actDeploy

	attempts []*pb.AttemptSpec // actResume

	heldTM, heldWhy string // actHold: the TM the region waits for, and why it may not be redeployed yet
}

// cancelTarget is a CancelTask to send: an attempt of the graph and the TM that holds it.
type cancelTarget struct{ attemptID, addr string }

// deployTask is one new attempt to create: the subtask, its attempt number and its failover
// region (placement keeps a region's tasks together, alloc.go).
type deployTask struct {
	vertexID string
	subtask  int32
	number   int32
	region   int
}

// view is what the plan reads besides the committed record: the time (for timestamps and the
// restart delay), the job's failover regions (graph.FailoverRegions of its JobGraph, which
// never changes, so the term computes them once) and the restart delays this term armed, by
// region id.
type view struct {
	now       time.Time
	regions   []graph.Region
	restartAt map[int]time.Time
	// held: silent TMs whose attempts may not be redeployed yet (isolation.go), and why.
	held map[string]string
	// drained: the TMs an operator drained (drain.go), from the committed state.
	drained map[string]int64
}

// nextSteps decides what to do next for one job, from its committed record alone (and the
// view). It is level-triggered: the same record and view always give the same actions, so a
// new leader simply runs it for every job.
func nextSteps(rec *pb.JobRecord, v view) []action {
	switch rec.Status {
	case jobCreated:
		return []action{setStatus(rec, jobRunning, "", true)}
	case jobRunning:
		return runningSteps(rec, v)
	case jobFailing:
		// A failure the restart strategy still covers restarts the affected regions
		// (FAILING -> RESTARTING -> RUNNING); otherwise every task is cancelled and the job FAILS.
		if !restartsExhausted(rec) && !strings.HasPrefix(rec.FailureCause, SlotTimeoutCause) && !strings.HasPrefix(rec.FailureCause, RestoreRefusedCause) {
			return []action{setStatus(rec, jobRestarting, rec.FailureCause, true)}
		}
		if steps, live := cancelAll(rec, v.now); live {
			return steps
		}
		return []action{setStatus(rec, jobFailed, rec.FailureCause, false)}
	case jobRestarting:
		return []action{setStatus(rec, jobRunning, "restarting failed regions", true)}
	case jobCancelling:
		if steps, live := cancelAll(rec, v.now); live {
			return steps
		}
		return []action{setStatus(rec, jobCanceled, "cancelled", false)}
	}
	return nil
}

func setStatus(rec *pb.JobRecord, to pb.JobStatus, cause string, kick bool) action {
	return action{kind: actStatus, from: rec.Status, to: to, cause: cause, kick: kick}
}

// runningSteps: resume SCHEDULED attempts first; finish the job when every task
// finished; otherwise, per failover region, cancel the survivors of a region with a FAILED or
// CANCELED member, restart a fully stopped region under the restart strategy, and deploy
// regions never deployed whose BLOCKING inputs are consumable. Regions deployed for the first
// time go out together (a streaming job is deployed eagerly in one commit). The stopped
// regions ready to restart in one pass (their delays passed) go out together too, and count
// one restart: the regions a lost TaskManager held fail in one commit and are armed in one
// pass, so one TM loss is one restart of the strategy, however many regions it held (Flink
// counts concurrent failures that one restart handles once, FLIP-364). Regions that fail at
// different moments restart, and count, apart.
func runningSteps(rec *pb.JobRecord, v view) []action {
	if a, ok := resumeScheduled(rec); ok {
		return []action{a}
	}
	allFinished := true
	forEachExecution(rec, func(ev *pb.ExecutionVertex) {
		if ev.GetCurrent().GetState() != stFinished {
			allFinished = false
		}
	})
	if allFinished {
		return []action{setStatus(rec, jobFinished, "", false)}
	}
	eg := rec.ExecutionGraph
	var out []action
	var fresh, again []deployTask
	var restarted []int
	countRestart := false
	// Reused from region to region: nothing below keeps them (the actions copy what they need).
	var active, failed, finished, undeployed []*pb.ExecutionVertex
	// The job vertices by id, once per pass: looking each member's up by a scan of the
	// vertices was a fifth of the leader's CPU while a job of 100 vertices x 1,000 deployed.
	byID := make(map[string]*pb.ExecutionJobVertex, len(eg.GetVertices()))
	for _, ejv := range eg.GetVertices() {
		byID[ejv.VertexId] = ejv
	}
	for _, r := range v.regions {
		active, failed, finished, undeployed = active[:0], failed[:0], finished[:0], undeployed[:0]
		for _, m := range r.Members {
			ev := subtaskOf(byID[m.VertexID], m.Subtask)
			switch s := ev.GetCurrent().GetState(); {
			case ev.GetCurrent() == nil:
				undeployed = append(undeployed, ev)
			case s == stFinished:
				finished = append(finished, ev)
			case s == stFailed || s == stCanceled:
				failed = append(failed, ev)
			default:
				active = append(active, ev)
			}
		}
		if tm := onDrained(active, v.drained); tm != "" && len(failed) == 0 {
			// A region with a task on a drained TM moves as a whole: cancelled (not failed, so
			// no restart is counted), then deployed on the other TMs.
			if c, ok := cancelExecutions(rec, active, "TaskManager "+tm+" is drained: its region moves", v.now); ok {
				out = append(out, c)
			}
			continue
		}
		if len(failed) > 0 && len(active) > 0 {
			// A pipelined region restarts as a whole: stop what still runs first.
			if c, ok := cancelExecutions(rec, active, "region restart: "+firstCause(failed), v.now); ok {
				out = append(out, c)
			}
			continue
		}
		if len(active) > 0 || (len(failed) == 0 && len(undeployed) == 0) {
			continue
		}
		if why, tm := heldBy(failed, v.held); tm != "" {
			// The failed attempt may still run on a TM cut off from this leader: redeploying it
			// now could run two attempts of one subtask at once.
			out = append(out, action{kind: actHold, region: r.ID, heldTM: tm, heldWhy: why, what: fmt.Sprintf("region %d waits for TaskManager %s: %s", r.ID, tm, why)})
			continue
		}
		if !inputsReady(rec, r) {
			continue
		}
		if len(failed) == 0 {
			fresh = append(fresh, deployTasks(undeployed, r.ID)...)
			continue
		}
		restart := false
		for _, ev := range failed {
			if ev.GetCurrent().GetState() == stFailed {
				restart = true
			}
		}
		if restart {
			if restartsExhausted(rec) {
				return append(out, setStatus(rec, jobFailing, "restart strategy exhausted after "+fmt.Sprint(rec.Restarts)+" restarts: "+firstCause(failed), false))
			}
			// The fixed delay runs from when this term first saw the region ready to restart.
			at, armed := v.restartAt[r.ID]
			if !armed {
				at = v.now.Add(time.Duration(rec.JobGraph.GetRestartStrategy().GetDelayMs()) * time.Millisecond)
			}
			if v.now.Before(at) {
				if !armed {
					out = append(out, action{kind: actArmRestart, region: r.ID, notBefore: at})
				}
				continue
			}
		}
		if cause := restoreRefusal(rec, r, damagedCheckpoints(rec)); cause != "" {
			return append(out, setStatus(rec, jobFailing, cause, false)) // checkpoint_fallback.go
		}
		// Every member is undeployed, stopped or finished here: the region goes out whole, in
		// graph order (placement pairs the k-th subtask of each vertex in one slot).
		for _, m := range r.Members {
			again = append(again, deployTasks([]*pb.ExecutionVertex{graph.FindVertex(eg, m.VertexID, m.Subtask)}, r.ID)...)
		}
		restarted = append(restarted, r.ID)
		countRestart = countRestart || restart
	}
	if len(restarted) > 0 {
		// Regions never deployed wait for the next pass.
		return append(out, action{kind: actDeploy, regions: restarted, restart: countRestart, what: regionsName(restarted), tasks: again})
	}
	if len(fresh) > 0 {
		out = append(out, action{kind: actDeploy, what: "new regions", tasks: fresh})
	}
	return out
}

// onDrained returns the first drained TM that holds one of the executions, or "".
func onDrained(evs []*pb.ExecutionVertex, drained map[string]int64) string {
	if len(drained) == 0 {
		return ""
	}
	for _, ev := range evs {
		if tm := ev.GetCurrent().GetSlot().GetTmId(); tm != "" {
			if _, ok := drained[tm]; ok {
				return tm
			}
		}
	}
	return ""
}

// heldBy returns the first held TM among the TMs of the failed members' attempts, and why.
func heldBy(failed []*pb.ExecutionVertex, held map[string]string) (why, tm string) {
	for _, ev := range failed {
		if id := ev.GetCurrent().GetSlot().GetTmId(); id != "" {
			if w, ok := held[id]; ok {
				return w, id
			}
		}
	}
	return "", ""
}

// regionsName names restarted regions for the log and the plan's test: "region 3", "regions 0 4".
func regionsName(ids []int) string {
	if len(ids) == 1 {
		return fmt.Sprintf("region %d", ids[0])
	}
	return "regions " + logsum.List(ids)
}

// deployTasks lists new attempts for the given ExecutionVertices of one region: attempt
// number 0 for one never deployed, the current number + 1 otherwise.
func deployTasks(evs []*pb.ExecutionVertex, region int) []deployTask {
	out := make([]deployTask, 0, len(evs))
	for _, ev := range evs {
		number := int32(0)
		if ev.Current != nil {
			number = ev.Current.AttemptNumber + 1
		}
		out = append(out, deployTask{vertexID: ev.VertexId, subtask: ev.SubtaskIndex, number: number, region: region})
	}
	return out
}

// resumeScheduled finds the attempts whose creation is committed but whose DEPLOYING commit
// failed or never came (SCHEDULED: by the write-ahead rule nothing was submitted for them):
// this term's, and those of a leader that died between the two commits, which reconciliation
// leaves SCHEDULED. They are deployed as they are: same attempts, same slots, no restart.
func resumeScheduled(rec *pb.JobRecord) (action, bool) {
	var attempts []*pb.AttemptSpec
	forEachExecution(rec, func(ev *pb.ExecutionVertex) {
		e := ev.GetCurrent()
		if e.GetState() != stScheduled {
			return
		}
		a := &pb.AttemptSpec{
			VertexId: ev.VertexId, SubtaskIndex: ev.SubtaskIndex, AttemptId: e.AttemptId, AttemptNumber: e.AttemptNumber,
			TmGrpcAddress: e.TmGrpcAddress, TmDataAddress: e.TmDataAddress,
		}
		if e.Slot != nil {
			a.Slot = &pb.SlotID{TmId: e.Slot.TmId, Index: e.Slot.Index}
		}
		attempts = append(attempts, a)
	})
	if len(attempts) == 0 {
		return action{}, false
	}
	return action{kind: actResume, attempts: attempts}, true
}

// cancelAll cancels every non-terminal execution of the job; live is false when all of them
// are terminal already. Live executions with nothing to do (RECONCILING) give no step.
func cancelAll(rec *pb.JobRecord, now time.Time) (steps []action, live bool) {
	var evs []*pb.ExecutionVertex
	forEachExecution(rec, func(ev *pb.ExecutionVertex) {
		if e := ev.GetCurrent(); e != nil && !isTerminal(e.State) {
			evs = append(evs, ev)
		}
	})
	if len(evs) == 0 {
		return nil, false
	}
	if a, ok := cancelExecutions(rec, evs, "job "+graph.JobStatusName(rec.Status), now); ok {
		steps = append(steps, a)
	}
	return steps, true
}

// cancelExecutions moves executions towards CANCELED under the write-ahead rule: one that
// never started is CANCELED at once, a live one gets CANCELING and a CancelTask, one already
// CANCELING gets its CancelTask (again: the term sends it once, and again after a failure),
// and a RECONCILING one is left to reconciliation. ok is false when there is nothing to do.
func cancelExecutions(rec *pb.JobRecord, evs []*pb.ExecutionVertex, cause string, now time.Time) (action, bool) {
	jobID := rec.JobGraph.JobId
	ts := now.UnixMilli()
	a := action{kind: actCancel}
	for _, ev := range evs {
		e := ev.GetCurrent()
		switch e.State {
		case stCreated:
			a.updates = append(a.updates, &pb.ExecutionStateUpdate{JobId: jobID, AttemptId: e.AttemptId, State: stCanceled, Timestamp: ts, FailureCause: cause})
		case stReconciling:
			// Reconciliation owns these; nothing to do until it commits.
		case stCanceling:
			a.sends = append(a.sends, cancelTarget{e.AttemptId, e.TmGrpcAddress})
		default:
			a.updates = append(a.updates, &pb.ExecutionStateUpdate{JobId: jobID, AttemptId: e.AttemptId, State: stCanceling, Timestamp: ts, FailureCause: cause})
			a.sends = append(a.sends, cancelTarget{e.AttemptId, e.TmGrpcAddress})
		}
	}
	return a, len(a.updates) > 0 || len(a.sends) > 0
}

func firstCause(evs []*pb.ExecutionVertex) string {
	for _, ev := range evs {
		if c := ev.GetCurrent().GetFailureCause(); c != "" {
			return c
		}
	}
	return "task cancelled"
}

// restartsExhausted: the restart strategy allows no further restart.
func restartsExhausted(rec *pb.JobRecord) bool {
	rs := rec.JobGraph.GetRestartStrategy()
	if rs.GetKind() == pb.RestartKind_RESTART_KIND_NONE {
		return true
	}
	attempts := rs.GetAttempts()
	if attempts == 0 {
		attempts = DefaultRestartAttempts
	}
	return rec.Restarts >= attempts
}

// inputsReady: every BLOCKING input from outside the region has all partitions consumable.
func inputsReady(rec *pb.JobRecord, r graph.Region) bool {
	inRegion := map[string]bool{}
	for _, m := range r.Members {
		inRegion[m.VertexID] = true
	}
	for _, res := range rec.ExecutionGraph.GetResults() {
		if !inRegion[res.ConsumerVertexId] || inRegion[res.ProducerVertexId] {
			continue
		}
		if res.ResultType != pb.ResultType_RESULT_TYPE_BLOCKING {
			continue
		}
		for _, p := range res.Partitions {
			if !p.Consumable {
				return false
			}
		}
	}
	return true
}

// String renders an action in one line (the plan's table test and the debug log).
func (a action) String() string {
	switch a.kind {
	case actStatus:
		s := "status " + graph.JobStatusName(a.from) + "->" + graph.JobStatusName(a.to)
		if a.cause != "" {
			s += " (" + a.cause + ")"
		}
		if a.kick {
			s += " kick"
		}
		return s
	case actCancel:
		var parts []string
		for _, u := range a.updates {
			parts = append(parts, u.AttemptId+"="+graph.ExecutionStateName(u.State))
		}
		for _, s := range a.sends {
			parts = append(parts, "send "+s.attemptID+"@"+s.addr)
		}
		s := "cancel " + strings.Join(parts, " ")
		if len(a.updates) > 0 {
			s += " (" + a.updates[0].FailureCause + ")"
		}
		return s
	case actArmRestart:
		return fmt.Sprintf("arm region %d until %d", a.region, a.notBefore.UnixMilli())
	case actDeploy:
		parts := make([]string, 0, len(a.tasks))
		for _, task := range a.tasks {
			parts = append(parts, fmt.Sprintf("%s[%d]#%d", task.vertexID, task.subtask, task.number))
		}
		s := "deploy " + a.what
		if a.restart {
			s += " restart"
		}
		return s + ": " + strings.Join(parts, " ")
	case actHold:
		return "hold: " + a.what
	case actResume:
		parts := make([]string, 0, len(a.attempts))
		for _, at := range a.attempts {
			parts = append(parts, at.AttemptId)
		}
		return "resume " + strings.Join(parts, " ")
	}
	return fmt.Sprintf("action(%d)", a.kind)
}

// subtaskOf is graph.FindVertex once the job vertex is found (nil stays nil).
func subtaskOf(ejv *pb.ExecutionJobVertex, subtask int32) *pb.ExecutionVertex {
	if ejv == nil || subtask < 0 || int(subtask) >= len(ejv.Subtasks) {
		return nil
	}
	if ev := ejv.Subtasks[subtask]; ev.GetSubtaskIndex() == subtask {
		return ev
	}
	for _, ev := range ejv.Subtasks {
		if ev.SubtaskIndex == subtask {
			return ev
		}
	}
	return nil
}
