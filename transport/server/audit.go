package server

import (
	"context"
	"errors"

	"github.com/jmcluster/jmcluster/cluster"
	"github.com/jmcluster/jmcluster/jobmaster"
	"github.com/jmcluster/jmcluster/transport"
)

// audit writes the audit line of a change a caller asked for (submit, cancel, a Raft
// membership change) on the node that served it: the action, the caller (the name and role of
// its certificate, "alice (operator) via jm2" when a follower forwarded it, or the peer address
// on a plaintext server), what it named and the outcome. A call this node refused as not the
// leader is not written: it was forwarded, and the leader writes it.
func (d Deps) audit(ctx context.Context, action string, err error, kv ...any) {
	if d.Audit == nil || errors.Is(err, jobmaster.ErrNotLeader) || errors.Is(err, cluster.ErrNotLeader) {
		return
	}
	args := append([]any{"caller", transport.CallerName(ctx)}, kv...)
	if err != nil {
		d.Audit.Info(action+" refused", append(args, "error", err.Error())...)
		return
	}
	d.Audit.Info(action, args...)
}
