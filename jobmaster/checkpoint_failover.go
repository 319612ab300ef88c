package jobmaster

import (
	"fmt"
	"slices"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// What a new term's coordinator does before its first trigger, from what the reconciliation
// reports carried (NoteCheckpointReports): resolve the pending checkpoints of earlier epochs
// (resolution), announce the latest completed checkpoints again where a sink may have missed
// them (announceTargets), and delete the directories the record no longer names
// (leftoverCheckpoints). And, at any time, the aborts for a lost TaskManager.

// ReportedCheckpointAck is a task's latest acknowledgement as a reconciliation report carried
// it (ExecutionReport.latest_acked_checkpoint_id and latest_checkpoint_ack), with the attempt
// that reported it.
type ReportedCheckpointAck struct {
	JobID        string
	AttemptID    string
	CheckpointID uint64
	Ack          *pb.TaskCheckpointAck
}

// SinkCommits is what the reconciliation reports said of the sinks that commit their output
// with completed checkpoints (ExecutionReport.commits_output and committed_checkpoint_id).
type SinkCommits struct {
	// Listed: the TMs (gRPC addresses) whose reports listed their executions; an as-expected
	// answer lists none, so it says nothing of its sinks' commits.
	Listed map[string]bool
	// Lowest: job -> TM address -> the oldest checkpoint any of the job's committing sinks on
	// that TM committed (0: one has committed none).
	Lowest map[string]map[string]uint64
}

// NoteCheckpointReports hands the coordinator the acknowledgements and the sinks' commits the
// reconciliation reports carried (reconcile calls it before the gate opens).
func (t *term) NoteCheckpointReports(acks []ReportedCheckpointAck, commits SinkCommits) {
	t.ckpt.mu.Lock()
	defer t.ckpt.mu.Unlock()
	t.ckpt.reported = append(t.ckpt.reported, acks...)
	t.ckpt.commits = commits
}

// notifyLatest tells the TMs of every job of its latest completed checkpoint again
// (latestToAnnounce) where the reconciliation reports do not show that every sink committed
// it (announceTargets); a notify is idempotent.
func (c *coordinator) notifyLatest() {
	c.mu.Lock()
	commits := c.commits
	c.commits = SinkCommits{}
	c.mu.Unlock()
	for _, jobID := range c.t.jm.state.JobIDs() {
		var (
			latest uint64
			ok     bool
			addrs  []string
		)
		c.t.jm.state.WithJob(jobID, func(rec *pb.JobRecord) {
			if latest, ok = latestToAnnounce(rec); ok {
				addrs = viewOf(rec, false).addrs
			}
		})
		if !ok {
			continue
		}
		targets := announceTargets(jobID, latest, addrs, commits)
		c.t.jm.log.Info("announcing the latest completed checkpoint again", "job", jobID, "checkpoint", latest,
			"tms", len(targets), "of", len(addrs))
		if len(targets) > 0 {
			c.notifyCompleteTo(jobID, latest, targets)
		}
	}
}

// resolve ends the checkpoints earlier epochs left pending (earlierEpochs), newest first: one
// whose every subtask acknowledged (in the FSM, or in the reconciliation reports) is
// completed, which subsumes the older ones; any other is aborted.
func (c *coordinator) resolve() {
	c.mu.Lock()
	reported := c.reported
	c.reported = nil
	c.mu.Unlock()
	byJob := map[string][]ReportedCheckpointAck{}
	for _, r := range reported {
		byJob[r.JobID] = append(byJob[r.JobID], r)
	}
	for _, jobID := range c.t.jm.state.JobIDs() {
		for _, ck := range earlierEpochs(c.t.jm.state.PendingCheckpoints(jobID), c.t.epoch) {
			if c.t.ctx.Err() != nil {
				break
			}
			if !slices.ContainsFunc(c.t.jm.state.PendingCheckpoints(jobID), func(p *pb.CheckpointRecord) bool { return p.Id == ck.Id }) {
				continue // subsumed by a newer one that completed
			}
			c.resolveOne(jobID, ck, byJob[jobID])
		}
	}
}

// resolveOne carries out resolution for one pending checkpoint of an earlier epoch: commit the
// reported acknowledgements the record lacks, then complete it; or abort it.
func (c *coordinator) resolveOne(jobID string, ck *pb.CheckpointRecord, reported []ReportedCheckpointAck) {
	var (
		missing []*pb.TaskCheckpointAck
		reason  string
	)
	c.t.jm.state.WithJob(jobID, func(rec *pb.JobRecord) { missing, reason = resolution(rec, ck, reported) })
	if reason != "" {
		c.abort(jobID, ck.Id, reason)
		return
	}
	for len(missing) > 0 {
		n := min(len(missing), c.t.jm.cfg.MaxBatch)
		if _, err := c.commit(pb.CommandType_COMMAND_TYPE_ACK_CHECKPOINT, &pb.AckCheckpointCommand{
			JobId: jobID, CheckpointId: ck.Id, Acks: missing[:n],
		}); err != nil {
			if !notPending(err) {
				c.abort(jobID, ck.Id, fmt.Sprintf("%s: the reported acknowledgements were refused: %v", reasonLeaderChanged, err))
			}
			return
		}
		missing = missing[n:]
	}
	c.t.jm.log.Info("checkpoint of an earlier epoch acknowledged by every task; completing it", "job", jobID, "checkpoint", ck.Id, "epoch", ck.Epoch)
	c.complete(jobID, ck.Id)
}

const stReconcilingJob = pb.JobStatus_JOB_STATUS_RECONCILING

// abortForLostTM aborts the pending checkpoints of every job with a current attempt on the TM
// (checkpointsOnTM; a lost TaskManager), before its attempts are failed.
func (c *coordinator) abortForLostTM(tmID, cause string) {
	for _, jobID := range c.t.jm.state.JobIDs() {
		var ids []uint64
		c.t.jm.state.WithJob(jobID, func(rec *pb.JobRecord) { ids = checkpointsOnTM(rec, tmID) })
		for _, id := range ids {
			c.abort(jobID, id, cause)
		}
	}
}

// deleteLeftovers deletes the checkpoint directories the record no longer names
// (leftoverCheckpoints), once per term, before this term triggers anything.
func (c *coordinator) deleteLeftovers() {
	store := c.t.jm.cfg.Checkpoints
	if store == nil {
		return
	}
	for _, jobID := range c.t.jm.state.JobIDs() {
		cp, ok := c.t.jm.state.Checkpoints(jobID)
		if !ok || cp == nil {
			continue
		}
		stored, err := store.Checkpoints(jobID)
		if err != nil {
			c.t.jm.log.Warn("checkpoint directories not listed", "job", jobID, "error", err)
			continue
		}
		for _, id := range leftoverCheckpoints(cp, stored) {
			if err := store.Delete(jobID, id); err != nil {
				c.t.jm.log.Warn("leftover checkpoint not deleted", "job", jobID, "checkpoint", id, "error", err)
				continue
			}
			c.t.jm.log.Info("leftover checkpoint deleted", "job", jobID, "checkpoint", id)
		}
	}
}
