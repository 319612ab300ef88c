package fsm

import (
	"fmt"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// wrapf returns an error that wraps sentinel with a formatted context.
func wrapf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), sentinel)
}

func stateName(s pb.ExecutionState) string { return graph.ExecutionStateName(s) }

func statusName(s pb.JobStatus) string { return graph.JobStatusName(s) }
