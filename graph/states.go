package graph

import (
	"fmt"
	"strings"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// The ExecutionState table follows Flink's ExecutionState, plus RECONCILING: every state that
// is not terminal may enter RECONCILING when a new leader takes over, and RECONCILING leaves
// for the state a TaskManager reports. SCHEDULED is the exception: the write-ahead rule
// (DEPLOYING is committed before SubmitTask is sent) proves a SCHEDULED attempt was never
// submitted, so there is nothing to reconcile; it stays SCHEDULED and the new leader deploys
// it (no restart is counted).
var executionTransitions = map[pb.ExecutionState][]pb.ExecutionState{
	pb.ExecutionState_EXECUTION_STATE_CREATED: {
		pb.ExecutionState_EXECUTION_STATE_SCHEDULED,
		pb.ExecutionState_EXECUTION_STATE_CANCELED,
		pb.ExecutionState_EXECUTION_STATE_FAILED,
		pb.ExecutionState_EXECUTION_STATE_RECONCILING,
	},
	pb.ExecutionState_EXECUTION_STATE_SCHEDULED: {
		pb.ExecutionState_EXECUTION_STATE_DEPLOYING,
		pb.ExecutionState_EXECUTION_STATE_CANCELING,
		pb.ExecutionState_EXECUTION_STATE_CANCELED,
		pb.ExecutionState_EXECUTION_STATE_FAILED,
	},
	pb.ExecutionState_EXECUTION_STATE_DEPLOYING: {
		pb.ExecutionState_EXECUTION_STATE_INITIALIZING,
		pb.ExecutionState_EXECUTION_STATE_RUNNING,
		pb.ExecutionState_EXECUTION_STATE_FINISHED,
		pb.ExecutionState_EXECUTION_STATE_CANCELING,
		pb.ExecutionState_EXECUTION_STATE_FAILED,
		pb.ExecutionState_EXECUTION_STATE_RECONCILING,
	},
	pb.ExecutionState_EXECUTION_STATE_INITIALIZING: {
		pb.ExecutionState_EXECUTION_STATE_RUNNING,
		pb.ExecutionState_EXECUTION_STATE_FINISHED,
		pb.ExecutionState_EXECUTION_STATE_CANCELING,
		pb.ExecutionState_EXECUTION_STATE_FAILED,
		pb.ExecutionState_EXECUTION_STATE_RECONCILING,
	},
	pb.ExecutionState_EXECUTION_STATE_RUNNING: {
		pb.ExecutionState_EXECUTION_STATE_FINISHED,
		pb.ExecutionState_EXECUTION_STATE_CANCELING,
		pb.ExecutionState_EXECUTION_STATE_FAILED,
		pb.ExecutionState_EXECUTION_STATE_RECONCILING,
	},
	// A task may finish or fail before the cancel reaches it.
	pb.ExecutionState_EXECUTION_STATE_CANCELING: {
		pb.ExecutionState_EXECUTION_STATE_CANCELED,
		pb.ExecutionState_EXECUTION_STATE_FINISHED,
		pb.ExecutionState_EXECUTION_STATE_FAILED,
		pb.ExecutionState_EXECUTION_STATE_RECONCILING,
	},
	pb.ExecutionState_EXECUTION_STATE_RECONCILING: {
		pb.ExecutionState_EXECUTION_STATE_INITIALIZING,
		pb.ExecutionState_EXECUTION_STATE_RUNNING,
		pb.ExecutionState_EXECUTION_STATE_FINISHED,
		pb.ExecutionState_EXECUTION_STATE_CANCELED,
		pb.ExecutionState_EXECUTION_STATE_FAILED,
	},
}

// The JobStatus table follows Flink's JobStatus, plus RECONCILING.
var jobTransitions = map[pb.JobStatus][]pb.JobStatus{
	pb.JobStatus_JOB_STATUS_INITIALIZING: {
		pb.JobStatus_JOB_STATUS_CREATED,
		pb.JobStatus_JOB_STATUS_FAILED,
		pb.JobStatus_JOB_STATUS_RECONCILING,
	},
	pb.JobStatus_JOB_STATUS_CREATED: {
		pb.JobStatus_JOB_STATUS_RUNNING,
		pb.JobStatus_JOB_STATUS_FAILING,
		pb.JobStatus_JOB_STATUS_CANCELLING,
		pb.JobStatus_JOB_STATUS_FAILED,
		pb.JobStatus_JOB_STATUS_SUSPENDED,
		pb.JobStatus_JOB_STATUS_RECONCILING,
	},
	pb.JobStatus_JOB_STATUS_RUNNING: {
		pb.JobStatus_JOB_STATUS_FAILING,
		pb.JobStatus_JOB_STATUS_FINISHED,
		pb.JobStatus_JOB_STATUS_CANCELLING,
		pb.JobStatus_JOB_STATUS_RESTARTING,
		pb.JobStatus_JOB_STATUS_SUSPENDED,
		pb.JobStatus_JOB_STATUS_RECONCILING,
	},
	pb.JobStatus_JOB_STATUS_FAILING: {
		pb.JobStatus_JOB_STATUS_FAILED,
		pb.JobStatus_JOB_STATUS_RESTARTING,
		pb.JobStatus_JOB_STATUS_CANCELLING,
		pb.JobStatus_JOB_STATUS_RECONCILING,
	},
	pb.JobStatus_JOB_STATUS_CANCELLING: {
		pb.JobStatus_JOB_STATUS_CANCELED,
		pb.JobStatus_JOB_STATUS_FAILED,
		pb.JobStatus_JOB_STATUS_RECONCILING,
	},
	pb.JobStatus_JOB_STATUS_RESTARTING: {
		pb.JobStatus_JOB_STATUS_CREATED,
		pb.JobStatus_JOB_STATUS_RUNNING,
		pb.JobStatus_JOB_STATUS_CANCELLING,
		pb.JobStatus_JOB_STATUS_FAILED,
		pb.JobStatus_JOB_STATUS_SUSPENDED,
		pb.JobStatus_JOB_STATUS_RECONCILING,
	},
	pb.JobStatus_JOB_STATUS_RECONCILING: {
		pb.JobStatus_JOB_STATUS_RUNNING,
		pb.JobStatus_JOB_STATUS_FAILING,
		pb.JobStatus_JOB_STATUS_FINISHED,
		pb.JobStatus_JOB_STATUS_CANCELLING,
	},
}

// CanTransitionExecution reports whether an execution may move from one state to another.
// A same-state pair is not a transition and yields false; callers treat it as a no-op.
func CanTransitionExecution(from, to pb.ExecutionState) bool {
	for _, s := range executionTransitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// CheckExecutionTransition returns nil when the transition is legal, else an error wrapping
// ErrIllegalTransition that names both states.
func CheckExecutionTransition(from, to pb.ExecutionState) error {
	if CanTransitionExecution(from, to) {
		return nil
	}
	return fmt.Errorf("execution %s -> %s: %w", ExecutionStateName(from), ExecutionStateName(to), ErrIllegalTransition)
}

// IsTerminalExecution reports whether s is FINISHED, CANCELED or FAILED.
func IsTerminalExecution(s pb.ExecutionState) bool {
	switch s {
	case pb.ExecutionState_EXECUTION_STATE_FINISHED,
		pb.ExecutionState_EXECUTION_STATE_CANCELED,
		pb.ExecutionState_EXECUTION_STATE_FAILED:
		return true
	}
	return false
}

// ExecutionStateName returns the short name of s, such as "RUNNING".
func ExecutionStateName(s pb.ExecutionState) string {
	return strings.TrimPrefix(s.String(), "EXECUTION_STATE_")
}

// CanTransitionJob reports whether a job may move from one status to another. A same-status
// pair is not a transition and yields false.
func CanTransitionJob(from, to pb.JobStatus) bool {
	for _, s := range jobTransitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// CheckJobTransition returns nil when the transition is legal, else an error wrapping
// ErrIllegalTransition that names both statuses.
func CheckJobTransition(from, to pb.JobStatus) error {
	if CanTransitionJob(from, to) {
		return nil
	}
	return fmt.Errorf("job %s -> %s: %w", JobStatusName(from), JobStatusName(to), ErrIllegalTransition)
}

// IsGloballyTerminal reports whether s is FAILED, CANCELED or FINISHED: the job is over for the
// whole cluster. SUSPENDED is terminal only locally and is not included.
func IsGloballyTerminal(s pb.JobStatus) bool {
	switch s {
	case pb.JobStatus_JOB_STATUS_FAILED,
		pb.JobStatus_JOB_STATUS_CANCELED,
		pb.JobStatus_JOB_STATUS_FINISHED:
		return true
	}
	return false
}

// JobStatusName returns the short name of s, such as "RUNNING".
func JobStatusName(s pb.JobStatus) string {
	return strings.TrimPrefix(s.String(), "JOB_STATUS_")
}

// ParseExecutionState parses a short ("running") or full ("EXECUTION_STATE_RUNNING") name,
// ignoring case. UNSPECIFIED is rejected.
func ParseExecutionState(name string) (pb.ExecutionState, error) {
	n := strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(name)), "EXECUTION_STATE_")
	v, ok := pb.ExecutionState_value["EXECUTION_STATE_"+n]
	if !ok || v == 0 {
		return pb.ExecutionState_EXECUTION_STATE_UNSPECIFIED, fmt.Errorf("execution state %q: %w", name, ErrUnknownState)
	}
	return pb.ExecutionState(v), nil
}

// ParseJobStatus parses a short ("running") or full ("JOB_STATUS_RUNNING") name, ignoring
// case. UNSPECIFIED is rejected.
func ParseJobStatus(name string) (pb.JobStatus, error) {
	n := strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(name)), "JOB_STATUS_")
	v, ok := pb.JobStatus_value["JOB_STATUS_"+n]
	if !ok || v == 0 {
		return pb.JobStatus_JOB_STATUS_UNSPECIFIED, fmt.Errorf("job status %q: %w", name, ErrUnknownState)
	}
	return pb.JobStatus(v), nil
}
