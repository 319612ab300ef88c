package taskmanager

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/transport"
)

// TestRefusalOf: "no leader yet" and the network are not refusals; every other answer of the
// leader is, with its code.
func TestRefusalOf(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want string // "" = not a refusal
	}{
		{"no status (network)", errors.New("connection refused"), ""},
		{"context", context.DeadlineExceeded, ""},
		{"deadline", status.Error(codes.DeadlineExceeded, "slow"), ""},
		{"unavailable", status.Error(codes.Unavailable, "connection reset"), ""},
		{"not leader, hint", transport.NotLeaderError("10.0.0.1:7100"), ""},
		{"not leader, no hint", transport.NotLeaderError(""), ""},
		{"no leader", transport.WithReason(codes.Unavailable, transport.ReasonNoLeader, "no leader"), ""},
		{"reconciling", transport.ReconcilingError(200 * time.Millisecond), ""},
		{"stale epoch (a deposed leader)", transport.StaleEpochError(3, 4), ""},
		{"rate limited", transport.RateLimitedError("over", nil, time.Second), ""},
		{"slots", status.Error(codes.InvalidArgument, "register: slots must be in [1, 1024], got 1025"), "InvalidArgument"},
		{"protocol", status.Error(codes.FailedPrecondition, "register tm1: speaks protocol 9"), "FailedPrecondition"},
		{"replaced incarnation", status.Error(codes.FailedPrecondition, "the TaskManager incarnation was replaced"), "FailedPrecondition"},
		{"permission", status.Error(codes.PermissionDenied, "role"), "PermissionDenied"},
		{"internal", status.Error(codes.Internal, "bug"), "Internal"},
	} {
		got, ok := refusalOf(c.err)
		if ok != (c.want != "") || got != c.want {
			t.Errorf("%s: refusalOf = %q, %v; want %q", c.name, got, ok, c.want)
		}
	}
}
