package taskmanager

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jmcluster/jmcluster/checkpoint"
	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/internal/failpoint"
	"github.com/jmcluster/jmcluster/operator"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// The TaskManager's side of checkpoints (docs/checkpoints.md): the leader's TriggerCheckpoint
// marks source tasks to inject a barrier (barrier.go); each task's state is written to the
// checkpoint storage off the task's goroutine and acknowledged through the outbox, FIFO behind
// the task's state updates and retried to whichever JobMaster leads; a task restored from a
// checkpoint reads its state before it starts.

// restoreState reads the state t's descriptor restores from, or nil when it starts afresh.
func (tm *TaskManager) restoreState(t *task) ([]byte, error) {
	d := t.tdd
	id, from := d.GetRestoreCheckpointId(), d.GetRestoreFrom()
	if id == 0 {
		return nil, nil
	}
	if tm.ckpt == nil {
		return nil, fmt.Errorf("restore from checkpoint %d: %s has no checkpoint storage (--checkpoint-dir)", id, tm.cfg.ID)
	}
	var b []byte
	var err error
	if failpoint.Enabled(failpoint.RestoreUnverified) {
		b, err = tm.ckpt.ReadUnverified(from.GetStatePath()) // the planted bug: no checksum
	} else {
		b, err = tm.ckpt.ReadChecksum(from.GetStatePath(), from.GetChecksum())
	}
	if err != nil {
		// A state the store refuses (missing, truncated, corrupt, another checksum) is a
		// RestoreError: the leader reads the checkpoint and the file back from the failure
		// cause and restores the region from an older checkpoint.
		return nil, fmt.Errorf("restore: %w", checkpoint.AsRestoreError(err, id, d.GetVertexId(), d.GetSubtaskIndex(), from.GetAttemptNumber()))
	}
	return b, nil
}

// newerState returns, for a sink restored from a checkpoint, the newest intact state of its
// subtask in a later checkpoint directory (checkpoint.Store.NewerState), or nil: after its
// region fell back past a damaged checkpoint, the output the sink committed may be ahead of
// the state it restored, and a sink whose committed output is cumulative holds its commits
// until its document covers that state (docs/checkpoints.md, "A damaged checkpoint").
func (tm *TaskManager) newerState(t *task) []byte {
	d := t.tdd
	id := d.GetRestoreCheckpointId()
	if id == 0 || tm.ckpt == nil || graph.OperatorRoleOf(d.GetOperator()) != graph.RoleSink {
		return nil
	}
	b, newer, err := tm.ckpt.NewerState(d.GetJobId(), id, d.GetVertexId(), d.GetSubtaskIndex())
	if err != nil || b == nil {
		return nil
	}
	tm.log.Info("a sink restored from a checkpoint older than a state of its own", "job", d.GetJobId(), "vertex", d.GetVertexId(),
		"subtask", d.GetSubtaskIndex(), "restored", id, "newer", newer)
	return b
}

// persistCheckpoint queues t's state for checkpoint id to the TaskManager's state writer
// (statewriter.go), which writes it to the checkpoint storage and acknowledges it once it is
// durable: the task goes on with the records after the barrier meanwhile (the state was taken
// before). A failure to write declines the checkpoint. The acknowledgement carries the
// barrier alignment's duration.
func (tm *TaskManager) persistCheckpoint(t *task, id uint64, state []byte, alignment time.Duration) {
	if tm.ckpt == nil {
		tm.declineCheckpoint(t, id, "no checkpoint storage (--checkpoint-dir)")
		return
	}
	tm.states.enqueue(queuedState{t: t, id: id, state: state, alignment: alignment})
}

// declineCheckpoint tells the leader that t cannot take part in checkpoint id.
func (tm *TaskManager) declineCheckpoint(t *task, id uint64, cause string) {
	d := t.tdd
	tm.log.Warn("declining a checkpoint", "job", d.GetJobId(), "vertex", d.GetVertexId(), "subtask", d.GetSubtaskIndex(),
		"checkpoint", id, "cause", cause)
	tm.outbox.enqueueDecline(d, id, cause)
}

// TriggerCheckpoint marks the named source tasks of a job to inject checkpoint id's barrier
// in front of their next record; attempts this TM does not run (or that are not RUNNING
// sources of the job) are returned.
func (s *controlService) TriggerCheckpoint(ctx context.Context, req *pb.TriggerCheckpointRequest) (*pb.TriggerCheckpointResponse, error) {
	tm := s.tm
	var invalid error
	if req.GetJobId() == "" || req.GetCheckpointId() == 0 {
		invalid = fmt.Errorf("job_id and checkpoint_id are required")
	}
	if err := tm.fence.admit(ctx, req.GetEpoch(), "TriggerCheckpoint", invalid, false); err != nil {
		return nil, Status(err)
	}
	tm.mu.Lock()
	defer tm.mu.Unlock()
	if _, err := tm.fence.accept(req.GetEpoch(), "TriggerCheckpoint"); err != nil {
		return nil, Status(err)
	}
	resp := &pb.TriggerCheckpointResponse{}
	for _, a := range req.GetAttemptIds() {
		t := tm.table.tasks[a]
		if t == nil || t.tdd.GetJobId() != req.GetJobId() || t.state != pb.ExecutionState_EXECUTION_STATE_RUNNING || graph.OperatorRoleOf(t.tdd.GetOperator()) != graph.RoleSource {
			resp.NotRunning = append(resp.NotRunning, a)
			continue
		}
		for {
			cur := t.inject.Load()
			if cur >= req.GetCheckpointId() || t.inject.CompareAndSwap(cur, req.GetCheckpointId()) {
				break
			}
		}
	}
	return resp, nil
}

// NotifyCheckpointComplete: a checkpoint of the job completed: the job's sinks on this TM
// commit the output they staged up to it (idempotent: a repeated or older announcement
// changes nothing). A sink whose commit fails fails its task, so that its region restarts
// from the checkpoint and commits it again.
func (s *controlService) NotifyCheckpointComplete(ctx context.Context, req *pb.NotifyCheckpointCompleteRequest) (*pb.NotifyCheckpointCompleteResponse, error) {
	tm := s.tm
	if err := s.checkNotify(ctx, req.GetEpoch(), req.GetJobId(), req.GetCheckpointId(), "NotifyCheckpointComplete"); err != nil {
		return nil, Status(err)
	}
	type commit struct {
		t *task
		c operator.Committer
	}
	var commits []commit
	tm.mu.Lock()
	for _, t := range tm.table.tasks {
		if t.committer != nil && t.tdd.GetJobId() == req.GetJobId() && !isTerminal(t.state) {
			commits = append(commits, commit{t, t.committer})
		}
	}
	tm.mu.Unlock()
	for _, c := range commits {
		if err := c.c.CommitCheckpoint(req.GetCheckpointId()); err != nil {
			d := c.t.tdd
			if errors.Is(err, operator.ErrSinkClosed) {
				continue // the task ended meanwhile: its restored attempt commits the checkpoint
			}
			tm.log.Error("commit of a completed checkpoint failed", "job", d.GetJobId(), "vertex", d.GetVertexId(),
				"subtask", d.GetSubtaskIndex(), "checkpoint", req.GetCheckpointId(), "error", err)
			_ = tm.FailTask(d.GetAttemptId(), fmt.Sprintf("commit its output of checkpoint %d: %v", req.GetCheckpointId(), err))
		}
	}
	tm.log.Debug("checkpoint completed", "job", req.GetJobId(), "checkpoint", req.GetCheckpointId(), "sinks", len(commits))
	return &pb.NotifyCheckpointCompleteResponse{}, nil
}

// NotifyCheckpointAborted: a checkpoint of the job was aborted; its state files are the
// leader's to delete.
func (s *controlService) NotifyCheckpointAborted(ctx context.Context, req *pb.NotifyCheckpointAbortedRequest) (*pb.NotifyCheckpointAbortedResponse, error) {
	if err := s.checkNotify(ctx, req.GetEpoch(), req.GetJobId(), req.GetCheckpointId(), "NotifyCheckpointAborted"); err != nil {
		return nil, Status(err)
	}
	s.tm.log.Debug("checkpoint aborted", "job", req.GetJobId(), "checkpoint", req.GetCheckpointId(), "reason", req.GetReason())
	return &pb.NotifyCheckpointAbortedResponse{}, nil
}

func (s *controlService) checkNotify(ctx context.Context, epoch uint64, job string, id uint64, call string) error {
	var invalid error
	if job == "" || id == 0 {
		invalid = fmt.Errorf("job_id and checkpoint_id are required")
	}
	return s.tm.fence.admit(ctx, epoch, call, invalid, false)
}
