package graph

import "errors"

// Sentinel errors of the package. Callers test them with errors.Is.
var (
	// ErrIllegalTransition is wrapped by CheckExecutionTransition and CheckJobTransition.
	ErrIllegalTransition = errors.New("illegal state transition")
	// ErrInvalidJobGraph is wrapped by every *ValidationError and by build errors.
	ErrInvalidJobGraph = errors.New("invalid job graph")
	// ErrUnknownState is returned by ParseExecutionState and ParseJobStatus.
	ErrUnknownState = errors.New("unknown state name")
)
