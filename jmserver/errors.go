// Package jmserver is the gRPC edge of a JobMaster replica: the handlers of ClientService,
// OperatorService and JobMasterService on one gRPC server with health and reflection, the
// guard that applies the policy table (transport.Policies) to every call, the one forward
// helper, the one table from sentinel errors to gRPC statuses, and the HTTP views.
package jmserver

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/cluster"
	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/jobmaster"
	"github.com/jmcluster/jmcluster/transport"
)

// reconcilingRetry is the retry-after of a RECONCILING refusal when no JobMaster configures
// one (jobmaster.Config.RetryAfter's default).
const reconcilingRetry = 200 * time.Millisecond

// errorRow maps one sentinel error (matched with errors.Is) to a status code and, for the
// errors TMs and clients branch on, an ErrorInfo reason. The status message is the error's
// text. Rows are tried in order.
type errorRow struct {
	err    error
	code   codes.Code
	reason string
}

// errorTable is the one table from the sentinel errors of every layer to gRPC codes, in the
// style of etcd's v3rpc: deeper layers return these errors as values and only the edge turns
// them into statuses. NOT_LEADER and RECONCILING carry details (the leader's address, the
// retry delay) and are built by notLeader and reconciling; their rows only name them.
var errorTable = []errorRow{
	{jobmaster.ErrReconciling, codes.Unavailable, transport.ReasonReconciling},
	{jobmaster.ErrNotLeader, codes.Unavailable, transport.ReasonNotLeader},
	{cluster.ErrNotLeader, codes.Unavailable, transport.ReasonNotLeader},
	{cluster.ErrNotEstablished, codes.Unavailable, transport.ReasonNotLeader},
	{cluster.ErrNoLeader, codes.Unavailable, transport.ReasonNoLeader},
	{cluster.ErrLeadershipLost, codes.Unavailable, ""},
	{cluster.ErrShutdown, codes.Unavailable, ""},
	{cluster.ErrOutcomeUnknown, codes.Unavailable, ""},
	{cluster.ErrStateBehind, codes.Unavailable, ""},
	{jobmaster.ErrCheckpointLevel, codes.Unavailable, ""},
	{cluster.ErrRestoreInProgress, codes.FailedPrecondition, ""},
	{fsm.ErrNotASnapshotFile, codes.InvalidArgument, ""},
	{fsm.ErrSnapshotCorrupt, codes.InvalidArgument, ""},
	{fsm.ErrSnapshotVersion, codes.InvalidArgument, ""},

	{graph.ErrInvalidJobGraph, codes.InvalidArgument, ""},
	{jobmaster.ErrInvalidRequest, codes.InvalidArgument, ""},
	{jobmaster.ErrIncompatibleTM, codes.FailedPrecondition, ""},
	{fsm.ErrUnknownJob, codes.NotFound, ""},
	{cluster.ErrUnknownServer, codes.NotFound, ""},
	{jobmaster.ErrUnknownTaskManager, codes.NotFound, ""},
	{jobmaster.ErrNoCapacity, codes.FailedPrecondition, ""},
	{jobmaster.ErrNoCheckpointStorage, codes.FailedPrecondition, ""},
	{cluster.ErrNoTransferTarget, codes.FailedPrecondition, ""},
	{jobmaster.ErrUnknownAttempt, codes.NotFound, ""},
	{jobmaster.ErrUnknownResult, codes.NotFound, ""},
	{fsm.ErrJobExists, codes.AlreadyExists, ""},
	{jobmaster.ErrNotAssigned, codes.PermissionDenied, ""},
	{jobmaster.ErrStaleAttempt, codes.FailedPrecondition, ""},
	{jobmaster.ErrUpdateRefused, codes.FailedPrecondition, ""},
	{jobmaster.ErrReplacedIncarnation, codes.FailedPrecondition, ""},
	{fsm.ErrJobTerminal, codes.FailedPrecondition, ""},
	{fsm.ErrStatusMismatch, codes.FailedPrecondition, ""},
	{graph.ErrIllegalTransition, codes.FailedPrecondition, ""},

	// Artifacts: a limit is RESOURCE_EXHAUSTED naming it; a removal of an artifact in use, a
	// job naming one the state lacks and a cluster not every server of which applies the
	// artifact commands are FAILED_PRECONDITION; a job naming a module the host would refuse
	// to run is INVALID_ARGUMENT.
	{fsm.ErrArtifactLimit, codes.ResourceExhausted, ""},
	{fsm.ErrArtifactMismatch, codes.InvalidArgument, ""},
	{fsm.ErrUnknownArtifact, codes.NotFound, ""},
	{fsm.ErrUnknownUpload, codes.Aborted, ""},
	{fsm.ErrArtifactInUse, codes.FailedPrecondition, ""},
	{jobmaster.ErrUnknownArtifact, codes.FailedPrecondition, ""},
	{jobmaster.ErrRefusedModule, codes.InvalidArgument, ""},
	{jobmaster.ErrArtifactLevel, codes.FailedPrecondition, ""},
}

// Status maps an error of any layer to a gRPC status error with the table; a status error
// passes through, a context error keeps its code, anything unknown is INTERNAL. A NOT_LEADER
// built here names no leader and a RECONCILING one suggests the default retry delay; the
// guard's status adds what it knows (guard.Status).
func Status(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var serr *jobmaster.StaleEpochError
	var verr *graph.ValidationError
	switch {
	case errors.As(err, &serr):
		return transport.StaleEpochError(serr.Current, serr.Seen)
	case errors.As(err, &verr):
		return status.Error(codes.InvalidArgument, err.Error())
	}
	for _, r := range errorTable {
		if !errors.Is(err, r.err) {
			continue
		}
		switch r.reason {
		case transport.ReasonReconciling:
			return transport.ReconcilingError(reconcilingRetry)
		case transport.ReasonNotLeader:
			return transport.NotLeaderError("")
		case "":
			return status.Error(r.code, err.Error())
		}
		return transport.WithReason(r.code, r.reason, err.Error())
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return status.FromContextError(err).Err()
	}
	return status.Error(codes.Internal, err.Error())
}
