package jobmaster

import (
	"context"
	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// Draining a TaskManager (`jmnode tm drain ID`) is replicated state (fsm: SET_DRAIN): a drained
// TM is given no new task (Placeable), and every pipelined region with a task still active on it
// is cancelled as a whole and deployed again on the other TMs (plan.go, runningSteps): only those
// regions, once, without counting against the restart strategy (a cancellation, not a failure).
// A region moves whole, its finished members too (a pipelined region restarts as one); a region
// whose members all finished has nothing active on the TM and stays. A new leader drains what
// the committed state says, so a drain in progress survives a failover.

// DrainResult is what a drain changed: the regions with an execution active on the TM when it
// was committed, and their executions (all of them get new attempts: a region moves whole).
type DrainResult struct {
	Executions int
	Regions    int
	Index      uint64
}

// Drain drains TaskManager tmID (drained) or ends its drain. Unless force is set it refuses a
// drain the other placeable TaskManagers have too few free slots to take over: the drained
// TM's regions would stop and wait for slots.
func (jm *JobMaster) Drain(ctx context.Context, tmID string, drained, force bool) (DrainResult, error) {
	t, err := jm.openTerm()
	if err != nil {
		return DrainResult{}, err
	}
	if tmID == "" {
		return DrainResult{}, errorf(ErrInvalidRequest, "drain: tm_id is required")
	}
	_, registered := jm.tms.Get(tmID)
	_, _, _, member := jm.state.PoolMember(tmID)
	_, wasDrained := jm.state.Drained()[tmID]
	if !registered && !member && !wasDrained {
		return DrainResult{}, errorf(ErrUnknownTaskManager, "%q is not a TaskManager this cluster knows (jmnode tm list)", tmID)
	}
	var res DrainResult
	if drained {
		res = t.onTM(tmID)
		if !force && !wasDrained {
			inUse := t.slotsInUse()
			free := 0
			for _, tm := range jm.Placeable() {
				if tm.ID != tmID {
					free += int(tm.Slots) - len(inUse[tm.ID])
				}
			}
			if used := len(inUse[tmID]); used > free {
				return res, errorf(ErrNoCapacity, "drain %s: its %d slots in use would not fit in the %d free on the other TaskManagers (--force drains anyway; its regions then wait for slots)", tmID, used, free)
			}
		}
	}
	r, err := jm.Commit(ctx, pb.CommandType_COMMAND_TYPE_SET_DRAIN, &pb.SetDrainCommand{TmId: tmID, Drained: drained, Timestamp: nowMillis()})
	if err != nil {
		return res, err
	}
	res.Index = r.Index
	jm.log.Info("drain", "tm", tmID, "drained", drained, "executions", res.Executions, "regions", res.Regions, "index", r.Index)
	t.kick("")
	return res, nil
}

// onTM counts the active executions on a TaskManager and the failover regions they belong to.
func (t *term) onTM(tmID string) DrainResult {
	var res DrainResult
	type member struct {
		vertex  string
		subtask int32
	}
	for _, id := range t.jm.state.JobIDs() {
		on := map[member]bool{}
		var jg *pb.JobGraph
		t.jm.state.WithJob(id, func(rec *pb.JobRecord) {
			jg = rec.JobGraph
			forEachExecution(rec, func(ev *pb.ExecutionVertex) {
				if e := ev.GetCurrent(); e != nil && !isTerminal(e.State) && e.GetSlot().GetTmId() == tmID {
					on[member{ev.VertexId, ev.SubtaskIndex}] = true
				}
			})
		})
		if len(on) == 0 {
			continue
		}
		regions, err := graph.FailoverRegions(jg)
		if err != nil {
			continue
		}
		for _, r := range regions {
			for _, m := range r.Members {
				if on[member{m.VertexID, m.Subtask}] {
					// The region moves whole: every member gets a new attempt.
					res.Regions++
					res.Executions += len(r.Members)
					break
				}
			}
		}
	}
	return res
}
