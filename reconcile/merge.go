package reconcile

import (
	"fmt"
	"sort"

	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// Report is one TaskManager's whole report (its chunks joined).
type Report struct {
	TMID       string
	Addr       string
	Executions []*pb.ExecutionReport
	// AsExpected: the TM answered that it runs exactly the executions the leader's expectation
	// named (every RECONCILING execution assigned to it, RUNNING as committed:
	// transport.ReportDigest), so Executions is empty and each of them is kept RUNNING.
	// Expected is how many that was.
	AsExpected bool
	Expected   int64
}

// asExpected reports whether r is an as-expected answer (false for no report).
func (r *Report) asExpected() bool { return r != nil && r.AsExpected }

// Cancel is an attempt a TM runs that the graph does not own; it is cancelled after the commit.
type Cancel struct {
	TMID, Addr, JobID, AttemptID string
	// Reason: "unknown", "stale", "duplicate" or "rejected".
	Reason string
}

// JobPlan is one job's reconciled executions and status.
type JobPlan struct {
	JobID string
	// Executions are whole reconciled records (RECONCILE_JOB); Kept, in a compact plan, the
	// ranges of executions whose report changes nothing but their state (RECONCILE_KEPT).
	Executions []*pb.ReconciledExecution
	Kept       []*pb.KeptRange
	Status     pb.JobStatus
	Cause      string
}

// Plan is the outcome of merging the reports into the committed graphs.
type Plan struct {
	Jobs    []*JobPlan
	Cancels []Cancel
	// Acks: per TM address, terminal attempts whose state the plan commits.
	Acks   map[string][]string
	Counts *pb.ReconciliationCounts
	// MissingTMs: TMs holding committed attempts that did not report, sorted.
	MissingTMs []string
	// At is the merge's timestamp: every reconciled execution's new state timestamp.
	At int64
}

// Summary is a one-line description of the plan.
func (p *Plan) Summary() string { return Summary(len(p.Jobs), p.Counts) }

// Summary is the one-line description of a merge of jobs with counts c: what the "merged"
// step logs, and what the demo prints from a reconciliation record.
func Summary(jobs int, c *pb.ReconciliationCounts) string {
	return fmt.Sprintf("%d jobs, %d executions: %d running, %d finished, %d failed, %d canceled, %d missing, %d rejected; cancel %d unknown, %d stale, %d duplicate; %d reports, %d TMs missing",
		jobs, c.GetExecutions(), c.GetKeptRunning(), c.GetFinished(), c.GetFailed(), c.GetCanceled(), c.GetMissing(), c.GetRejected(),
		c.GetCancelledUnknown(), c.GetCancelledStale(), c.GetCancelledDuplicate(), c.GetReports(), c.GetTmsMissing())
}

type vsKey struct {
	vertex  string
	subtask int32
}

type jobIndex struct {
	rec       *pb.JobRecord
	byAttempt map[string]*pb.ExecutionVertex
	byVertex  map[vsKey]*pb.ExecutionVertex
	produces  map[string]int // vertex -> number of results it produces
	inputs    map[string]int // vertex -> number of input channels of each subtask
}

func indexJob(rec *pb.JobRecord) *jobIndex {
	ji := &jobIndex{rec: rec, produces: map[string]int{}, inputs: graph.InputCounts(rec.GetExecutionGraph())}
	for _, res := range rec.GetExecutionGraph().GetResults() {
		ji.produces[res.ProducerVertexId]++
	}
	return ji
}

// lookups builds the maps from attempts and subtasks to executions, on the first report that
// names the job: when every TM answered as expected no execution is looked up, and building
// them was most of a merge of 100,000 executions.
func (ji *jobIndex) lookups() {
	if ji.byAttempt != nil {
		return
	}
	rec := ji.rec
	n := 0
	for _, v := range rec.GetExecutionGraph().GetVertices() {
		n += len(v.Subtasks)
	}
	// Sized up front: growing them was a fifth of a merge of 100,000 executions.
	ji.byAttempt, ji.byVertex = make(map[string]*pb.ExecutionVertex, n), make(map[vsKey]*pb.ExecutionVertex, n)
	for _, v := range rec.GetExecutionGraph().GetVertices() {
		for _, ev := range v.Subtasks {
			ji.byVertex[vsKey{ev.VertexId, ev.SubtaskIndex}] = ev
			if ev.Current != nil {
				ji.byAttempt[ev.Current.AttemptId] = ev
			}
		}
	}
}

type match struct {
	rep  *pb.ExecutionReport
	tmID string
	addr string
}

// Merge applies the reconciliation rules to the RECONCILING jobs and the reports. It is a pure
// function of its inputs (iteration in sorted order), so the same reports give the same plan on
// any leader. now is the timestamp written into new state timestamps.
//
// Step one (information) matches every reported attempt with the committed graph:
//   - an attempt of an unknown job, or of a vertex the graph does not have or has never
//     deployed: unknown, cancel;
//   - an attempt number lower than the committed current one, or the committed attempt when
//     the graph already ended it (FAILED or CANCELED) but the TM still runs it: stale, cancel;
//   - the same ExecutionVertex reported twice (the committed attempt reported by a TM other than
//     the one it is assigned to, or another attempt with a number not below the committed one):
//     keep the committed one, cancel the other (duplicate);
//   - partition counts that do not match the graph: reject, the execution FAILS.
//
// Step two (states) moves each RECONCILING execution to its reported state; one nobody reported
// FAILS (missing). The job's status follows FLINK-5703: FINISHED when every task finished,
// FAILING when a task failed or was cancelled or a TM holding an attempt did not report, else
// RUNNING (a job that was CANCELLING or FAILING before goes back to that status).
//
// Merge writes every reconciled execution as a whole record (JobPlan.Executions), the form
// every replica applies; MergeCompact decides the same.
func Merge(jobs []*pb.JobRecord, reports map[string]*Report, now int64) *Plan {
	return merge(jobs, reports, now, false)
}

// MergeCompact is Merge, but an execution whose report changes nothing but its state (the same
// attempt on the same slot, started when the graph says, RUNNING, INITIALIZING or FINISHED) is
// not copied: it goes into a range of its vertex (JobPlan.Kept) for RECONCILE_KEPT. A
// reconciliation that keeps every task running then commits a range per vertex, not every
// execution. ExpandKept turns the ranges back into the records Merge writes. jobs are only
// read: MergeCompact may run on the live records under the state's read lock.
func MergeCompact(jobs []*pb.JobRecord, reports map[string]*Report, now int64) *Plan {
	return merge(jobs, reports, now, true)
}

func merge(jobs []*pb.JobRecord, reports map[string]*Report, now int64, compact bool) *Plan {
	plan := &Plan{Acks: map[string][]string{}, Counts: &pb.ReconciliationCounts{}, At: now}
	idx := map[string]*jobIndex{}
	for _, rec := range jobs {
		idx[rec.JobGraph.JobId] = indexJob(rec)
	}
	tmIDs := make([]string, 0, len(reports))
	for id := range reports {
		tmIDs = append(tmIDs, id)
	}
	sort.Strings(tmIDs)

	reported := 0
	for _, r := range reports {
		reported += len(r.Executions)
	}
	matched := make(map[string]match, reported)
	cancel := func(rep *pb.ExecutionReport, r *Report, reason string) {
		if graph.IsTerminalExecution(rep.State) {
			return // nothing runs; the retained state is dropped with the acknowledgement below
		}
		plan.Cancels = append(plan.Cancels, Cancel{TMID: r.TMID, Addr: r.Addr, JobID: rep.JobId, AttemptID: rep.AttemptId, Reason: reason})
		switch reason {
		case "stale":
			plan.Counts.CancelledStale++
		case "duplicate":
			plan.Counts.CancelledDuplicate++
		default:
			plan.Counts.CancelledUnknown++
		}
	}
	for _, tmID := range tmIDs {
		r := reports[tmID]
		for _, rep := range r.Executions {
			ji := idx[rep.JobId]
			if ji == nil {
				cancel(rep, r, "unknown")
				continue
			}
			ji.lookups()
			ev := ji.byAttempt[rep.AttemptId]
			if ev == nil {
				cur := ji.byVertex[vsKey{rep.VertexId, rep.SubtaskIndex}]
				switch {
				case cur == nil || cur.Current == nil:
					cancel(rep, r, "unknown")
				case rep.AttemptNumber < cur.Current.AttemptNumber:
					cancel(rep, r, "stale")
				default:
					// Another attempt of a vertex the graph owns: keep the committed one.
					cancel(rep, r, "duplicate")
				}
				continue
			}
			if ev.Current.GetSlot().GetTmId() != tmID || ev.VertexId != rep.VertexId || ev.SubtaskIndex != rep.SubtaskIndex {
				cancel(rep, r, "duplicate")
				continue
			}
			if st := ev.Current.GetState(); st == pb.ExecutionState_EXECUTION_STATE_FAILED || st == pb.ExecutionState_EXECUTION_STATE_CANCELED {
				// The graph already ended this attempt (its region restarts or has restarted),
				// but the task still runs and holds its slot: stale, cancel it. Step two visits
				// only RECONCILING executions, so it would never be cancelled there.
				cancel(rep, r, "stale")
				continue
			}
			if _, dup := matched[rep.AttemptId]; dup {
				continue
			}
			matched[rep.AttemptId] = match{rep: rep, tmID: tmID, addr: r.Addr}
		}
	}

	jobIDs := make([]string, 0, len(idx))
	for id := range idx {
		jobIDs = append(jobIDs, id)
	}
	sort.Strings(jobIDs)
	tmsMissing := map[string]bool{}
	for _, jobID := range jobIDs {
		ji := idx[jobID]
		jp := &JobPlan{JobID: jobID}
		var failedCause string
		tmMissing := false
		// The job's status needs every execution's state after the plan: allFinished and
		// anyFailed are gathered in the same walk.
		allFinished, anyFailed := true, false
		for _, v := range ji.rec.GetExecutionGraph().GetVertices() {
			var kept *pb.KeptRange // the vertex's open range
			for _, ev := range v.Subtasks {
				e := ev.GetCurrent()
				if e == nil || e.State != pb.ExecutionState_EXECUTION_STATE_RECONCILING {
					st := e.GetState()
					allFinished = allFinished && st == pb.ExecutionState_EXECUTION_STATE_FINISHED
					anyFailed = anyFailed || st == pb.ExecutionState_EXECUTION_STATE_FAILED || st == pb.ExecutionState_EXECUTION_STATE_CANCELED
					continue
				}
				plan.Counts.Executions++
				m, ok := matched[e.AttemptId]
				// An execution on a TM that answered as expected is as its committed record
				// says, RUNNING (the report it would have sent keeps it so).
				expected := !ok && reports[e.GetSlot().GetTmId()].asExpected()
				if compact && (ok || expected) {
					st, keep := pb.ExecutionState_EXECUTION_STATE_RUNNING, true
					if ok {
						st, keep = keptState(ji, ev, m.rep)
					}
					if keep {
						countState(plan.Counts, st)
						allFinished = allFinished && st == pb.ExecutionState_EXECUTION_STATE_FINISHED
						if st == pb.ExecutionState_EXECUTION_STATE_FINISHED {
							plan.Acks[m.addr] = append(plan.Acks[m.addr], e.AttemptId)
						}
						if kept == nil || kept.State != st || kept.FirstSubtask+kept.Count != ev.SubtaskIndex {
							kept = &pb.KeptRange{VertexId: ev.VertexId, FirstSubtask: ev.SubtaskIndex, State: st}
							jp.Kept = append(jp.Kept, kept)
						}
						kept.Count++
						continue
					}
				}
				next := proto.Clone(e).(*pb.Execution)
				counted := false // missing and rejected are counted on their own
				switch {
				case expected:
					next.State = pb.ExecutionState_EXECUTION_STATE_RUNNING
				case !ok:
					tm := e.GetSlot().GetTmId()
					if reports[tm] == nil {
						next.FailureCause = fmt.Sprintf("TaskManager %s did not report during reconciliation", tm)
						tmMissing = true
						tmsMissing[tm] = true
					} else {
						next.FailureCause = fmt.Sprintf("attempt not found on TaskManager %s during reconciliation", tm)
					}
					next.State = pb.ExecutionState_EXECUTION_STATE_FAILED
					plan.Counts.Missing++
					counted = true
				case !partitionsMatch(ji, ev, m.rep):
					next.State = pb.ExecutionState_EXECUTION_STATE_FAILED
					next.FailureCause = fmt.Sprintf("reconciliation rejected the report of %s: %d produced and %d consumed partitions, the graph has %d and %d",
						m.tmID, len(m.rep.Produced), len(m.rep.Consumed), ji.produces[ev.VertexId], ji.inputs[ev.VertexId])
					plan.Counts.Rejected++
					counted = true
					plan.Cancels = append(plan.Cancels, Cancel{TMID: m.tmID, Addr: m.addr, JobID: jobID, AttemptID: e.AttemptId, Reason: "rejected"})
				default:
					// Step one: information from the report.
					if m.rep.StartTimestamp != 0 {
						next.StartTimestamp = m.rep.StartTimestamp
					}
					if next.Slot != nil {
						next.Slot.Index = m.rep.SlotIndex
					}
					// Step two: the reported state.
					next.State = reportedState(m.rep.State)
					if next.State == pb.ExecutionState_EXECUTION_STATE_FAILED {
						next.FailureCause = m.rep.FailureCause
						if next.FailureCause == "" {
							next.FailureCause = "reported " + graph.ExecutionStateName(m.rep.State) + " during reconciliation"
						}
					}
					if graph.IsTerminalExecution(next.State) {
						plan.Acks[m.addr] = append(plan.Acks[m.addr], e.AttemptId)
					}
				}
				if !counted {
					countState(plan.Counts, next.State)
				}
				allFinished = allFinished && next.State == pb.ExecutionState_EXECUTION_STATE_FINISHED
				anyFailed = anyFailed || next.State == pb.ExecutionState_EXECUTION_STATE_FAILED || next.State == pb.ExecutionState_EXECUTION_STATE_CANCELED
				graph.AddStateTimestamp(next, next.State, now)
				jp.Executions = append(jp.Executions, &pb.ReconciledExecution{VertexId: ev.VertexId, SubtaskIndex: ev.SubtaskIndex, Execution: next})
				if failedCause == "" && (next.State == pb.ExecutionState_EXECUTION_STATE_FAILED || next.State == pb.ExecutionState_EXECUTION_STATE_CANCELED) {
					failedCause = fmt.Sprintf("%s[%d]: %s", ev.VertexId, ev.SubtaskIndex, next.FailureCause)
				}
			}
		}
		jp.Status, jp.Cause = jobStatus(ji.rec, failedCause, tmMissing, allFinished, anyFailed)
		plan.Jobs = append(plan.Jobs, jp)
	}
	plan.Counts.TmsMissing = int64(len(tmsMissing))
	for id := range tmsMissing {
		plan.MissingTMs = append(plan.MissingTMs, id)
	}
	sort.Strings(plan.MissingTMs)
	return plan
}

// reportedState maps a TM's task state to the state RECONCILING moves to.
func reportedState(s pb.ExecutionState) pb.ExecutionState {
	switch s {
	case pb.ExecutionState_EXECUTION_STATE_RUNNING, pb.ExecutionState_EXECUTION_STATE_FINISHED,
		pb.ExecutionState_EXECUTION_STATE_FAILED, pb.ExecutionState_EXECUTION_STATE_CANCELED,
		pb.ExecutionState_EXECUTION_STATE_INITIALIZING:
		return s
	case pb.ExecutionState_EXECUTION_STATE_DEPLOYING:
		return pb.ExecutionState_EXECUTION_STATE_INITIALIZING
	case pb.ExecutionState_EXECUTION_STATE_CANCELING:
		return pb.ExecutionState_EXECUTION_STATE_CANCELED
	}
	return pb.ExecutionState_EXECUTION_STATE_FAILED
}

// partitionsMatch: the report names one produced partition per result the vertex produces,
// each with the subtask's index, and one consumed partition per input channel.
func partitionsMatch(ji *jobIndex, ev *pb.ExecutionVertex, rep *pb.ExecutionReport) bool {
	if len(rep.Produced) != ji.produces[ev.VertexId] {
		return false
	}
	for _, p := range rep.Produced {
		if p.PartitionIndex != ev.SubtaskIndex {
			return false
		}
	}
	return len(rep.Consumed) == ji.inputs[ev.VertexId]
}

// jobStatus decides the status a RECONCILING job moves to, from the states its executions have
// after the plan: allFinished when every one is FINISHED, anyFailed when one is FAILED or
// CANCELED.
func jobStatus(rec *pb.JobRecord, failedCause string, tmMissing, allFinished, anyFailed bool) (pb.JobStatus, string) {
	before := pb.JobStatus_JOB_STATUS_RUNNING
	if h := rec.History; len(h) >= 2 {
		before = h[len(h)-2].Status
	}
	switch before {
	case pb.JobStatus_JOB_STATUS_CANCELLING, pb.JobStatus_JOB_STATUS_FAILING:
		return before, "resumed after reconciliation"
	}
	switch {
	case allFinished:
		return pb.JobStatus_JOB_STATUS_FINISHED, ""
	case tmMissing || anyFailed:
		if failedCause == "" {
			failedCause = "a task failed or was cancelled"
		}
		return pb.JobStatus_JOB_STATUS_FAILING, failedCause
	}
	return pb.JobStatus_JOB_STATUS_RUNNING, ""
}

// countState counts an execution the plan moves to st (missing and rejected ones are counted
// on their own, not here).
func countState(c *pb.ReconciliationCounts, st pb.ExecutionState) {
	switch st {
	case pb.ExecutionState_EXECUTION_STATE_RUNNING, pb.ExecutionState_EXECUTION_STATE_INITIALIZING:
		c.KeptRunning++
	case pb.ExecutionState_EXECUTION_STATE_FINISHED:
		c.Finished++
	case pb.ExecutionState_EXECUTION_STATE_CANCELED:
		c.Canceled++
	case pb.ExecutionState_EXECUTION_STATE_FAILED:
		c.Failed++
	}
}

// keptState says whether a matched report changes nothing of its execution but the state, and
// the state: the form RECONCILE_KEPT commits. The partitions must match (or the execution is
// rejected), the state must be one a report keeps without a failure cause, and the start and
// slot index the report gives (step one) must be what the graph has.
func keptState(ji *jobIndex, ev *pb.ExecutionVertex, rep *pb.ExecutionReport) (pb.ExecutionState, bool) {
	e := ev.Current
	st := reportedState(rep.State)
	switch {
	case st != pb.ExecutionState_EXECUTION_STATE_RUNNING && st != pb.ExecutionState_EXECUTION_STATE_INITIALIZING && st != pb.ExecutionState_EXECUTION_STATE_FINISHED,
		rep.StartTimestamp != 0 && rep.StartTimestamp != e.StartTimestamp,
		e.Slot != nil && e.Slot.Index != rep.SlotIndex,
		!partitionsMatch(ji, ev, rep):
		return 0, false
	}
	return st, true
}

// ExpandKept returns the whole records of a compact plan's kept ranges of job rec, as Merge
// would have written them (for tests and tools; the FSM applies the ranges directly).
func ExpandKept(rec *pb.JobRecord, jp *JobPlan, now int64) []*pb.ReconciledExecution {
	vertices := map[string]*pb.ExecutionJobVertex{}
	for _, v := range rec.GetExecutionGraph().GetVertices() {
		vertices[v.VertexId] = v
	}
	var out []*pb.ReconciledExecution
	for _, r := range jp.Kept {
		for _, ev := range vertices[r.VertexId].GetSubtasks()[r.FirstSubtask : r.FirstSubtask+r.Count] {
			next := proto.Clone(ev.Current).(*pb.Execution)
			next.State = r.State
			graph.AddStateTimestamp(next, r.State, now)
			out = append(out, &pb.ReconciledExecution{VertexId: ev.VertexId, SubtaskIndex: ev.SubtaskIndex, Execution: next})
		}
	}
	return out
}
