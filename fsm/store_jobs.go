package fsm

import (
	"fmt"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// submitJob creates a job record in CREATED status.
func (s *state) submitJob(index uint64, c *pb.SubmitJobCommand) error {
	jg := c.JobGraph
	if jg == nil || jg.JobId == "" {
		return wrapf(ErrInvalidCommand, "submit job: job_graph with a job_id is required")
	}
	if _, ok := s.jobs[jg.JobId]; ok {
		return wrapf(ErrJobExists, "job %q", jg.JobId)
	}
	if err := graph.Validate(jg, graph.DefaultLimits()); err != nil {
		return err
	}
	// The replicated ceiling, not the leader's configured limits: every replica refuses the
	// same jobs, and none builds a graph its snapshot could not hold.
	if err := graph.CheckCeiling(jg); err != nil {
		return err
	}
	eg, err := graph.BuildExecutionGraph(jg)
	if err != nil {
		return err
	}
	rec := &pb.JobRecord{
		JobGraph:       jg,
		ExecutionGraph: eg,
		SubmittedAt:    c.Timestamp,
		CreateIndex:    index,
		ModifyIndex:    index,
	}
	s.setJobStatus(rec, pb.JobStatus_JOB_STATUS_CREATED, c.Timestamp, "")
	s.jobs[jg.JobId] = rec
	return nil
}

// setStatus moves a job to a new status (compare-and-set when expected is given) and adds
// to its restart counter.
func (s *state) setStatus(index uint64, c *pb.SetJobStatusCommand) error {
	rec, err := s.job(c.JobId)
	if err != nil {
		return err
	}
	if c.Status == pb.JobStatus_JOB_STATUS_UNSPECIFIED || c.AddRestarts < 0 {
		return wrapf(ErrInvalidCommand, "set job status: status is required and add_restarts must be >= 0")
	}
	if c.Expected != pb.JobStatus_JOB_STATUS_UNSPECIFIED && c.Expected != rec.Status {
		return wrapf(ErrStatusMismatch, "job %q is %s, expected %s", c.JobId, statusName(rec.Status), statusName(c.Expected))
	}
	if c.Status != rec.Status {
		if err := graph.CheckJobTransition(rec.Status, c.Status); err != nil {
			return fmt.Errorf("job %q: %w", c.JobId, err)
		}
		s.setJobStatus(rec, c.Status, c.Timestamp, c.Cause)
		rec.ModifyIndex = index
	}
	if c.AddRestarts > 0 {
		rec.Restarts += c.AddRestarts
		rec.ModifyIndex = index
	}
	return nil
}

// cancelJob moves a job to CANCELLING and its active executions to CANCELING (CREATED ones
// straight to CANCELED). RECONCILING executions keep their state: the reconciliation decides
// them. A job with no execution left running goes straight to CANCELED.
func (s *state) cancelJob(index uint64, c *pb.CancelJobCommand) error {
	rec, err := s.job(c.JobId)
	if err != nil {
		return err
	}
	if graph.IsGloballyTerminal(rec.Status) {
		return wrapf(ErrJobTerminal, "job %q is %s", c.JobId, statusName(rec.Status))
	}
	cancelling := pb.JobStatus_JOB_STATUS_CANCELLING
	if rec.Status != cancelling {
		if err := graph.CheckJobTransition(rec.Status, cancelling); err != nil {
			return fmt.Errorf("job %q: %w", c.JobId, err)
		}
		s.setJobStatus(rec, cancelling, c.Timestamp, "")
	}
	eg := rec.ExecutionGraph
	active := 0
	for _, ejv := range eg.GetVertices() {
		for _, ev := range ejv.Subtasks {
			cur := ev.Current
			if cur == nil || graph.IsTerminalExecution(cur.State) {
				continue
			}
			to := pb.ExecutionState_EXECUTION_STATE_CANCELING
			if cur.State == pb.ExecutionState_EXECUTION_STATE_CREATED {
				to = pb.ExecutionState_EXECUTION_STATE_CANCELED
			}
			if graph.CanTransitionExecution(cur.State, to) {
				s.setExecutionState(cur, to, c.Timestamp, "")
				updateConsumable(eg, ev.VertexId, ev.SubtaskIndex, to)
			}
			if !graph.IsTerminalExecution(cur.State) {
				active++
			}
		}
	}
	if active == 0 {
		s.setJobStatus(rec, pb.JobStatus_JOB_STATUS_CANCELED, c.Timestamp, "")
	}
	rec.ModifyIndex = index
	return nil
}

// removeJobs deletes terminal jobs and counts them. Every id must name a distinct terminal job,
// or nothing is removed.
func (s *state) removeJobs(_ uint64, c *pb.RemoveJobsCommand) error {
	if len(c.JobIds) == 0 {
		return wrapf(ErrInvalidCommand, "remove jobs: job_ids is empty")
	}
	seen := make(map[string]bool, len(c.JobIds))
	for i, id := range c.JobIds {
		if seen[id] {
			return wrapf(ErrInvalidCommand, "remove jobs: job_ids[%d] %q appears twice", i, id)
		}
		seen[id] = true
		rec, err := s.job(id)
		if err != nil {
			return fmt.Errorf("remove jobs: job_ids[%d]: %w", i, err)
		}
		if !graph.IsGloballyTerminal(rec.Status) {
			return wrapf(ErrJobNotTerminal, "remove jobs: job_ids[%d]: job %q is %s", i, id, statusName(rec.Status))
		}
	}
	for _, id := range c.JobIds {
		for _, ejv := range s.jobs[id].ExecutionGraph.GetVertices() {
			for _, ev := range ejv.Subtasks {
				if a := ev.Current.GetAttemptId(); a != "" && s.attempts[a].jobID == id {
					delete(s.attempts, a)
				}
			}
		}
		s.countJob(s.jobs[id], -1)
		delete(s.jobs, id)
		s.recountCheckpoints(id)
	}
	s.removed += uint64(len(c.JobIds))
	s.removedAt = c.Timestamp
	return nil
}

// OnTaskManager calls fn with every current, non-terminal execution placed on the TaskManager
// tm and its job, under the read lock (fn must neither keep nor change them). The executions
// come from an index kept by every change, not from a walk of the jobs; in no set order.
func (f *FSM) OnTaskManager(tm string, fn func(jobID string, ev *pb.ExecutionVertex)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	// The vertices are looked up once per call, not scanned for per execution: a heartbeat of
	// a TM holding 10,000 executions of a 100-vertex job scanned the vertices 10,000 times.
	type jobVertex struct{ job, vertex string }
	vertices := map[jobVertex]*pb.ExecutionJobVertex{}
	for id := range f.st.counts.onTM[tm] {
		ref, ok := f.st.attempts[id]
		if !ok {
			continue
		}
		k := jobVertex{ref.jobID, ref.vertexID}
		v, seen := vertices[k]
		if !seen {
			if rec := f.st.jobs[ref.jobID]; rec != nil {
				v = graph.FindJobVertex(rec.ExecutionGraph, ref.vertexID)
			}
			vertices[k] = v
		}
		if v == nil || ref.subtask < 0 || int(ref.subtask) >= len(v.Subtasks) {
			continue
		}
		ev := v.Subtasks[ref.subtask]
		if ev.SubtaskIndex != ref.subtask { // not in index order: graph.FindVertex's fallback
			ev = graph.FindVertex(f.st.jobs[ref.jobID].ExecutionGraph, ref.vertexID, ref.subtask)
		}
		if ev != nil && ev.GetCurrent().GetAttemptId() == id {
			fn(ref.jobID, ev)
		}
	}
}

// SlotsUsed returns, per TaskManager, the slots holding a non-terminal current execution (kept
// by every change: no walk of the jobs).
func (f *FSM) SlotsUsed() map[string]int32 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make(map[string]int32, len(f.st.counts.tmSlots))
	for tm, n := range f.st.counts.tmSlots {
		out[tm] = int32(n)
	}
	return out
}

// Counts returns the jobs by status and the current executions by state (kept by every change:
// no walk of the jobs). States with none are left out.
func (f *FSM) Counts() (jobs map[pb.JobStatus]int64, execs map[pb.ExecutionState]int64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	jobs = make(map[pb.JobStatus]int64, len(f.st.counts.jobs))
	for k, v := range f.st.counts.jobs {
		if v != 0 {
			jobs[k] = v
		}
	}
	execs = make(map[pb.ExecutionState]int64, len(f.st.counts.execs))
	for k, v := range f.st.counts.execs {
		if v != 0 {
			execs[k] = v
		}
	}
	return jobs, execs
}
