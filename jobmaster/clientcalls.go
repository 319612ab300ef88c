package jobmaster

import (
	"context"
	"fmt"

	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// The client writes (ClientService's SubmitJob and CancelJob), as plain methods: the gRPC
// handlers are in jmserver, whose policy table forwards them to the established
// leader and refuses them while the gate is closed.

// SubmitJob validates and commits a job on the established leader, its dead-letter output
// expanded into a vertex (graph.ExpandDeadLetters); the scheduler deploys it.
// A job whose expanded size is over the configured limits, or whose checkpoint config is out
// of range, is refused before anything is committed (a *graph.SizeError naming each limit, a
// *graph.ValidationError naming each checkpoint_config field).
func (jm *JobMaster) SubmitJob(ctx context.Context, jg *pb.JobGraph) (string, uint64, error) {
	t, err := jm.openTerm()
	if err != nil {
		return "", 0, err
	}
	if jg != nil && jg.JobId == "" {
		jg.JobId = NewJobID()
	}
	// The dead-letter output becomes an ordinary vertex before anything else sees the job:
	// the committed graph, the ExecutionGraph, its regions and every view have it.
	jg = graph.ExpandDeadLetters(jg)
	if err := graph.Validate(jg, graph.DefaultLimits()); err != nil {
		return "", 0, err
	}
	// Checked here, not by SUBMIT_JOB's applier, which keeps the meaning it had before
	// checkpoints (replicas trigger no checkpoint of a job whose config is out of range).
	if err := graph.ValidateCheckpointConfig(jg.GetCheckpointConfig()); err != nil {
		return "", 0, err
	}
	if _, on := graph.Checkpointing(jg.GetCheckpointConfig()); on && jm.cfg.Checkpoints == nil {
		return "", 0, errorf(ErrNoCheckpointStorage, "job %q is checkpointed (checkpoint_config.interval_ms %d), but this JobMaster has no checkpoint storage: start every JobMaster and TaskManager with --checkpoint-dir (docs/checkpoints.md)",
			jg.JobId, jg.GetCheckpointConfig().GetIntervalMs())
	}
	if err := graph.CheckSize(jg, jm.cfg.SizeLimits); err != nil {
		return "", 0, err
	}
	if len(fsm.JobArtifacts(jg)) > 0 {
		jm.artifactMu.Lock() // until committed: no removal of this leader in between
		defer jm.artifactMu.Unlock()
		if err := jm.checkArtifacts(jg); err != nil {
			return "", 0, err
		}
		if err := jm.checkModules(jg); err != nil {
			return "", 0, err
		}
	}
	res, err := jm.Commit(ctx, pb.CommandType_COMMAND_TYPE_SUBMIT_JOB, &pb.SubmitJobCommand{JobGraph: jg, Timestamp: nowMillis()})
	if err != nil {
		return "", 0, err
	}
	t.kick(jg.JobId)
	return jg.JobId, res.Index, nil
}

// CancelJob commits the cancellation; the scheduler then cancels the tasks.
func (jm *JobMaster) CancelJob(ctx context.Context, jobID string) (pb.JobStatus, error) {
	t, err := jm.openTerm()
	if err != nil {
		return 0, err
	}
	if _, err := jm.Commit(ctx, pb.CommandType_COMMAND_TYPE_CANCEL_JOB, &pb.CancelJobCommand{JobId: jobID, Timestamp: nowMillis()}); err != nil {
		return 0, err
	}
	t.kick(jobID)
	var st pb.JobStatus
	if !jm.state.WithJob(jobID, func(rec *pb.JobRecord) { st = rec.Status }) {
		return 0, fmt.Errorf("job %s vanished", jobID)
	}
	return st, nil
}
