package jobmaster

import (
	"errors"
	"fmt"
)

// Domain errors of the calls TaskManagers make (tmcalls.go). They are values: the gRPC edge
// (jmserver) maps each to its status code; the message of the status is the error's
// text, which names the request's ids.
var (
	// ErrIncompatibleTM: a TaskManager speaks a protocol version this JobMaster does not
	// support (FAILED_PRECONDITION).
	ErrIncompatibleTM = errors.New("jobmaster: incompatible TaskManager")
	// ErrInvalidRequest: a required field is missing or out of range (INVALID_ARGUMENT).
	ErrInvalidRequest = errors.New("jobmaster: invalid request")
	// ErrUnknownAttempt: no execution of the job has this attempt (NOT_FOUND).
	ErrUnknownAttempt = errors.New("jobmaster: unknown attempt")
	// ErrUnknownResult: the job has no such intermediate result (NOT_FOUND).
	ErrUnknownResult = errors.New("jobmaster: unknown result")
	// ErrStaleAttempt: the attempt is an earlier attempt of its execution (FAILED_PRECONDITION).
	ErrStaleAttempt = errors.New("jobmaster: stale attempt")
	// ErrNotAssigned: the attempt is assigned to another TaskManager (PERMISSION_DENIED).
	ErrNotAssigned = errors.New("jobmaster: attempt assigned to another TaskManager")
	// ErrUpdateRefused: the committed graph refused a state update (FAILED_PRECONDITION).
	ErrUpdateRefused = errors.New("jobmaster: update refused")
	// ErrUnknownTaskManager: an operator call names a TaskManager the cluster does not know
	// (NOT_FOUND).
	ErrUnknownTaskManager = errors.New("jobmaster: unknown TaskManager")
	// ErrNoCapacity: a drain would leave the drained TaskManager's regions without slots
	// (FAILED_PRECONDITION).
	ErrNoCapacity = errors.New("jobmaster: not enough free slots elsewhere")
	// ErrNoCheckpointStorage: a checkpointed job submitted to a JobMaster without checkpoint
	// storage (Config.Checkpoints; FAILED_PRECONDITION).
	ErrNoCheckpointStorage = errors.New("jobmaster: no checkpoint storage")
)

// StaleEpochError: the caller has seen a leader epoch above this leader's (the edge answers
// STALE_EPOCH). Current is this leader's epoch, Seen the caller's.
type StaleEpochError struct{ Current, Seen uint64 }

func (e *StaleEpochError) Error() string {
	return fmt.Sprintf("stale leader epoch %d: epoch %d has been seen", e.Current, e.Seen)
}

// detailedError is a domain error with a message of its own: errors.Is matches the sentinel,
// Error is the message alone.
type detailedError struct {
	kind error
	msg  string
}

func (e *detailedError) Error() string { return e.msg }
func (e *detailedError) Unwrap() error { return e.kind }

// errorf returns an error matching kind whose text is the formatted message.
func errorf(kind error, format string, args ...any) error {
	return &detailedError{kind: kind, msg: fmt.Sprintf(format, args...)}
}
