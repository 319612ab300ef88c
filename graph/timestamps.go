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
	ex.StateTimestamps = append(ex.StateTimestamps, &pb.StateTimestamp{State: st, Timestamp: ts})
	BoundStateTimestamps(ex)
}

// BoundStateTimestamps drops the oldest timestamps but the first past MaxStateTimestamps.
func BoundStateTimestamps(ex *pb.Execution) {
	if n := len(ex.StateTimestamps) - MaxStateTimestamps; n > 0 {
		ex.StateTimestamps = slices.Delete(ex.StateTimestamps, 1, 1+n)
	}
}
