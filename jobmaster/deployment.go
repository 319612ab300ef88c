package jobmaster

import (
	"time"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// ackedRetention is how long the time a TM acknowledged a submission is kept: far longer than
// the grace it serves (one heartbeat interval), so stale entries of attempts whose TM went
// quiet are dropped on a tick.
const ackedRetention = time.Minute

// checkDeployment compares a TM's deployment report with the graph (Flink's
// ExecutionDeploymentReconciler): an attempt the graph does not place on this TM is cancelled
// there; an attempt the graph places there but the TM has not reported in two consecutive
// heartbeats is failed. A heartbeat only counts against an attempt whose submission the TM
// acknowledged at least one heartbeat interval before the heartbeat arrived: a report built
// before the TM took a batch (and delayed behind a slow call) does not show it yet. The graph's
// attempts on the TM come from the FSM's index of them (FSM.OnTaskManager): a heartbeat costs
// what the TM holds, not what every job holds.
//
// One heartbeat is checked at a time (checkMu): the check's set of attempts is the size of the
// TM's, and heartbeats of many large TaskManagers checked at once each held their own.
func (t *term) checkDeployment(req *pb.HeartbeatRequest) {
	arrived := time.Now()
	tm, ok := t.jm.tms.Get(req.TmId)
	if !ok {
		return
	}
	t.checkMu.Lock()
	defer t.checkMu.Unlock()
	// One set of the attempts the TM reported and the graph places there, by attempt id.
	const reportedBit, ownedBit = 1, 2
	marks := make(map[string]uint8, len(req.Deployed))
	for _, d := range req.Deployed {
		marks[d.AttemptId] |= reportedBit
	}
	// The graph's live attempts on this TM, from the FSM's index of them (no walk of the jobs).
	type placed struct{ jobID, attemptID string }
	running := make([]placed, 0, len(req.Deployed)) // as many as the TM reports, usually
	var where map[string]flowPlace                  // the RUNNING attempts, for the flow samples (flow.go)
	if req.FlowClockNs != 0 {
		where = map[string]flowPlace{}
	}
	t.jm.state.OnTaskManager(req.TmId, func(jobID string, ev *pb.ExecutionVertex) {
		e := ev.GetCurrent()
		marks[e.AttemptId] |= ownedBit
		switch e.State {
		case stDeploying, pb.ExecutionState_EXECUTION_STATE_INITIALIZING, stRunning:
			running = append(running, placed{jobID, e.AttemptId})
		}
		if where != nil && e.State == stRunning {
			where[e.AttemptId] = flowPlace{job: jobID, key: flowKey{vertex: ev.VertexId, subtask: ev.SubtaskIndex}}
		}
	})
	t.flow.observe(req.TmId, req.FlowClockNs, arrived, req.Deployed, where)
	for _, d := range req.Deployed {
		if marks[d.AttemptId]&ownedBit == 0 && !isTerminal(d.State) {
			t.jm.log.Info("cancelling attempt the graph does not own", "tm", req.TmId, "job", d.JobId, "attempt", d.AttemptId)
			t.cancelOnTM(tm.GRPCAddr, d.JobId, d.AttemptId)
		}
	}
	grace := t.jm.cfg.HeartbeatInterval
	var failed []*pb.ExecutionStateUpdate
	t.mu.Lock()
	for _, p := range running {
		id := p.attemptID
		if t.submitting[id] || marks[id]&reportedBit != 0 {
			delete(t.missing, id)
			delete(t.acked, id)
			continue
		}
		if at, ok := t.acked[id]; ok && at.After(arrived.Add(-grace)) {
			continue // acknowledged too recently for this report to show it
		}
		t.missing[id]++
		if t.missing[id] >= 2 {
			delete(t.missing, id)
			delete(t.acked, id)
			failed = append(failed, &pb.ExecutionStateUpdate{
				JobId: p.jobID, AttemptId: id, State: stFailed, Timestamp: nowMillis(),
				FailureCause: "attempt missing from the deployment report of " + req.TmId,
			})
		}
	}
	t.mu.Unlock()
	if len(failed) > 0 {
		t.jm.log.Warn("attempts missing on task manager", "tm", req.TmId, "count", len(failed))
		t.spawn(func() { t.batch.commit(t.ctx, failed) })
	}
}

// prune bounds what the term remembers per attempt: acknowledgement times and cancels sent
// older than ackedRetention are dropped (a cancel dropped is sent again if the attempt still
// needs one: a retry a minute later, harmless since CancelTask is idempotent), and
// missing-heartbeat counts of attempts that are no longer any job's current attempt (replaced,
// or their job removed). What is left is bounded by the graphs' size plus what one minute sends.
func (t *term) prune(now time.Time) {
	t.mu.Lock()
	for id, at := range t.acked {
		if now.Sub(at) > ackedRetention {
			delete(t.acked, id)
		}
	}
	for k, at := range t.cancelSent {
		if now.Sub(at) > ackedRetention {
			delete(t.cancelSent, k)
		}
	}
	// A Go map keeps its buckets when its entries are deleted: one that held every attempt of
	// a deployment (in flight, acknowledged) would keep that memory for the whole term. An
	// emptied one is replaced.
	t.acked, t.submitting = emptied(t.acked), emptied(t.submitting)
	t.cancelSent, t.missing = emptied(t.cancelSent), emptied(t.missing)
	ids := make([]string, 0, len(t.missing))
	for id := range t.missing {
		ids = append(ids, id)
	}
	t.mu.Unlock()
	// The committed state is read without t.mu held: checkDeployment takes t.mu inside
	// WithJob, so taking them in the other order could deadlock behind a waiting writer.
	var gone []string
	for _, id := range ids {
		if _, _, _, ok := t.jm.state.LocateAttempt(id); !ok {
			gone = append(gone, id)
		}
	}
	t.mu.Lock()
	for _, id := range gone {
		delete(t.missing, id)
	}
	t.mu.Unlock()
}

// emptied is m, or a new map when m is empty (and may hold the buckets of many deleted
// entries).
func emptied[K comparable, V any](m map[K]V) map[K]V {
	if len(m) == 0 {
		return map[K]V{}
	}
	return m
}
