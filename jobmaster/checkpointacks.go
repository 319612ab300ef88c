package jobmaster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/internal/failpoint"
	"github.com/jmcluster/jmcluster/internal/logsum"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// AcknowledgeCheckpoint and DeclineCheckpoint (JobMasterService), gated like state updates.
// Acknowledgements are checked against the committed graph (each from the current attempt of
// a subtask assigned to the calling TM), queued, and committed per checkpoint in one
// ACK_CHECKPOINT for everything that arrived together; once the FSM holds every subtask's,
// the checkpoint is completed.

// checkTMCall checks the identity of a TM's checkpoint call as a heartbeat's is checked: the
// TM must not have seen a newer epoch, and must be the registered process.
func (jm *JobMaster) checkTMCall(t *term, what, tmID string, epochSeen uint64, incarnation, jobID string, id uint64) error {
	if tmID == "" || jobID == "" || id == 0 {
		return errorf(ErrInvalidRequest, "%s: tm_id, job_id and checkpoint_id are required", what)
	}
	if err := t.watch.answersTaskManagers(time.Now()); err != nil {
		return err
	}
	if epochSeen > t.epoch {
		if tm, ok := jm.tms.Get(tmID); ok {
			jm.witnessEpoch(tm.GRPCAddr)
		}
		return &StaleEpochError{Current: t.epoch, Seen: epochSeen}
	}
	if tm, ok := jm.tms.Get(tmID); ok && incarnation != "" && tm.Incarnation != "" && tm.Incarnation != incarnation {
		return fmt.Errorf("%w: %s: TaskManager %s incarnation %s, the registered one is %s", ErrReplacedIncarnation, what, tmID, incarnation, tm.Incarnation)
	}
	return nil
}

// AcknowledgeCheckpoint records a TM's tasks' acknowledgements of a checkpoint. Accepted false
// (with the reason) when the checkpoint is no longer pending or an acknowledgement is from an
// attempt that is not current; the acknowledgements of current attempts are recorded anyway.
func (jm *JobMaster) AcknowledgeCheckpoint(ctx context.Context, req *pb.AcknowledgeCheckpointRequest) (*pb.AcknowledgeCheckpointResponse, error) {
	t, err := jm.openTerm()
	if err != nil {
		return nil, err
	}
	what := fmt.Sprintf("acknowledge checkpoint %d of job %s", req.CheckpointId, req.JobId)
	if err := jm.checkTMCall(t, what, req.TmId, req.EpochSeen, req.Incarnation, req.JobId, req.CheckpointId); err != nil {
		return nil, err
	}
	if len(req.Acks) == 0 {
		return nil, errorf(ErrInvalidRequest, "%s: no acks", what)
	}
	fresh, refused, ended, err := jm.checkAcks(req)
	if err != nil {
		return nil, err
	}
	if ended != "" {
		return &pb.AcknowledgeCheckpointResponse{Accepted: false, Reason: ended}, nil
	}
	if len(fresh) > 0 {
		if err := t.ckpt.ack(ctx, req.JobId, req.CheckpointId, fresh); err != nil {
			switch {
			case notPending(err):
				return &pb.AcknowledgeCheckpointResponse{Accepted: false, Reason: err.Error()}, nil
			case errors.Is(err, fsm.ErrStaleCheckpointAck), errors.Is(err, fsm.ErrJobNotRunning), errors.Is(err, fsm.ErrInvalidCommand):
				refused = append(refused, err.Error())
			case errors.Is(ctx.Err(), context.Canceled) || !jm.Active():
				return nil, ErrNotLeader
			case errors.Is(err, ErrCheckpointLevel):
				return nil, err // UNAVAILABLE: the TM retries
			default:
				return nil, fmt.Errorf("%s: %w", what, err)
			}
		}
	} else {
		// Every acknowledgement was recorded already (a retry): the checkpoint may be complete.
		t.ckpt.maybeComplete(req.JobId, req.CheckpointId)
	}
	if len(refused) > 0 {
		return &pb.AcknowledgeCheckpointResponse{Accepted: false, Reason: logsum.Joined(refused, "; ")}, nil
	}
	return &pb.AcknowledgeCheckpointResponse{Accepted: true}, nil
}

// checkAcks reads the committed record and sorts the acknowledgements (ackVerdicts).
func (jm *JobMaster) checkAcks(req *pb.AcknowledgeCheckpointRequest) (fresh []*pb.TaskCheckpointAck, refused []string, ended string, err error) {
	found := jm.state.WithJob(req.JobId, func(rec *pb.JobRecord) {
		fresh, refused, ended, err = ackVerdicts(rec, req)
	})
	if !found {
		return nil, nil, "", errorf(fsm.ErrUnknownJob, "unknown job %s", req.JobId)
	}
	return fresh, refused, ended, err
}

// DeclineCheckpoint aborts the checkpoint a task could not take: "declined by vertex[subtask]:
// reason".
func (jm *JobMaster) DeclineCheckpoint(ctx context.Context, req *pb.DeclineCheckpointRequest) (*pb.DeclineCheckpointResponse, error) {
	t, err := jm.openTerm()
	if err != nil {
		return nil, err
	}
	what := fmt.Sprintf("decline checkpoint %d of job %s", req.CheckpointId, req.JobId)
	if err := jm.checkTMCall(t, what, req.TmId, req.EpochSeen, req.Incarnation, req.JobId, req.CheckpointId); err != nil {
		return nil, err
	}
	var (
		current bool
		reason  string
	)
	if !jm.state.WithJob(req.JobId, func(rec *pb.JobRecord) { current, reason, err = declineVerdict(rec, req, what) }) {
		return nil, errorf(fsm.ErrUnknownJob, "unknown job %s", req.JobId)
	}
	if err != nil {
		return nil, err
	}
	if current {
		t.ckpt.abort(req.JobId, req.CheckpointId, reason)
	}
	return &pb.DeclineCheckpointResponse{}, nil
}

// ackReq is one call's acknowledgements waiting for their commit.
type ackReq struct {
	key   checkpointKey
	acks  []*pb.TaskCheckpointAck
	reply chan error
}

// ack queues acknowledgements and waits for their commit.
func (c *coordinator) ack(ctx context.Context, jobID string, id uint64, acks []*pb.TaskCheckpointAck) error {
	r := ackReq{key: checkpointKey{jobID, id}, acks: acks, reply: make(chan error, 1)}
	select {
	case c.acks <- r:
	case <-ctx.Done():
		return ctx.Err()
	case <-c.t.ctx.Done():
		return ErrNotLeader
	}
	select {
	case err := <-r.reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-c.t.ctx.Done():
		return ErrNotLeader
	}
}

// commitAcks is the acknowledgement queue's goroutine: whatever arrived together (up to
// MaxBatch acknowledgements) is committed in one ACK_CHECKPOINT per checkpoint, so a
// checkpoint of 1,024 tasks takes a few Raft round trips, not 1,024.
func (c *coordinator) commitAcks() {
	for {
		var batch []ackReq
		select {
		case <-c.t.ctx.Done():
			return
		case r := <-c.acks:
			batch = append(batch, r)
		}
		n := len(batch[0].acks)
	more:
		for n < c.t.jm.cfg.MaxBatch {
			select {
			case r := <-c.acks:
				batch = append(batch, r)
				n += len(r.acks)
			default:
				break more
			}
		}
		var order []checkpointKey
		groups := map[checkpointKey][]ackReq{}
		for _, r := range batch {
			if _, ok := groups[r.key]; !ok {
				order = append(order, r.key)
			}
			groups[r.key] = append(groups[r.key], r)
		}
		for _, k := range order {
			c.commitGroup(k, groups[k])
		}
	}
}

// commitGroup commits one checkpoint's queued acknowledgements together; when the command is
// refused, each call's are committed alone, so one bad call does not refuse the others.
func (c *coordinator) commitGroup(k checkpointKey, reqs []ackReq) {
	var all []*pb.TaskCheckpointAck
	for _, r := range reqs {
		all = append(all, r.acks...)
	}
	failpoint.Inject(c.t.ctx, failpoint.BeforeAckCheckpoint)
	res, err := c.commitAckCommand(k, all)
	if commitEachAlone(err, len(reqs)) {
		for _, r := range reqs {
			res1, err1 := c.commitAckCommand(k, r.acks)
			r.reply <- err1
			if err1 == nil {
				res = res1
			}
		}
	} else {
		for _, r := range reqs {
			r.reply <- err
		}
	}
	if res == nil {
		return
	}
	if r, ok := res.Value.(*pb.CheckpointCommandResult); ok && allAcknowledged(int(r.Acknowledged), int(r.Tasks)) {
		c.t.spawn(func() { c.complete(k.job, k.id) })
	}
}

func (c *coordinator) commitAckCommand(k checkpointKey, acks []*pb.TaskCheckpointAck) (*fsm.Result, error) {
	return c.commit(pb.CommandType_COMMAND_TYPE_ACK_CHECKPOINT, &pb.AckCheckpointCommand{JobId: k.job, CheckpointId: k.id, Acks: acks})
}

// maybeComplete completes a pending checkpoint the FSM holds every acknowledgement of.
func (c *coordinator) maybeComplete(jobID string, id uint64) {
	all := false
	c.t.jm.state.WithJob(jobID, func(rec *pb.JobRecord) { all = pendingAcknowledged(rec, id) })
	if all {
		c.t.spawn(func() { c.complete(jobID, id) })
	}
}
