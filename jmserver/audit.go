package jmserver

import (
	"context"
	"errors"

	"github.com/hashicorp/go-hclog"

	"github.com/jmcluster/jmcluster/cluster"
	"github.com/jmcluster/jmcluster/internal/logsum"
	"github.com/jmcluster/jmcluster/jobmaster"
	"github.com/jmcluster/jmcluster/transport"
)

// audit writes the audit line of a change a caller asked for (submit, cancel, a Raft
// membership change) on the node that served it: the action, the caller (the name and role of
// its certificate, "alice (operator) via jm2" when a follower forwarded it, or the peer address
// on a plaintext server), what it named and the outcome. A call this node refused as not the
// leader is not written: it was forwarded, and the leader writes it.
func (d Deps) audit(ctx context.Context, action string, err error, kv ...any) {
	Audit(ctx, d.Audit, action, err, kv...)
}

// Audit writes an audit line to log (nil: none), as Deps.audit does; a TaskManager's
// GossipService writes its keyring changes with it.
func Audit(ctx context.Context, log hclog.Logger, action string, err error, kv ...any) {
	if log == nil || errors.Is(err, jobmaster.ErrNotLeader) || errors.Is(err, cluster.ErrNotLeader) {
		return
	}
	args := append([]any{"caller", transport.CallerName(ctx)}, kv...)
	if err != nil {
		log.Info(action+" refused", append(args, "error", logsum.Text(err.Error()))...)
		return
	}
	log.Info(action, args...)
}
