package fsm

import (
	"fmt"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/transport/pb"
)

type vertexKey struct {
	vertexID string
	subtask  int32
}

// createAttempts makes new current executions in SCHEDULED state. Every spec is checked
// before anything changes.
func (s *state) createAttempts(index uint64, c *pb.CreateAttemptsCommand) error {
	rec, err := s.job(c.JobId)
	if err != nil {
		return err
	}
	if graph.IsGloballyTerminal(rec.Status) {
		return wrapf(ErrJobTerminal, "job %q is %s", c.JobId, statusName(rec.Status))
	}
	eg := rec.ExecutionGraph
	targets := make([]*pb.ExecutionVertex, len(c.Attempts))
	seenVertex := make(map[vertexKey]bool, len(c.Attempts))
	newIDs := make(map[string]bool, len(c.Attempts))
	for i, a := range c.Attempts {
		ev := graph.FindVertex(eg, a.VertexId, a.SubtaskIndex)
		if ev == nil {
			return wrapf(ErrUnknownVertex, "attempts[%d]: %s[%d] of job %q", i, a.VertexId, a.SubtaskIndex, c.JobId)
		}
		k := vertexKey{a.VertexId, a.SubtaskIndex}
		switch {
		case a.AttemptId == "":
			return wrapf(ErrInvalidCommand, "attempts[%d]: attempt_id is empty", i)
		case seenVertex[k]:
			return wrapf(ErrInvalidCommand, "attempts[%d]: %s[%d] appears twice", i, a.VertexId, a.SubtaskIndex)
		case newIDs[a.AttemptId]:
			return wrapf(ErrAttemptExists, "attempts[%d]: attempt %q appears twice", i, a.AttemptId)
		}
		if _, used := s.attempts[a.AttemptId]; used {
			return wrapf(ErrAttemptExists, "attempts[%d]: attempt %q", i, a.AttemptId)
		}
		seenVertex[k], newIDs[a.AttemptId] = true, true
		if cur := ev.Current; cur != nil {
			if a.AttemptNumber <= cur.AttemptNumber {
				return wrapf(ErrStaleAttemptNumber, "attempts[%d]: %s[%d] number %d, current %d",
					i, a.VertexId, a.SubtaskIndex, a.AttemptNumber, cur.AttemptNumber)
			}
			if isActive(cur.State) {
				return wrapf(ErrAttemptStillActive, "attempts[%d]: %s[%d] attempt %q is %s",
					i, a.VertexId, a.SubtaskIndex, cur.AttemptId, stateName(cur.State))
			}
		} else if a.AttemptNumber < 0 {
			return wrapf(ErrStaleAttemptNumber, "attempts[%d]: negative attempt number %d", i, a.AttemptNumber)
		}
		targets[i] = ev
	}
	if len(c.Attempts) == 0 {
		return nil
	}
	if err := usedInHistory(eg, newIDs); err != nil {
		return err
	}
	scheduled := pb.ExecutionState_EXECUTION_STATE_SCHEDULED
	keep := attemptHistory(eg)
	for i, a := range c.Attempts {
		ev := targets[i]
		if old := ev.Current; old != nil {
			delete(s.attempts, old.AttemptId)
			retire(ev, old, keep)
		}
		old := ev.Current
		ev.Current = &pb.Execution{
			AttemptId:      a.AttemptId,
			AttemptNumber:  a.AttemptNumber,
			StartTimestamp: c.Timestamp,
			State:          scheduled,
			StateTimestamps: []*pb.StateTimestamp{
				s.canon.stamp(pb.ExecutionState_EXECUTION_STATE_CREATED, c.Timestamp),
				s.canon.stamp(scheduled, c.Timestamp),
			},
			Slot:          s.canon.slot(a.Slot),
			TmGrpcAddress: s.canon.str(a.TmGrpcAddress),
			TmDataAddress: s.canon.str(a.TmDataAddress),
		}
		s.replaceCurrent(old, ev.Current)
		s.attempts[a.AttemptId] = attemptRef{jobID: jobID(rec), vertexID: ev.VertexId, subtask: ev.SubtaskIndex}
		updateConsumable(eg, a.VertexId, a.SubtaskIndex, scheduled)
	}
	graph.RefreshProducers(eg)
	rec.ModifyIndex = index
	return nil
}

// usedInHistory fails if any of ids is an earlier attempt of the graph.
func usedInHistory(eg *pb.ExecutionGraph, ids map[string]bool) error {
	for _, ejv := range eg.GetVertices() {
		for _, ev := range ejv.Subtasks {
			for _, h := range ev.History {
				if ids[h.AttemptId] {
					return wrapf(ErrAttemptExists, "attempt %q is an earlier attempt of %s[%d]", h.AttemptId, ev.VertexId, ev.SubtaskIndex)
				}
			}
		}
	}
	return nil
}

// updateStates applies each update on its own; the result holds one error text per update.
func (s *state) updateStates(index uint64, c *pb.UpdateExecutionStatesCommand) *pb.UpdateExecutionStatesResult {
	res := &pb.UpdateExecutionStatesResult{Errors: make([]string, len(c.Updates))}
	for i, u := range c.Updates {
		if err := s.updateState(index, u); err != nil {
			res.Errors[i] = err.Error()
		}
	}
	return res
}

func (s *state) updateState(index uint64, u *pb.ExecutionStateUpdate) error {
	rec, err := s.job(u.JobId)
	if err != nil {
		return err
	}
	ref, ok := s.attempts[u.AttemptId]
	if !ok || ref.jobID != u.JobId {
		return wrapf(ErrUnknownAttempt, "attempt %q of job %q", u.AttemptId, u.JobId)
	}
	if u.State == pb.ExecutionState_EXECUTION_STATE_UNSPECIFIED {
		return wrapf(ErrInvalidCommand, "attempt %q: state is unspecified", u.AttemptId)
	}
	eg := rec.ExecutionGraph
	ev := graph.FindVertex(eg, ref.vertexID, ref.subtask)
	cur := ev.GetCurrent()
	if cur.GetAttemptId() != u.AttemptId {
		// The index and the graph disagree: a bug, not a replica divergence risk, since every
		// replica holds the same index.
		return wrapf(ErrUnknownAttempt, "attempt %q of job %q is not current", u.AttemptId, u.JobId)
	}
	to := u.State
	if cur.State == pb.ExecutionState_EXECUTION_STATE_CANCELING && to == pb.ExecutionState_EXECUTION_STATE_FAILED {
		// Flink's rule: a task that fails while it is being cancelled (typically because its
		// producer was cancelled first) completes the cancellation.
		to = pb.ExecutionState_EXECUTION_STATE_CANCELED
	}
	if cur.State == to {
		return nil
	}
	if err := graph.CheckExecutionTransition(cur.State, to); err != nil {
		return fmt.Errorf("attempt %q (%s[%d]): %w", u.AttemptId, ref.vertexID, ref.subtask, err)
	}
	s.setExecutionState(cur, to, u.Timestamp, u.FailureCause)
	updateConsumable(eg, ref.vertexID, ref.subtask, to)
	rec.ModifyIndex = index
	return nil
}
