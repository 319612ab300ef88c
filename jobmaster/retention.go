package jobmaster

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// maxRemovePerCommand bounds the job ids in one REMOVE_JOBS entry (about 34 KB); more are
// removed over the following rounds.
const maxRemovePerCommand = 1000

// terminalJob is what the retention needs to know of a terminal job.
type terminalJob struct {
	id      string
	endedAt int64 // unix milliseconds of its terminal status change
	create  uint64
}

// expiredJobs chooses the terminal jobs to remove at now (unix milliseconds): every job that
// ended more than age ago, and, of the others, every one older than the newest keep. Oldest
// first, at most limit ids. Pure, so the policy is tested on its own.
func expiredJobs(jobs []terminalJob, nowMs int64, keep int, age time.Duration, limit int) []string {
	jobs = slices.Clone(jobs)
	// Newest first: by end time, then by creation (the later submission is the newer job).
	slices.SortFunc(jobs, func(a, b terminalJob) int {
		if c := cmp.Compare(b.endedAt, a.endedAt); c != 0 {
			return c
		}
		return cmp.Compare(b.create, a.create)
	})
	cutoff := nowMs - age.Milliseconds()
	var out []string
	for i := len(jobs) - 1; i >= 0 && len(out) < limit; i-- {
		if i >= keep || jobs[i].endedAt < cutoff {
			out = append(out, jobs[i].id)
		}
	}
	return out
}

// terminalJobs lists the committed terminal jobs without copying their records.
func (t *term) terminalJobs() []terminalJob {
	var out []terminalJob
	for _, id := range t.jm.state.JobIDs() {
		t.jm.state.WithJob(id, func(rec *pb.JobRecord) {
			if !graph.IsGloballyTerminal(rec.Status) {
				return
			}
			tj := terminalJob{id: id, endedAt: rec.SubmittedAt, create: rec.CreateIndex}
			if h := rec.History; len(h) > 0 {
				tj.endedAt = h[len(h)-1].Timestamp // a terminal status has no later change
			}
			out = append(out, tj)
		})
	}
	return out
}

// retain is the term's retention loop: every RetentionInterval it commits the removal of the
// terminal jobs past the retention. It runs while the gate is open and stops with the term.
func (t *term) retain() {
	tick := time.NewTicker(t.jm.cfg.RetentionInterval)
	defer tick.Stop()
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-tick.C:
			t.removeExpired()
			t.retainArtifacts()
		}
	}
}

// removeExpired commits one REMOVE_JOBS for the terminal jobs past the retention, if any. Only
// terminal jobs are proposed, and a terminal job never changes again, so the command can only be
// refused if the leadership moved meanwhile; the next round (of this or the next leader)
// decides again from the committed state.
func (t *term) removeExpired() {
	cfg := t.jm.cfg
	ids := expiredJobs(t.terminalJobs(), nowMillis(), cfg.RetainJobs, cfg.RetainJobAge, maxRemovePerCommand)
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(t.ctx, cfg.RPCTimeout)
	defer cancel()
	if _, err := t.jm.Commit(ctx, pb.CommandType_COMMAND_TYPE_REMOVE_JOBS, &pb.RemoveJobsCommand{JobIds: ids, Timestamp: nowMillis()}); err != nil {
		t.jm.log.Warn("terminal jobs not removed", "jobs", len(ids), "error", err)
		return
	}
	if store := cfg.Checkpoints; store != nil {
		for _, id := range ids {
			if err := store.DeleteJob(id); err != nil {
				t.jm.log.Warn("checkpoints of a removed job not deleted", "job", id, "error", err)
			}
		}
	}
	t.jm.log.Info("removed terminal jobs past the retention", "jobs", len(ids), "retain_jobs", cfg.RetainJobs, "retain_job_age", cfg.RetainJobAge)
}
