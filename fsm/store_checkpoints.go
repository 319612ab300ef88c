package fsm

import (
	"cmp"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/internal/failpoint"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// Checkpoints (docs/checkpoints.md): a job's checkpoint record lives in its JobRecord
// (JobRecord.checkpoints), created by the job's first trigger, so it travels with the job
// through snapshots and a job that never checkpointed encodes as it did before checkpoints.

const (
	// maxAbortedCheckpoints bounds the aborted checkpoints a job keeps for its view.
	maxAbortedCheckpoints = 10
	// maxJobCheckpointAcks bounds the acknowledgements a job's pending and completed
	// checkpoints hold in all (one per subtask each): a job of more than half this many
	// executions holds one pending and one completed checkpoint whatever its config asks for
	// (checkpointBudget), so its record stays under the snapshot's record limit (docs/fsm.md).
	maxJobCheckpointAcks = 131072
	// maxCheckpointText bounds an abort reason and a state path.
	maxCheckpointText = 1024

	reasonSubsumed = "subsumed"
	reasonRetained = "retained"
)

var (
	pendingStatus   = pb.CheckpointStatus_CHECKPOINT_STATUS_PENDING
	completedStatus = pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED
	abortedStatus   = pb.CheckpointStatus_CHECKPOINT_STATUS_ABORTED
)

// executions counts the subtasks of a graph: each must acknowledge a checkpoint.
func executions(eg *pb.ExecutionGraph) int {
	n := 0
	for _, v := range eg.GetVertices() {
		n += len(v.GetSubtasks())
	}
	return n
}

// checkpointBudget returns how many checkpoints of a job of n executions may be pending and
// how many completed ones it keeps: its settings, cut so that at most maxJobCheckpointAcks
// acknowledgements are held in all (at least one of each; the pending ones get at most half).
func checkpointBudget(s graph.CheckpointSettings, n int) (maxConcurrent, retained int) {
	held := max(2, maxJobCheckpointAcks/max(n, 1))
	maxConcurrent = max(1, min(s.MaxConcurrent, held/2))
	retained = max(1, min(s.Retained, held-maxConcurrent))
	return maxConcurrent, retained
}

// jobCheckpointing returns the job's checkpoint settings as the FSM applies them (the budget
// applied), or ErrCheckpointingOff.
func jobCheckpointing(rec *pb.JobRecord) (graph.CheckpointSettings, error) {
	cfg := rec.GetJobGraph().GetCheckpointConfig()
	s, on := graph.Checkpointing(cfg)
	if !on {
		if err := graph.ValidateCheckpointConfig(cfg); err != nil {
			return s, wrapf(ErrCheckpointingOff, "job %q: its checkpoint_config is invalid (%v)", jobID(rec), err)
		}
		return s, wrapf(ErrCheckpointingOff, "job %q", jobID(rec))
	}
	s.MaxConcurrent, s.Retained = checkpointBudget(s, executions(rec.ExecutionGraph))
	return s, nil
}

func nextCheckpointID(cp *pb.JobCheckpoints) uint64 {
	if cp.GetNextCheckpointId() == 0 {
		return 1
	}
	return cp.NextCheckpointId
}

// pendingCheckpoint finds a pending checkpoint of the job, with an error saying what became of
// it otherwise.
func pendingCheckpoint(rec *pb.JobRecord, id uint64) (int, *pb.CheckpointRecord, error) {
	cp := rec.Checkpoints
	if i := slices.IndexFunc(cp.GetPending(), func(c *pb.CheckpointRecord) bool { return c.Id == id }); i >= 0 {
		return i, cp.Pending[i], nil
	}
	switch {
	case id == 0 || id >= nextCheckpointID(cp):
		return 0, nil, wrapf(ErrUnknownCheckpoint, "job %q: checkpoint %d (the next id is %d)", jobID(rec), id, nextCheckpointID(cp))
	case slices.ContainsFunc(cp.GetCompleted(), func(c *pb.CheckpointRecord) bool { return c.Id == id }):
		return 0, nil, wrapf(ErrCheckpointCompleted, "job %q: checkpoint %d", jobID(rec), id)
	case slices.ContainsFunc(cp.GetAborted(), func(c *pb.CheckpointRecord) bool { return c.Id == id }):
		return 0, nil, wrapf(ErrCheckpointNotPending, "job %q: checkpoint %d was aborted", jobID(rec), id)
	}
	return 0, nil, wrapf(ErrCheckpointNotPending, "job %q: checkpoint %d ended (its record is no longer kept)", jobID(rec), id)
}

// acksOpen says whether a job in status st takes acknowledgements and completions: RUNNING,
// and RECONCILING (a new leader completes, from the reports, a checkpoint every task
// acknowledged before the failover).
func acksOpen(st pb.JobStatus) bool {
	return st == pb.JobStatus_JOB_STATUS_RUNNING || st == pb.JobStatus_JOB_STATUS_RECONCILING
}

// triggerCheckpoint adds a PENDING checkpoint with the job's next id.
func (s *state) triggerCheckpoint(index uint64, c *pb.TriggerCheckpointCommand) (*pb.CheckpointCommandResult, error) {
	rec, err := s.job(c.JobId)
	if err != nil {
		return nil, err
	}
	if c.Epoch != s.epoch.Epoch {
		return nil, wrapf(ErrStaleEpoch, "trigger checkpoint of job %q: epoch %d, the committed epoch is %d", c.JobId, c.Epoch, s.epoch.Epoch)
	}
	settings, err := jobCheckpointing(rec)
	if err != nil {
		return nil, err
	}
	if rec.Status != pb.JobStatus_JOB_STATUS_RUNNING {
		return nil, wrapf(ErrJobNotRunning, "trigger checkpoint: job %q is %s", c.JobId, statusName(rec.Status))
	}
	cp := rec.Checkpoints
	id := nextCheckpointID(cp)
	if c.CheckpointId != 0 && c.CheckpointId != id {
		return nil, wrapf(ErrCheckpointID, "job %q: checkpoint %d asked for, the next id is %d", c.JobId, c.CheckpointId, id)
	}
	if n := len(cp.GetPending()); n >= settings.MaxConcurrent {
		return nil, wrapf(ErrTooManyCheckpoints, "job %q: %d pending (the oldest is %d), max_concurrent %d", c.JobId, n, cp.Pending[0].Id, settings.MaxConcurrent)
	}
	if cp == nil {
		cp = &pb.JobCheckpoints{}
		rec.Checkpoints = cp
	}
	cp.NextCheckpointId = id + 1
	cp.Pending = append(cp.Pending, &pb.CheckpointRecord{Id: id, Status: pendingStatus, TriggerUnixMs: c.Timestamp, Epoch: c.Epoch})
	rec.ModifyIndex = index
	return &pb.CheckpointCommandResult{CheckpointId: id, Tasks: int32(executions(rec.ExecutionGraph))}, nil
}

func compareAcks(a, b *pb.TaskCheckpointAck) int {
	if c := cmp.Compare(a.VertexId, b.VertexId); c != 0 {
		return c
	}
	return cmp.Compare(a.SubtaskIndex, b.SubtaskIndex)
}

// FindCheckpointAck returns a subtask's acknowledgement in a checkpoint record, or nil (the
// acks are ordered by vertex id, then subtask).
func FindCheckpointAck(ck *pb.CheckpointRecord, vertexID string, subtask int32) *pb.TaskCheckpointAck {
	acks := ck.GetAcks()
	i, found := slices.BinarySearchFunc(acks, &pb.TaskCheckpointAck{VertexId: vertexID, SubtaskIndex: subtask}, compareAcks)
	if !found {
		return nil
	}
	return acks[i]
}

// checkAckFields checks what an acknowledgement says about itself.
func checkAckFields(a *pb.TaskCheckpointAck) string {
	p := a.StatePath
	switch {
	case a.VertexId == "" || a.SubtaskIndex < 0 || a.AttemptNumber < 0:
		return "a vertex id and a subtask and attempt number >= 0 are required"
	case a.StateSizeBytes < 0:
		return fmt.Sprintf("state_size_bytes %d is negative", a.StateSizeBytes)
	case p == "" || len(p) > maxCheckpointText:
		return fmt.Sprintf("state_path must be 1 to %d bytes", maxCheckpointText)
	case strings.HasPrefix(p, "/") || path.Clean(p) != p || p == "." || p == ".." || strings.HasPrefix(p, "../"):
		return fmt.Sprintf("state_path %q is not a clean path relative to the storage root", p)
	}
	return ""
}

// ackCheckpoint records acknowledgements of a pending checkpoint, each from the current
// attempt of its subtask. All or nothing; one already recorded is accepted again.
func (s *state) ackCheckpoint(index uint64, c *pb.AckCheckpointCommand) (*pb.CheckpointCommandResult, error) {
	rec, err := s.job(c.JobId)
	if err != nil {
		return nil, err
	}
	_, ck, err := pendingCheckpoint(rec, c.CheckpointId)
	if err != nil {
		return nil, err
	}
	if !acksOpen(rec.Status) {
		return nil, wrapf(ErrJobNotRunning, "acknowledge checkpoint %d: job %q is %s", c.CheckpointId, c.JobId, statusName(rec.Status))
	}
	if len(c.Acks) == 0 {
		return nil, wrapf(ErrInvalidCommand, "acknowledge checkpoint %d of job %q: no acks", c.CheckpointId, c.JobId)
	}
	type subtask struct {
		vertex string
		index  int32
	}
	inCommand := make(map[subtask]*pb.TaskCheckpointAck, len(c.Acks)) // lookups only
	fresh := make([]*pb.TaskCheckpointAck, 0, len(c.Acks))
	for i, a := range c.Acks {
		where := fmt.Sprintf("acknowledge checkpoint %d of job %q: acks[%d]", c.CheckpointId, c.JobId, i)
		if bad := checkAckFields(a); bad != "" {
			return nil, wrapf(ErrInvalidCommand, "%s: %s", where, bad)
		}
		ev := graph.FindVertex(rec.ExecutionGraph, a.VertexId, a.SubtaskIndex)
		if ev == nil {
			return nil, wrapf(ErrUnknownVertex, "%s: %s[%d]", where, a.VertexId, a.SubtaskIndex)
		}
		if cur := ev.GetCurrent(); cur == nil || cur.AttemptNumber != a.AttemptNumber {
			return nil, wrapf(ErrStaleCheckpointAck, "%s: %s[%d] attempt %d; the current attempt is %s", where, a.VertexId, a.SubtaskIndex, a.AttemptNumber, attemptNumberName(cur))
		}
		k := subtask{a.VertexId, a.SubtaskIndex}
		if prev := inCommand[k]; prev != nil {
			if !proto.Equal(prev, a) {
				return nil, wrapf(ErrInvalidCommand, "%s: %s[%d] is acknowledged twice with different states", where, a.VertexId, a.SubtaskIndex)
			}
			continue
		}
		inCommand[k] = a
		if old := FindCheckpointAck(ck, a.VertexId, a.SubtaskIndex); old != nil {
			if !proto.Equal(old, a) {
				return nil, wrapf(ErrInvalidCommand, "%s: %s[%d] already acknowledged the checkpoint with state %q (attempt %d)", where, a.VertexId, a.SubtaskIndex, old.StatePath, old.AttemptNumber)
			}
			continue // a repeat: idempotent
		}
		fresh = append(fresh, a)
	}
	if len(fresh) > 0 {
		slices.SortFunc(fresh, compareAcks)
		ck.Acks = mergeAcks(ck.Acks, fresh)
		rec.ModifyIndex = index
	}
	return &pb.CheckpointCommandResult{CheckpointId: ck.Id, Acknowledged: int32(len(ck.Acks)), Tasks: int32(executions(rec.ExecutionGraph))}, nil
}

// mergeAcks merges two ordered lists of acknowledgements of distinct subtasks.
func mergeAcks(a, b []*pb.TaskCheckpointAck) []*pb.TaskCheckpointAck {
	out := make([]*pb.TaskCheckpointAck, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if compareAcks(a[0], b[0]) < 0 {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	return append(append(out, a...), b...)
}

func attemptNumberName(cur *pb.Execution) string {
	if cur == nil {
		return "none"
	}
	return fmt.Sprint(cur.AttemptNumber)
}

// completeCheckpoint completes a pending checkpoint every subtask's current attempt
// acknowledged: older pending ones are aborted as subsumed, and completed ones past the
// retained count dropped; the result lists both.
func (s *state) completeCheckpoint(index uint64, c *pb.CompleteCheckpointCommand) (*pb.CheckpointCommandResult, error) {
	rec, err := s.job(c.JobId)
	if err != nil {
		return nil, err
	}
	_, ck, err := pendingCheckpoint(rec, c.CheckpointId)
	if err != nil {
		if ck = completedAgain(rec, c.CheckpointId, err); ck == nil {
			return nil, err
		}
	}
	if !acksOpen(rec.Status) {
		return nil, wrapf(ErrJobNotRunning, "complete checkpoint %d: job %q is %s", c.CheckpointId, c.JobId, statusName(rec.Status))
	}
	n, missing := 0, 0
	var firstMissing, stale string
	for _, ejv := range rec.ExecutionGraph.GetVertices() {
		for _, ev := range ejv.Subtasks {
			n++
			a := FindCheckpointAck(ck, ev.VertexId, ev.SubtaskIndex)
			cur := ev.GetCurrent()
			switch {
			case a == nil:
				if missing++; firstMissing == "" {
					firstMissing = fmt.Sprintf("%s[%d]", ev.VertexId, ev.SubtaskIndex)
				}
			case cur == nil || cur.AttemptNumber != a.AttemptNumber:
				if stale == "" {
					stale = fmt.Sprintf("%s[%d] was acknowledged by attempt %d; the current attempt is %s", ev.VertexId, ev.SubtaskIndex, a.AttemptNumber, attemptNumberName(cur))
				}
			}
		}
	}
	if missing > 0 {
		return nil, wrapf(ErrCheckpointIncomplete, "job %q: checkpoint %d: %d of %d subtasks acknowledged, not %s", c.JobId, c.CheckpointId, n-missing, n, firstMissing)
	}
	if stale != "" {
		return nil, wrapf(ErrStaleCheckpointAck, "job %q: checkpoint %d: %s", c.JobId, c.CheckpointId, stale)
	}
	settings, err := jobCheckpointing(rec)
	retained := 1
	if err == nil {
		retained = settings.Retained
	}
	cp := rec.Checkpoints
	res := &pb.CheckpointCommandResult{CheckpointId: ck.Id, Acknowledged: int32(len(ck.Acks)), Tasks: int32(n)}
	pending := cp.Pending[:0]
	for _, p := range cp.Pending {
		switch {
		case p.Id < ck.Id:
			res.Discarded = append(res.Discarded, discarded(p, reasonSubsumed))
			abortRecord(cp, p, c.Timestamp, reasonSubsumed)
		case p.Id > ck.Id:
			pending = append(pending, p)
		}
	}
	clear(cp.Pending[len(pending):])
	cp.Pending = pending
	ck.Status, ck.CompleteUnixMs = completedStatus, c.Timestamp
	cp.Completed = append(cp.Completed, ck)
	cp.CompletedCount++
	if over := len(cp.Completed) - retained; over > 0 {
		for _, old := range cp.Completed[:over] {
			res.Discarded = append(res.Discarded, discarded(old, reasonRetained))
		}
		cp.Completed = slices.Delete(cp.Completed, 0, over)
	}
	rec.ModifyIndex = index
	return res, nil
}

// completedAgain is the planted bug complete-twice (failpoint.CompleteTwice): the guard against
// completing a checkpoint that is completed already is off, so a second COMPLETE of it
// completes its record again (listed and counted twice). Nil in an intact build, or when err is
// not ErrCheckpointCompleted.
func completedAgain(rec *pb.JobRecord, id uint64, err error) *pb.CheckpointRecord {
	if !errors.Is(err, ErrCheckpointCompleted) || !failpoint.Enabled(failpoint.CompleteTwice) {
		return nil
	}
	completed := rec.Checkpoints.GetCompleted()
	if i := slices.IndexFunc(completed, func(c *pb.CheckpointRecord) bool { return c.Id == id }); i >= 0 {
		return completed[i]
	}
	return nil
}

// abortCheckpoint aborts a pending checkpoint, whatever the job's status.
func (s *state) abortCheckpoint(index uint64, c *pb.AbortCheckpointCommand) (*pb.CheckpointCommandResult, error) {
	rec, err := s.job(c.JobId)
	if err != nil {
		return nil, err
	}
	i, ck, err := pendingCheckpoint(rec, c.CheckpointId)
	if err != nil {
		return nil, err
	}
	if c.Reason == "" {
		return nil, wrapf(ErrInvalidCommand, "abort checkpoint %d of job %q: a reason is required", c.CheckpointId, c.JobId)
	}
	reason := c.Reason
	if len(reason) > maxCheckpointText {
		reason = strings.ToValidUTF8(reason[:maxCheckpointText], "") // a rune cut in two goes
	}
	cp := rec.Checkpoints
	res := &pb.CheckpointCommandResult{CheckpointId: ck.Id, Acknowledged: int32(len(ck.Acks)), Tasks: int32(executions(rec.ExecutionGraph)),
		Discarded: []*pb.DiscardedCheckpoint{discarded(ck, reason)}}
	cp.Pending = slices.Delete(cp.Pending, i, i+1)
	abortRecord(cp, ck, c.Timestamp, reason)
	rec.ModifyIndex = index
	return res, nil
}

// discarded lists a checkpoint's state for the leader to delete.
func discarded(ck *pb.CheckpointRecord, reason string) *pb.DiscardedCheckpoint {
	d := &pb.DiscardedCheckpoint{CheckpointId: ck.Id, Reason: reason, StatePaths: make([]string, len(ck.Acks))}
	for i, a := range ck.Acks {
		d.StatePaths[i] = a.StatePath
	}
	return d
}

// abortRecord turns a pending checkpoint (already out of the pending list) into an aborted
// record without its acknowledgements, keeping the newest maxAbortedCheckpoints.
func abortRecord(cp *pb.JobCheckpoints, ck *pb.CheckpointRecord, ts int64, reason string) {
	ck.Status, ck.AbortUnixMs, ck.AbortReason = abortedStatus, ts, reason
	ck.Acknowledged, ck.Acks = int32(len(ck.Acks)), nil
	cp.Aborted = append(cp.Aborted, ck)
	if over := len(cp.Aborted) - maxAbortedCheckpoints; over > 0 {
		cp.Aborted = slices.Delete(cp.Aborted, 0, over)
	}
	cp.AbortedCount++
}

// checkRestoredCheckpoints checks a restored job's checkpoint record: ids below the next id,
// each list in id order with its status, no id both pending and completed, acks in order.
func checkRestoredCheckpoints(rec *pb.JobRecord) error {
	cp := rec.GetCheckpoints()
	if cp == nil {
		return nil
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: job %q: checkpoints: %s", ErrSnapshotCorrupt, jobID(rec), fmt.Sprintf(format, args...))
	}
	next := cp.NextCheckpointId
	if next < 2 {
		return bad("next id %d, a record exists only after a trigger", next)
	}
	ids := map[uint64]bool{}
	for _, l := range []struct {
		name    string
		list    []*pb.CheckpointRecord
		status  pb.CheckpointStatus
		ordered bool
	}{{"pending", cp.Pending, pendingStatus, true}, {"completed", cp.Completed, completedStatus, true}, {"aborted", cp.Aborted, abortedStatus, false}} {
		for i, ck := range l.list {
			switch {
			case ck.Id == 0 || ck.Id >= next:
				return bad("%s checkpoint %d is not below the next id %d", l.name, ck.Id, next)
			case ck.Status != l.status:
				return bad("%s checkpoint %d is %s", l.name, ck.Id, ck.Status)
			case l.ordered && i > 0 && l.list[i-1].Id >= ck.Id:
				return bad("%s checkpoints out of order at %d", l.name, ck.Id)
			case l.ordered && ids[ck.Id]:
				return bad("checkpoint %d is both pending and completed", ck.Id)
			case !slices.IsSortedFunc(ck.Acks, compareAcks):
				return bad("the acks of checkpoint %d are out of order", ck.Id)
			}
			if l.ordered {
				ids[ck.Id] = true
			}
		}
	}
	return nil
}

// CheckpointSettings returns a job's checkpoint settings as the FSM applies them (defaults
// filled in, the pending and retained counts cut to the job's budget), and false for an unknown
// job or one that is not checkpointed.
func (f *FSM) CheckpointSettings(jobID string) (graph.CheckpointSettings, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	rec, ok := f.st.jobs[jobID]
	if !ok {
		return graph.CheckpointSettings{}, false
	}
	s, err := jobCheckpointing(rec)
	return s, err == nil
}

// Checkpoints returns a copy of a job's checkpoint record (nil before its first trigger), and
// false for an unknown job.
func (f *FSM) Checkpoints(jobID string) (*pb.JobCheckpoints, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	rec, ok := f.st.jobs[jobID]
	if !ok {
		return nil, false
	}
	if rec.Checkpoints == nil {
		return nil, true
	}
	return proto.CloneOf(rec.Checkpoints), true
}

// NextCheckpointID returns the id the job's next trigger gets, and false for an unknown job.
func (f *FSM) NextCheckpointID(jobID string) (uint64, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	rec, ok := f.st.jobs[jobID]
	if !ok {
		return 0, false
	}
	return nextCheckpointID(rec.Checkpoints), true
}

// PendingCheckpoints returns copies of a job's pending checkpoints, oldest first.
func (f *FSM) PendingCheckpoints(jobID string) []*pb.CheckpointRecord {
	f.mu.RLock()
	defer f.mu.RUnlock()
	pending := f.st.jobs[jobID].GetCheckpoints().GetPending()
	out := make([]*pb.CheckpointRecord, len(pending))
	for i, ck := range pending {
		out[i] = proto.CloneOf(ck)
	}
	return out
}

// LatestCompletedCheckpoint returns a copy of a job's newest completed checkpoint, with the
// acknowledgement of every subtask (FindCheckpointAck: its state path), and false when it has
// none.
func (f *FSM) LatestCompletedCheckpoint(jobID string) (*pb.CheckpointRecord, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	completed := f.st.jobs[jobID].GetCheckpoints().GetCompleted()
	if len(completed) == 0 {
		return nil, false
	}
	return proto.CloneOf(completed[len(completed)-1]), true
}
