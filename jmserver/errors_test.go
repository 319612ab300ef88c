package jmserver_test

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/cluster"
	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/jmserver"
	"github.com/jmcluster/jmcluster/jobmaster"
	"github.com/jmcluster/jmcluster/transport"
)

// TestStatusTable: the one mapping from the errors of every layer to gRPC statuses. Wrapped
// errors map as their sentinel, the message is the error's text, and an error wrapping a
// sentinel and a context error (no leader before the deadline) maps as the sentinel.
func TestStatusTable(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("doing something: %w", err) }
	cases := []struct {
		err    error
		code   codes.Code
		reason string
	}{
		{jobmaster.ErrReconciling, codes.Unavailable, transport.ReasonReconciling},
		{wrap(jobmaster.ErrNotLeader), codes.Unavailable, transport.ReasonNotLeader},
		{wrap(cluster.ErrNotLeader), codes.Unavailable, transport.ReasonNotLeader},
		{cluster.ErrNotEstablished, codes.Unavailable, transport.ReasonNotLeader},
		{fmt.Errorf("%w: %w", cluster.ErrNoLeader, context.DeadlineExceeded), codes.Unavailable, transport.ReasonNoLeader},
		{cluster.ErrLeadershipLost, codes.Unavailable, ""},
		{cluster.ErrShutdown, codes.Unavailable, ""},
		// An apply whose wait ended before raft answered may still commit: retried, not final.
		{fmt.Errorf("%w: %w", cluster.ErrOutcomeUnknown, context.DeadlineExceeded), codes.Unavailable, ""},
		{jobmaster.ErrReplacedIncarnation, codes.FailedPrecondition, ""},
		{&graph.SizeError{}, codes.InvalidArgument, ""},
		{wrap(graph.ErrInvalidJobGraph), codes.InvalidArgument, ""},
		{wrap(jobmaster.ErrInvalidRequest), codes.InvalidArgument, ""},
		{wrap(fsm.ErrUnknownJob), codes.NotFound, ""},
		{jobmaster.ErrUnknownAttempt, codes.NotFound, ""},
		{jobmaster.ErrUnknownResult, codes.NotFound, ""},
		{fsm.ErrJobExists, codes.AlreadyExists, ""},
		{jobmaster.ErrNotAssigned, codes.PermissionDenied, ""},
		{jobmaster.ErrStaleAttempt, codes.FailedPrecondition, ""},
		{jobmaster.ErrUpdateRefused, codes.FailedPrecondition, ""},
		{fsm.ErrJobTerminal, codes.FailedPrecondition, ""},
		{fsm.ErrStatusMismatch, codes.FailedPrecondition, ""},
		{graph.ErrIllegalTransition, codes.FailedPrecondition, ""},
		{&jobmaster.StaleEpochError{Current: 3, Seen: 4}, codes.FailedPrecondition, transport.ReasonStaleEpoch},
		{context.Canceled, codes.Canceled, ""},
		{wrap(context.DeadlineExceeded), codes.DeadlineExceeded, ""},
		{status.Error(codes.Aborted, "already a status"), codes.Aborted, ""},
		{fmt.Errorf("anything else"), codes.Internal, ""},
	}
	for _, c := range cases {
		got := jmserver.Status(c.err)
		st := status.Convert(got)
		if st.Code() != c.code || transport.Reason(got) != c.reason {
			t.Errorf("Status(%v) = %v (reason %q), want %v (reason %q)", c.err, got, transport.Reason(got), c.code, c.reason)
		}
	}
	if jmserver.Status(nil) != nil {
		t.Error("Status(nil) is not nil")
	}
	if got := status.Convert(jmserver.Status(&jobmaster.StaleEpochError{Current: 3, Seen: 4})).Message(); got != "stale leader epoch 3: epoch 4 has been seen" {
		t.Errorf("STALE_EPOCH message %q", got)
	}
}
