package jmserver

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/cluster"
	"github.com/jmcluster/jmcluster/jobmaster"
	"github.com/jmcluster/jmcluster/transport"
)

// forwardedKey marks a call one JobMaster already forwarded to the leader, so that a call
// never bounces between two nodes that disagree about the leader. Its value is the id of the
// forwarding node (the write limit trusts it only from that peer's host: ratelimit.go).
const forwardedKey = "x-jmcluster-forwarded"

// guard is a JobMaster replica's transport.Guard: what the policy interceptor asks about a
// call before its handler runs.
type guard struct {
	d     Deps
	limit *writeLimiter
}

var _ transport.Guard = (*guard)(nil)

func newGuard(d Deps) *guard { return &guard{d: d, limit: newWriteLimiter(d.WriteLimit)} }

// Limit applies the client's write limit on this node (ratelimit.go).
func (g *guard) Limit(ctx context.Context) error { return g.admitWrite(ctx) }

// Admit lets a call that needs the leader run only on the established leader, a gated one only
// with the gate open, and a consistent read only after Raft confirms the leadership.
func (g *guard) Admit(ctx context.Context, p transport.Policy, consistent bool) error {
	jm := g.d.JM
	if jm == nil || !jm.Active() {
		return jobmaster.ErrNotLeader
	}
	if p.Gated && jm.Reconciling() {
		return jobmaster.ErrReconciling
	}
	if p.Leader == transport.LeaderIfConsistent && consistent {
		return g.d.Node.VerifyLeader(ctx)
	}
	return nil
}

// Forwardable: the refusal says this node is not the leader, and the call did not come from
// another node already.
func (g *guard) Forwardable(ctx context.Context, err error) bool {
	return !isForwarded(ctx) && (errors.Is(err, jobmaster.ErrNotLeader) || errors.Is(err, cluster.ErrNotLeader))
}

func isForwarded(ctx context.Context) bool {
	md, ok := metadata.FromIncomingContext(ctx)
	return ok && len(md.Get(forwardedKey)) > 0
}

// Forward is the one forward helper: it runs method on the leader's gRPC server (over the
// node's cached leader connection), marked as forwarded by this node, and returns the reply.
// It waits for a leader up to the node's ForwardHoldTime.
func (g *guard) Forward(ctx context.Context, method string, req any) (any, error) {
	if isForwarded(ctx) {
		return nil, jobmaster.ErrNotLeader
	}
	conn, leader, err := g.d.Node.LeaderConn(ctx)
	if err != nil {
		return nil, err
	}
	if leader == g.d.Node.ID() {
		// Raft made this node the leader meanwhile, but it is not established yet: retry.
		return nil, cluster.ErrNotEstablished
	}
	reply, err := transport.NewReply(method)
	if err != nil {
		return nil, err
	}
	ctx = metadata.AppendToOutgoingContext(transport.ForwardFor(ctx, ctx), forwardedKey, g.d.Node.ID())
	if err := conn.Invoke(ctx, method, req, reply); err != nil {
		return nil, err
	}
	return reply, nil
}

// Status maps err with the table (Status) and adds what only this node knows: the leader's
// address to a NOT_LEADER refusal, the configured retry delay to a RECONCILING one.
func (g *guard) Status(ctx context.Context, err error) error {
	if _, ok := status.FromError(err); ok || err == nil { // nil, or a status error already
		return err
	}
	st := Status(err)
	switch transport.Reason(st) {
	case transport.ReasonReconciling:
		return transport.ReconcilingError(g.retryAfter())
	case transport.ReasonNotLeader:
		return transport.NotLeaderError(g.leaderHint(ctx))
	}
	return st
}

func (g *guard) retryAfter() time.Duration {
	if g.d.JM == nil {
		return reconcilingRetry
	}
	return g.d.JM.Config().RetryAfter
}

// leaderHint is the leader's gRPC address when this node is not the Raft leader and learns it
// within the retry delay, else "".
func (g *guard) leaderHint(ctx context.Context) string {
	if g.d.Node == nil || g.d.Node.IsLeader() {
		return ""
	}
	c, cancel := context.WithTimeout(ctx, g.retryAfter())
	defer cancel()
	_, addr, _ := g.d.Node.LeaderGRPCAddr(c)
	return addr
}
