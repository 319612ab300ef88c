package graph

import (
	"slices"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// MaxStateTimestamps bounds Execution.state_timestamps: the first change (when the attempt was
// created) and the latest MaxStateTimestamps-1. Every failover adds two (RECONCILING and the
// reconciled state) to every execution, and ReconcileJob carries the list of each, so without
// a bound a long-running job's record and every reconciliation grew with the failovers.
const MaxStateTimestamps = 16

// AddStateTimestamp appends a state change to the execution's timestamps, dropping the oldest
// but the first past MaxStateTimestamps.
func AddStateTimestamp(ex *pb.Execution, st pb.ExecutionState, ts int64) {
	AppendStateTimestamp(ex, &pb.StateTimestamp{State: st, Timestamp: ts})
}

// AppendStateTimestamp appends t to the execution's timestamps as AddStateTimestamp does. The
// list is grown to its new length exactly, not doubled: an execution passes through a few
// states in its life (five to RUNNING), and a list with room to spare would be kept for the
// execution's life by every replica, for each of the job's executions. t is shared, not
// copied: the FSM passes one StateTimestamp to every execution that changed state in the same
// way at the same time, and never changes one in place.
func AppendStateTimestamp(ex *pb.Execution, t *pb.StateTimestamp) {
	old := ex.StateTimestamps
	drop := max(0, len(old)+1-MaxStateTimestamps) // the oldest but the first
	grown := make([]*pb.StateTimestamp, 0, len(old)+1-drop)
	if drop > 0 {
		grown = append(grown, old[0])
		old = old[1+drop:]
	}
	grown = append(grown, old...)
	ex.StateTimestamps = append(grown, t)
}

// BoundStateTimestamps drops the oldest timestamps but the first past MaxStateTimestamps.
func BoundStateTimestamps(ex *pb.Execution) {
	if n := len(ex.StateTimestamps) - MaxStateTimestamps; n > 0 {
		ex.StateTimestamps = slices.Delete(ex.StateTimestamps, 1, 1+n)
	}
}
