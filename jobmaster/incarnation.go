package jobmaster

import (
	"github.com/jmcluster/jmcluster/transport/pb"
)

// A TaskManager process has an incarnation (a random id chosen at its start). A registration
// with a new incarnation is proof that the earlier process is gone: the registry forgets what it
// knew of it (Registry.Register) and the attempts it held are failed at once, so their regions
// restart without waiting for a heartbeat timeout or gossip, and the new process gets slots
// immediately.

// attemptsOn lists a FAILED update, with cause, for every non-terminal current attempt placed
// on the TaskManager.
func (t *term) attemptsOn(tmID, cause string) []*pb.ExecutionStateUpdate {
	var updates []*pb.ExecutionStateUpdate
	for _, jobID := range t.jm.state.JobIDs() {
		t.jm.state.WithJob(jobID, func(rec *pb.JobRecord) {
			forEachExecution(rec, func(ev *pb.ExecutionVertex) {
				e := ev.GetCurrent()
				if e == nil || isTerminal(e.State) || e.GetSlot().GetTmId() != tmID {
					return
				}
				updates = append(updates, &pb.ExecutionStateUpdate{
					JobId: jobID, AttemptId: e.AttemptId, State: pb.ExecutionState_EXECUTION_STATE_FAILED,
					FailureCause: cause, Timestamp: nowMillis(),
				})
			})
		})
	}
	return updates
}

// failAttempts commits the updates in the background of the term.
func (t *term) failAttempts(updates []*pb.ExecutionStateUpdate) {
	if len(updates) == 0 {
		return
	}
	t.jm.log.Warn("failing the attempts of a TaskManager that is gone", "attempts", len(updates), "cause", updates[0].FailureCause)
	t.spawn(func() { t.batch.commit(t.ctx, updates) })
}
