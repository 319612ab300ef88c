package taskmanager

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/dataplane"
	"github.com/jmcluster/jmcluster/transport"
)

// The TaskManager's errors: the sentinels its parts return as values, and the one table that
// turns them into gRPC statuses at the edge (Status), as jmserver's table does for the
// JobMaster. A handler returns Status(err); the message on the wire is the error's text.
var (
	// ErrNoLeader: no JobMaster leader is known yet.
	ErrNoLeader = errors.New("no jobmaster leader known")
	// ErrStaleLeader: the contacted JobMaster has an epoch lower than one this TM has seen.
	ErrStaleLeader = errors.New("jobmaster epoch is stale")
	// ErrInvalidTask: a TaskDeploymentDescriptor is invalid.
	ErrInvalidTask = errors.New("invalid task deployment descriptor")
	// ErrPartitionReleased: a result partition was released (producer failed, cancelled or
	// the TM stopped) while it was being written or read.
	ErrPartitionReleased = dataplane.ErrPartitionReleased
	// ErrStopped: the TaskManager is stopping.
	ErrStopped = errors.New("taskmanager stopped")
	// ErrRecordTooLarge: a task emitted a record over Config.MaxRecordSize (the task fails).
	ErrRecordTooLarge = errors.New("record too large")

	// ErrInvalidRequest: a leader's call fails validation (a required field missing, an index
	// out of range, a batch over its limits).
	ErrInvalidRequest = errors.New("invalid request")
	// ErrUnknownAttempt: the call names an attempt this TM does not run, or one of another job.
	ErrUnknownAttempt = errors.New("unknown attempt")
	// ErrCancelledUnseen: the leader cancelled the attempt before its SubmitTask arrived
	// (tombstone.go).
	ErrCancelledUnseen = errors.New("attempt cancelled before it was submitted")
	// ErrNoCheckpointStorage: a checkpointed job's task reached a TM without checkpoint storage.
	ErrNoCheckpointStorage = errors.New("no checkpoint storage")
	// ErrStaleAttempt: an attempt of the same subtask with a number at or above the submitted
	// one is already on this TM.
	ErrStaleAttempt = errors.New("stale attempt number")
	// ErrSlotBusy: the slot holds a task of another job, or of the same vertex.
	ErrSlotBusy = errors.New("slot busy")
	// ErrStaleEpoch: the caller's leader epoch is below the highest this TM has seen (an
	// *EpochError).
	ErrStaleEpoch = errors.New("stale leader epoch")
	// ErrUnannouncedEpoch: the caller's epoch is above the highest seen, and no JobMaster names
	// it as the established leader's (an *EpochError).
	ErrUnannouncedEpoch = errors.New("unannounced leader epoch")
)

// errorRow maps one sentinel (matched with errors.Is) to a status code and, for the refusals a
// leader branches on, an ErrorInfo reason.
type errorRow struct {
	err    error
	code   codes.Code
	reason string
}

// errorTable is the one table from the TaskManager's sentinels to gRPC statuses. Rows are
// tried in order; every sentinel of this file has one (TestErrorTableCoversSentinels).
var errorTable = []errorRow{
	{ErrStaleEpoch, codes.FailedPrecondition, transport.ReasonStaleEpoch},
	{ErrUnannouncedEpoch, codes.FailedPrecondition, transport.ReasonUnannouncedEpoch},
	{ErrInvalidRequest, codes.InvalidArgument, ""},
	{ErrInvalidTask, codes.InvalidArgument, ""},
	{ErrUnknownAttempt, codes.NotFound, ""},
	{ErrCancelledUnseen, codes.FailedPrecondition, ""},
	{ErrNoCheckpointStorage, codes.FailedPrecondition, ""},
	{ErrStaleAttempt, codes.FailedPrecondition, ""},
	{ErrSlotBusy, codes.ResourceExhausted, ""},
	{ErrRecordTooLarge, codes.InvalidArgument, ""},
	{ErrStopped, codes.Unavailable, ""},
	{ErrNoLeader, codes.Unavailable, transport.ReasonNoLeader},
	{ErrStaleLeader, codes.Unavailable, ""},
	{ErrPartitionReleased, codes.Aborted, ""},
}

// Status maps an error of the TaskManager to a gRPC status error with the table: a status
// error passes through, a context error keeps its code, anything unknown is INTERNAL. An
// *EpochError is built with its epochs (transport.StaleEpochError, UnannouncedEpochError).
func Status(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var ee *EpochError
	if errors.As(err, &ee) {
		switch ee.Kind {
		case ErrStaleEpoch:
			return transport.StaleEpochError(ee.Got, ee.Seen)
		case ErrUnannouncedEpoch:
			return transport.UnannouncedEpochError(ee.Got, ee.Seen)
		}
	}
	for _, r := range errorTable {
		if !errors.Is(err, r.err) {
			continue
		}
		if r.reason == "" {
			return status.Error(r.code, err.Error())
		}
		return transport.WithReason(r.code, r.reason, err.Error())
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return status.FromContextError(err).Err()
	}
	return status.Error(codes.Internal, err.Error())
}

// codeOf is the status code Status gives err (codes.OK for nil).
func codeOf(err error) codes.Code { return status.Code(Status(err)) }

// kindError is an error of a sentinel kind whose text is its own message: the table maps it as
// its kind, and the wire carries the message alone.
type kindError struct {
	kind error
	msg  string
}

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() error { return e.kind }

// errorf is an error of kind with the formatted message (the kind's own text not added).
func errorf(kind error, format string, args ...any) error {
	return &kindError{kind: kind, msg: fmt.Sprintf(format, args...)}
}

// invalidRequest is the refusal of a call that failed validation: its message is the problem's.
func invalidRequest(problem error) error {
	if problem == nil {
		return nil
	}
	return &kindError{kind: ErrInvalidRequest, msg: problem.Error()}
}

// EpochError refuses a leader's call by its epoch: Kind is ErrStaleEpoch or
// ErrUnannouncedEpoch, Got the call's epoch, Seen the highest this TM has seen.
type EpochError struct {
	Kind      error
	Got, Seen uint64
}

func (e *EpochError) Error() string {
	if e.Kind == ErrUnannouncedEpoch {
		return "leader epoch " + strconv.FormatUint(e.Got, 10) + " is above the " + strconv.FormatUint(e.Seen, 10) + " this TaskManager has seen and no JobMaster names it"
	}
	return "stale leader epoch " + strconv.FormatUint(e.Got, 10) + ": epoch " + strconv.FormatUint(e.Seen, 10) + " has been seen"
}

func (e *EpochError) Unwrap() error { return e.Kind }
