package cluster

import (
	"errors"
	"fmt"
)

// Shutdown stops the node gracefully; it is idempotent. The order:
//
//  1. stop the leadership monitor and the bootstrap goroutine (the leader loop is cancelled
//     and RevokeLeadership runs: leader-only work stops before anyone else may lead);
//  2. if this node is the leader and other voters exist, transfer leadership (bounded by
//     raft's transfer timeout) so the cluster does not wait for an election timeout;
//  3. shut Raft down;
//  4. close the Raft transport;
//  5. close the bolt store (log and stable store), then the cached leader connection.
func (n *Node) Shutdown() error { return n.shutdown(true) }

// Kill stops the node without handing leadership over: an abrupt stop, as close to a crash as
// one process allows. The data dir stays valid for a restart.
func (n *Node) Kill() error { return n.shutdown(false) }

// CutOff closes the Raft transport at once: the peers stop hearing from this node from this
// moment, as when its process dies, while the rest of it is still being stopped. Kill of a
// whole replica calls it first (agent.JobMaster.Kill): a leader whose other servers are already
// gone but whose Raft heartbeats still go out for the second Raft takes to shut down under
// load is a leader the followers keep naming while nobody can reach it, which a process crash
// never produces (TaskManagers fenced themselves against it).
func (n *Node) CutOff() {
	if err := n.transport.Close(); err != nil {
		n.logger.Warn("closing the raft transport", "error", err)
	}
}

func (n *Node) shutdown(transfer bool) error {
	n.shutdownOnce.Do(func() {
		n.logger.Info("shutting down", "transfer", transfer)
		n.closed.Store(true)
		n.cancel()
		n.wg.Wait()

		var errs []error
		if transfer && n.IsLeader() && n.otherVoters() {
			if err := n.raft.LeadershipTransfer().Error(); err != nil {
				n.logger.Warn("leadership transfer on shutdown failed", "error", err)
			}
		}
		if err := n.raft.Shutdown().Error(); err != nil {
			errs = append(errs, fmt.Errorf("raft shutdown: %w", err))
		}
		if err := n.transport.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close transport: %w", err))
		}
		if err := n.store.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close store: %w", err))
		}
		n.closeLeaderConn()
		n.shutdownErr = errors.Join(errs...)
	})
	return n.shutdownErr
}
