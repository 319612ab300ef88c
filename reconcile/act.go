package reconcile

// After the commit: what the committed plan says is carried out (act, ack), and what the
// reports tell the checkpoint coordinator (sinkCommits, checkpointAcks).

import (
	"context"
	"sort"
	"sync"

	"github.com/jmcluster/jmcluster/jobmaster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// act carries out what the committed plan decided: mark TMs that did not report lost (their
// executions have failed; they get new work only after they register again), cancel attempts
// the graph does not own (through the term's own cancel path, which sends each once and does
// not wait) and acknowledge retained terminal states.
func (r *Reconciler) act(ctx context.Context, t jobmaster.Term, plan *Plan) {
	for _, id := range plan.MissingTMs {
		t.MarkLost(id)
	}
	for _, c := range plan.Cancels {
		r.log.Debug("cancelling an unowned attempt", "epoch", t.Epoch(), "tm", c.TMID, "attempt", c.AttemptID, "reason", c.Reason)
		t.Cancel(c.JobID, c.AttemptID, c.Addr)
	}
	// Acknowledgements are calls to every TM with retained terminal states; they go out after
	// the gate opens, a few at a time, so unreachable TMs do not keep it closed.
	if len(plan.Acks) > 0 {
		go r.ack(ctx, t, plan.Acks)
	}
}

// maxParallelAcks bounds the AcknowledgeTerminal calls in flight after a reconciliation.
const maxParallelAcks = 8

func (r *Reconciler) ack(ctx context.Context, t jobmaster.Term, acks map[string][]string) {
	addrs := make([]string, 0, len(acks))
	for addr := range acks {
		addrs = append(addrs, addr)
	}
	sort.Strings(addrs)
	sem := make(chan struct{}, maxParallelAcks)
	var wg sync.WaitGroup
	for _, addr := range addrs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := t.Ack(ctx, addr, acks[addr]); err != nil {
				r.log.Debug("acknowledge terminal states", "epoch", t.Epoch(), "tm", addr, "error", err)
			}
		}()
	}
	wg.Wait()
}

// restartAll turns a plan into "restart everything": every execution FAILED, every job
// FAILING, and nothing cancelled on the TMs (the old attempts keep running until heartbeats
// reveal them). Only for the fault suite's self-test (failpoint restart-on-failover).
func restartAll(plan *Plan) {
	for _, jp := range plan.Jobs {
		for _, re := range jp.Executions {
			if re.Execution.State != pb.ExecutionState_EXECUTION_STATE_FINISHED {
				re.Execution.State = pb.ExecutionState_EXECUTION_STATE_FAILED
				re.Execution.FailureCause = "failpoint restart-on-failover"
			}
		}
		if jp.Status == pb.JobStatus_JOB_STATUS_RUNNING {
			jp.Status, jp.Cause = pb.JobStatus_JOB_STATUS_FAILING, "failpoint restart-on-failover"
		}
	}
	plan.Cancels = nil
	plan.Acks = map[string][]string{}
}

// sinkCommits is what the reports say of the sinks that commit their output with completed
// checkpoints: which TMs listed their executions, and per job and TM the oldest checkpoint one
// of its committing sinks committed.
func sinkCommits(reports map[string]*Report) jobmaster.SinkCommits {
	c := jobmaster.SinkCommits{Listed: map[string]bool{}, Lowest: map[string]map[string]uint64{}}
	for _, rep := range reports {
		if rep == nil || rep.asExpected() || rep.Addr == "" {
			continue
		}
		c.Listed[rep.Addr] = true
		for _, ex := range rep.Executions {
			if !ex.CommitsOutput {
				continue
			}
			byTM := c.Lowest[ex.JobId]
			if byTM == nil {
				byTM = map[string]uint64{}
				c.Lowest[ex.JobId] = byTM
			}
			if low, ok := byTM[rep.Addr]; !ok || ex.CommittedCheckpointId < low {
				byTM[rep.Addr] = ex.CommittedCheckpointId
			}
		}
	}
	return c
}

// checkpointAcks lists the latest checkpoint acknowledgement of every reported execution that
// has one.
func checkpointAcks(reports map[string]*Report) []jobmaster.ReportedCheckpointAck {
	var out []jobmaster.ReportedCheckpointAck
	for _, rep := range reports {
		for _, ex := range rep.Executions {
			if ex.LatestAckedCheckpointId != 0 && ex.LatestCheckpointAck != nil {
				out = append(out, jobmaster.ReportedCheckpointAck{JobID: ex.JobId, AttemptID: ex.AttemptId, CheckpointID: ex.LatestAckedCheckpointId, Ack: ex.LatestCheckpointAck})
			}
		}
	}
	return out
}
