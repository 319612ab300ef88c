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
}

// Cancel is an attempt a TM runs that the graph does not own; it is cancelled after the commit.
type Cancel struct {
	TMID, Addr, JobID, AttemptID string
	// Reason: "unknown", "stale", "duplicate" or "rejected".
	Reason string
}

// JobPlan is one job's reconciled executions and status.
type JobPlan struct {
	JobID      string
	Executions []*pb.ReconciledExecution
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
}

func indexJob(rec *pb.JobRecord) *jobIndex {
	n := 0
	for _, v := range rec.GetExecutionGraph().GetVertices() {
		n += len(v.Subtasks)
	}
	// Sized up front: growing them was a fifth of a merge of 100,000 executions.
	ji := &jobIndex{rec: rec, byAttempt: make(map[string]*pb.ExecutionVertex, n), byVertex: make(map[vsKey]*pb.ExecutionVertex, n), produces: map[string]int{}}
	for _, v := range rec.GetExecutionGraph().GetVertices() {
		for _, ev := range v.Subtasks {
			ji.byVertex[vsKey{ev.VertexId, ev.SubtaskIndex}] = ev
			if ev.Current != nil {
				ji.byAttempt[ev.Current.AttemptId] = ev
			}
		}
	}
	for _, res := range rec.GetExecutionGraph().GetResults() {
		ji.produces[res.ProducerVertexId]++
	}
	return ji
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
func Merge(jobs []*pb.JobRecord, reports map[string]*Report, now int64) *Plan {
	plan := &Plan{Acks: map[string][]string{}, Counts: &pb.ReconciliationCounts{}}
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
		for _, v := range ji.rec.GetExecutionGraph().GetVertices() {
			for _, ev := range v.Subtasks {
				e := ev.GetCurrent()
				if e == nil || e.State != pb.ExecutionState_EXECUTION_STATE_RECONCILING {
					continue
				}
				plan.Counts.Executions++
				next := proto.Clone(e).(*pb.Execution)
				m, ok := matched[e.AttemptId]
				counted := false // missing and rejected are counted on their own
				switch {
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
						m.tmID, len(m.rep.Produced), len(m.rep.Consumed), ji.produces[ev.VertexId], len(ev.Inputs))
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
				switch next.State {
				case pb.ExecutionState_EXECUTION_STATE_RUNNING, pb.ExecutionState_EXECUTION_STATE_INITIALIZING:
					plan.Counts.KeptRunning++
				case pb.ExecutionState_EXECUTION_STATE_FINISHED:
					plan.Counts.Finished++
				case pb.ExecutionState_EXECUTION_STATE_CANCELED:
					plan.Counts.Canceled++
				case pb.ExecutionState_EXECUTION_STATE_FAILED:
					if !counted {
						plan.Counts.Failed++
					}
				}
				graph.AddStateTimestamp(next, next.State, now)
				jp.Executions = append(jp.Executions, &pb.ReconciledExecution{VertexId: ev.VertexId, SubtaskIndex: ev.SubtaskIndex, Execution: next})
				if failedCause == "" && (next.State == pb.ExecutionState_EXECUTION_STATE_FAILED || next.State == pb.ExecutionState_EXECUTION_STATE_CANCELED) {
					failedCause = fmt.Sprintf("%s[%d]: %s", ev.VertexId, ev.SubtaskIndex, next.FailureCause)
				}
			}
		}
		jp.Status, jp.Cause = jobStatus(ji.rec, jp, failedCause, tmMissing)
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
	return len(rep.Consumed) == len(ev.Inputs)
}

// jobStatus decides the status a RECONCILING job moves to.
func jobStatus(rec *pb.JobRecord, jp *JobPlan, failedCause string, tmMissing bool) (pb.JobStatus, string) {
	before := pb.JobStatus_JOB_STATUS_RUNNING
	if h := rec.History; len(h) >= 2 {
		before = h[len(h)-2].Status
	}
	switch before {
	case pb.JobStatus_JOB_STATUS_CANCELLING, pb.JobStatus_JOB_STATUS_FAILING:
		return before, "resumed after reconciliation"
	}
	next := make(map[vsKey]pb.ExecutionState, len(jp.Executions))
	for _, re := range jp.Executions {
		next[vsKey{re.VertexId, re.SubtaskIndex}] = re.Execution.State
	}
	allFinished, anyFailed := true, false
	for _, v := range rec.GetExecutionGraph().GetVertices() {
		for _, ev := range v.Subtasks {
			s := ev.GetCurrent().GetState()
			if n, ok := next[vsKey{ev.VertexId, ev.SubtaskIndex}]; ok {
				s = n
			}
			if s != pb.ExecutionState_EXECUTION_STATE_FINISHED {
				allFinished = false
			}
			if s == pb.ExecutionState_EXECUTION_STATE_FAILED || s == pb.ExecutionState_EXECUTION_STATE_CANCELED {
				anyFailed = true
			}
		}
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
