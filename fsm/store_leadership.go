package fsm

import (
	"fmt"
	"slices"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/transport/pb"
)

func (s *state) checkEpoch(epoch uint64) error {
	if epoch == 0 || epoch != s.epoch.Epoch {
		return wrapf(ErrStaleEpoch, "epoch %d, committed %d", epoch, s.epoch.Epoch)
	}
	return nil
}

// establishLeadership commits the next leader epoch.
func (s *state) establishLeadership(_ uint64, c *pb.EstablishLeadershipCommand) error {
	if c.Epoch != s.epoch.Epoch+1 {
		return wrapf(ErrStaleEpoch, "epoch %d, committed %d", c.Epoch, s.epoch.Epoch)
	}
	s.epoch = &pb.LeaderEpoch{
		Epoch:             c.Epoch,
		LeaderId:          c.LeaderId,
		LeaderGrpcAddress: c.LeaderGrpcAddress,
		Timestamp:         c.Timestamp,
	}
	return nil
}

func (s *state) reconciliation(epoch uint64) *pb.ReconciliationRecord {
	for _, r := range s.recons {
		if r.Epoch == epoch {
			return r
		}
	}
	return nil
}

// beginReconciliation moves every job that can enter RECONCILING, and every active execution
// of those jobs, to RECONCILING, and opens the reconciliation record of the epoch. Repeating
// it for the same epoch is harmless. SCHEDULED executions stay SCHEDULED (the graph's table has
// no SCHEDULED -> RECONCILING): the write-ahead rule proves they were never submitted, and the
// new leader deploys them as they are.
func (s *state) beginReconciliation(index uint64, c *pb.BeginReconciliationCommand) error {
	if err := s.checkEpoch(c.Epoch); err != nil {
		return err
	}
	existing := s.reconciliation(c.Epoch)
	if existing != nil && existing.Outcome != outcomeInProgress {
		return wrapf(ErrReconciliationEnded, "epoch %d (%s)", c.Epoch, existing.Outcome)
	}
	reconciling := pb.JobStatus_JOB_STATUS_RECONCILING
	var jobs []string
	for _, rec := range s.sortedJobs() {
		switch {
		case rec.Status == reconciling:
		case graph.CanTransitionJob(rec.Status, reconciling):
			s.setJobStatus(rec, reconciling, c.Timestamp, "")
		default:
			continue
		}
		jobs = append(jobs, jobID(rec))
		for _, ejv := range rec.ExecutionGraph.GetVertices() {
			for _, ev := range ejv.Subtasks {
				cur := ev.Current
				if cur != nil && graph.CanTransitionExecution(cur.State, pb.ExecutionState_EXECUTION_STATE_RECONCILING) {
					s.setExecutionState(cur, pb.ExecutionState_EXECUTION_STATE_RECONCILING, c.Timestamp, "")
				}
			}
		}
		rec.ModifyIndex = index
	}
	for _, r := range s.recons {
		if r.Outcome == outcomeInProgress && r.Epoch < c.Epoch {
			r.Outcome = outcomeAbandoned
			r.EndedAt = c.Timestamp
		}
	}
	if existing != nil {
		existing.Jobs = jobs
		return nil
	}
	s.recons = append(s.recons, &pb.ReconciliationRecord{
		Epoch:         c.Epoch,
		LeaderId:      s.epoch.LeaderId,
		StartedAt:     c.Timestamp,
		Outcome:       outcomeInProgress,
		Jobs:          jobs,
		LeaderLostAt:  c.LeaderLostAt,
		EstablishedAt: c.EstablishedAt,
	})
	if n := len(s.recons) - maxReconciliations; n > 0 {
		s.recons = slices.Delete(s.recons, 0, n)
	}
	return nil
}

// reconcileJob replaces current executions with reconciled ones and, on the last chunk, sets
// the job's status. Everything is checked before anything changes.
func (s *state) reconcileJob(index uint64, c *pb.ReconcileJobCommand) error {
	if err := s.checkEpoch(c.Epoch); err != nil {
		return err
	}
	rec, err := s.job(c.JobId)
	if err != nil {
		return err
	}
	eg := rec.ExecutionGraph
	targets := make([]*pb.ExecutionVertex, len(c.Executions))
	seenVertex := make(map[vertexKey]bool, len(c.Executions))
	seenID := make(map[string]bool, len(c.Executions))
	for i, re := range c.Executions {
		ev := graph.FindVertex(eg, re.VertexId, re.SubtaskIndex)
		if ev == nil {
			return wrapf(ErrUnknownVertex, "executions[%d]: %s[%d] of job %q", i, re.VertexId, re.SubtaskIndex, c.JobId)
		}
		id := re.Execution.GetAttemptId()
		k := vertexKey{re.VertexId, re.SubtaskIndex}
		switch {
		case id == "":
			return wrapf(ErrInvalidCommand, "executions[%d]: execution with an attempt_id is required", i)
		case re.Execution.State == pb.ExecutionState_EXECUTION_STATE_UNSPECIFIED:
			return wrapf(ErrInvalidCommand, "executions[%d]: state is unspecified", i)
		case seenVertex[k]:
			return wrapf(ErrInvalidCommand, "executions[%d]: %s[%d] appears twice", i, re.VertexId, re.SubtaskIndex)
		case seenID[id]:
			return wrapf(ErrAttemptExists, "executions[%d]: attempt %q appears twice", i, id)
		}
		if ref, used := s.attempts[id]; used && ref != (attemptRef{c.JobId, re.VertexId, re.SubtaskIndex}) {
			return wrapf(ErrAttemptExists, "executions[%d]: attempt %q belongs to %s[%d] of job %q", i, id, ref.vertexID, ref.subtask, ref.jobID)
		}
		seenVertex[k], seenID[id] = true, true
		targets[i] = ev
	}
	setStatus := c.LastChunk && c.Status != pb.JobStatus_JOB_STATUS_UNSPECIFIED && c.Status != rec.Status
	if setStatus && rec.Status == pb.JobStatus_JOB_STATUS_CANCELLING && graph.CheckJobTransition(rec.Status, c.Status) != nil {
		// A cancel committed while the job was RECONCILING (it passed the old term's gate just
		// before a re-election) wins: the job stays CANCELLING, the reconciled executions are
		// stored, and the scheduler cancels them. Refusing the chunk made the leader step down.
		setStatus = false
	}
	if setStatus {
		if err := graph.CheckJobTransition(rec.Status, c.Status); err != nil {
			return fmt.Errorf("job %q: %w", c.JobId, err)
		}
	}
	// Work per chunk stays proportional to the chunk: the attempt index is updated entry by
	// entry, the results are looked up by producer once, and the producers are copied into
	// partitions and input channels only when an attempt or its data address changed (a
	// reconciled execution normally keeps both).
	produced := resultsByProducer(eg)
	refresh := false
	keep := attemptHistory(eg)
	for i, re := range c.Executions {
		ev := targets[i]
		if old := ev.Current; old != nil {
			delete(s.attempts, old.AttemptId)
			if old.AttemptId != re.Execution.AttemptId {
				retire(ev, old, keep)
			} else {
				re.Execution.AttemptId = old.AttemptId // one copy, which the partitions share
			}
			refresh = refresh || old.AttemptId != re.Execution.AttemptId || old.TmDataAddress != re.Execution.TmDataAddress
		} else {
			refresh = true
		}
		graph.BoundStateTimestamps(re.Execution)
		s.canon.execution(re.Execution)
		s.replaceCurrent(ev.Current, re.Execution)
		ev.Current = re.Execution
		s.attempts[re.Execution.AttemptId] = attemptRef{jobID: jobID(rec), vertexID: ev.VertexId, subtask: ev.SubtaskIndex}
		setConsumable(produced[ev.VertexId], ev.SubtaskIndex, re.Execution.State)
	}
	if refresh {
		graph.RefreshProducers(eg)
	}
	if setStatus {
		s.setJobStatus(rec, c.Status, c.Timestamp, c.Cause)
	}
	rec.ModifyIndex = index
	return nil
}

// reconcileKept moves ranges of RECONCILING executions to the state their TaskManagers
// reported, keeping everything else of them (attempt, slot, start, data address): what
// reconcileJob does for an execution whose report changes only its state, without the record
// in the command. A reconciliation that keeps every task running commits a range per vertex
// instead of every execution. Like reconcileJob's replacement, the plan wins over an update
// applied after the merge (TestReconcileJobReplacesAnUpdateAppliedMeanwhile): the state is set
// whatever the execution's state is now. Everything is checked before anything changes; the
// job's status stays for the last RECONCILE_JOB chunk.
func (s *state) reconcileKept(index uint64, c *pb.ReconcileKeptCommand) error {
	if err := s.checkEpoch(c.Epoch); err != nil {
		return err
	}
	rec, err := s.job(c.JobId)
	if err != nil {
		return err
	}
	eg := rec.ExecutionGraph
	vertices := make(map[string]*pb.ExecutionJobVertex, len(eg.GetVertices()))
	for _, v := range eg.GetVertices() {
		vertices[v.VertexId] = v
	}
	// Ranges of one vertex come in ascending order and do not overlap: next[v] is the first
	// subtask the vertex's next range may name.
	next := make(map[string]int32, len(c.Ranges))
	for i, r := range c.Ranges {
		v := vertices[r.VertexId]
		switch {
		case v == nil:
			return wrapf(ErrUnknownVertex, "ranges[%d]: vertex %q of job %q", i, r.VertexId, c.JobId)
		case r.Count <= 0 || r.FirstSubtask < 0 || int64(r.FirstSubtask)+int64(r.Count) > int64(len(v.Subtasks)):
			return wrapf(ErrInvalidCommand, "ranges[%d]: subtasks [%d, %d+%d) of %s, which has %d", i, r.FirstSubtask, r.FirstSubtask, r.Count, r.VertexId, len(v.Subtasks))
		case r.FirstSubtask < next[r.VertexId]:
			return wrapf(ErrInvalidCommand, "ranges[%d]: subtasks of %s from %d overlap or precede an earlier range", i, r.VertexId, r.FirstSubtask)
		case !keptStates[r.State]:
			return wrapf(ErrInvalidCommand, "ranges[%d]: state %s (want RUNNING, INITIALIZING or FINISHED)", i, graph.ExecutionStateName(r.State))
		}
		next[r.VertexId] = r.FirstSubtask + r.Count
		for _, ev := range v.Subtasks[r.FirstSubtask : r.FirstSubtask+r.Count] {
			if ev.Current == nil {
				return wrapf(ErrInvalidCommand, "ranges[%d]: %s[%d] has no attempt", i, r.VertexId, ev.SubtaskIndex)
			}
		}
	}
	produced := resultsByProducer(eg)
	for _, r := range c.Ranges {
		v := vertices[r.VertexId]
		for _, ev := range v.Subtasks[r.FirstSubtask : r.FirstSubtask+r.Count] {
			s.setExecutionState(ev.Current, r.State, c.Timestamp, "")
			setConsumable(produced[r.VertexId], ev.SubtaskIndex, r.State)
		}
	}
	rec.ModifyIndex = index
	return nil
}

// keptStates are the states RECONCILE_KEPT may move an execution to: those a report can keep
// without a failure cause or a changed record.
var keptStates = map[pb.ExecutionState]bool{
	pb.ExecutionState_EXECUTION_STATE_RUNNING:      true,
	pb.ExecutionState_EXECUTION_STATE_INITIALIZING: true,
	pb.ExecutionState_EXECUTION_STATE_FINISHED:     true,
}

// endReconciliation closes the in-progress record of the epoch.
func (s *state) endReconciliation(_ uint64, c *pb.EndReconciliationCommand) error {
	if err := s.checkEpoch(c.Epoch); err != nil {
		return err
	}
	outcome := c.Outcome
	if outcome == "" {
		outcome = outcomeCompleted
	}
	if outcome != outcomeCompleted && outcome != outcomeAbandoned {
		return wrapf(ErrInvalidCommand, "outcome %q (want %q or %q)", c.Outcome, outcomeCompleted, outcomeAbandoned)
	}
	for i, rep := range c.Reports {
		if rep.GetTmId() == "" {
			return wrapf(ErrInvalidCommand, "reports[%d]: no TaskManager id", i)
		}
		if !reportOutcomes[rep.Outcome] {
			return wrapf(ErrInvalidCommand, "reports[%d]: outcome %q (want reported, refused, missing or dead)", i, rep.Outcome)
		}
	}
	r := s.reconciliation(c.Epoch)
	if r == nil || r.Outcome != outcomeInProgress {
		return wrapf(ErrNoReconciliation, "epoch %d", c.Epoch)
	}
	r.EndedAt = c.Timestamp
	r.Counts = c.Counts
	r.Outcome = outcome
	// The phase and report times are the leader's, written into the command: copied, never read
	// from a clock here.
	r.CollectedAt, r.MergedAt, r.JobsCommittedAt = c.CollectedAt, c.MergedAt, c.JobsCommittedAt
	r.Reports = c.Reports
	return nil
}

// reportOutcomes are the outcomes a ReconciliationReport may carry.
var reportOutcomes = map[string]bool{"reported": true, "refused": true, "missing": true, "dead": true}
