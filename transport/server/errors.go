// Package server is the gRPC edge of a JobMaster replica: ClientService, OperatorService and
// JobMasterService on one gRPC server with health and reflection, the HTTP views, and the one
// place where sentinel errors become gRPC statuses.
package server

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/cluster"
	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/jobmaster"
	"github.com/jmcluster/jmcluster/transport"
)

// Status maps an error of any layer to a gRPC status error. It is the only place the mapping
// lives (etcd's v3rpc does the same): deeper layers return sentinel errors.
func Status(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var verr *graph.ValidationError
	switch {
	case errors.As(err, &verr), errors.Is(err, graph.ErrInvalidJobGraph):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, jobmaster.ErrReconciling):
		return transport.ReconcilingError(reconcilingRetry)
	case errors.Is(err, jobmaster.ErrNotLeader), errors.Is(err, cluster.ErrNotLeader), errors.Is(err, cluster.ErrNotEstablished):
		return transport.NotLeaderError("")
	case errors.Is(err, cluster.ErrNoLeader):
		return transport.WithReason(codes.Unavailable, transport.ReasonNoLeader, err.Error())
	case errors.Is(err, cluster.ErrLeadershipLost), errors.Is(err, cluster.ErrShutdown):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, fsm.ErrUnknownJob):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, fsm.ErrJobExists):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, fsm.ErrJobTerminal), errors.Is(err, fsm.ErrStatusMismatch), errors.Is(err, graph.ErrIllegalTransition):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return status.FromContextError(err).Err()
	}
	return status.Error(codes.Internal, err.Error())
}
