package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/internal/failpoint"
	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// monitorLeadership follows raft's NotifyCh (every transition, in order, unlike LeaderCh) and
// runs one leaderLoop per term of leadership. It owns the leaderLoop goroutine: on loss of
// leadership or shutdown it cancels the loop's context and waits for it to finish, so two
// leader loops never overlap.
func (n *Node) monitorLeadership() {
	defer n.wg.Done()
	var (
		stop     context.CancelFunc
		loopDone chan struct{}
	)
	stopLoop := func() {
		if stop == nil {
			return
		}
		stop()
		<-loopDone
		stop, loopDone = nil, nil
	}
	defer stopLoop()
	for {
		select {
		case isLeader := <-n.notifyCh:
			if !isLeader {
				if stop != nil {
					n.logger.Info("cluster leadership lost")
					// The window between Raft's step-down and the end of the leader's work,
					// which TaskManager fencing covers; a pause here widens it.
					failpoint.Inject(n.ctx, failpoint.BeforeLeaderStop)
				}
				stopLoop()
				continue
			}
			if stop != nil {
				n.logger.Error("leader loop already running")
				continue
			}
			n.logger.Info("cluster leadership acquired")
			n.peers.reset()
			// Raft's last contact is the previous leader's until this node leads.
			n.prevContact.Store(n.raft.LastContact().UnixNano())
			ctx, cancel := context.WithCancel(n.ctx)
			stop, loopDone = cancel, make(chan struct{})
			go func(done chan struct{}) {
				defer close(done)
				n.leaderLoop(ctx)
			}(loopDone)
		case <-n.ctx.Done():
			return
		}
	}
}

// leaderLoop runs while this node is the Raft leader: barrier, commit the next epoch, mark the
// node established and call the hooks. If establishing fails it revokes and steps down; when
// there is nobody to hand leadership to, it retries after a pause while still leader. A state
// behind the TaskManagers (ErrStateBehind) is not handed over (every voter holds the same
// state): the leader stays, not established, until a snapshot restore. A restore (Node.Restore)
// runs here, between terms, so no term works on the state it replaces.
func (n *Node) leaderLoop(ctx context.Context) {
	for {
		err := n.establish(ctx)
		if err == nil {
			n.behind.Store(nil)
			select {
			case <-ctx.Done():
				n.revoke()
				return
			case req := <-n.restoreCh:
				n.revoke()
				req.done <- n.restore(ctx, req)
				continue
			case <-n.recheck:
				// A TaskManager has seen a higher epoch than this term's: establish again, which
				// fails (deposed) or finds the state behind.
				n.logger.Warn("a TaskManager has seen a newer epoch than this term's; establishing again", "epoch", n.Epoch(), "seen", n.refusedEpoch.Load())
				n.revoke()
				continue
			}
		}
		n.revoke()
		if ctx.Err() != nil {
			return
		}
		if seen, ok := transport.StaleEpochSeen(err); ok {
			n.noteSeenEpoch(seen)
		}
		if errors.Is(err, ErrStateBehind) {
			msg := err.Error()
			if old := n.behind.Swap(&msg); old == nil || *old != msg {
				n.logger.Error("not establishing leadership: the state was lost; restore a snapshot (jmnode snapshot restore FILE)", "error", err)
			}
		} else {
			n.logger.Error("failed to establish leadership; stepping down", "error", err)
			if terr := n.raft.LeadershipTransfer().Error(); terr == nil {
				n.logger.Info("leadership transferred")
				return
			} else {
				n.logger.Warn("leadership transfer failed; retrying establishment", "error", terr)
			}
		}
		select {
		case <-ctx.Done():
			return
		case req := <-n.restoreCh:
			req.done <- n.restore(ctx, req)
		case <-time.After(2 * n.cfg.ElectionTimeout):
		}
	}
}

// seenEpoch is the highest epoch a TaskManager is known to have seen: from Config.SeenEpoch
// (gossip) and from the STALE_EPOCH refusals this node's terms met.
func (n *Node) seenEpoch() (uint64, string) {
	var (
		epoch uint64
		by    string
	)
	if n.cfg.SeenEpoch != nil {
		epoch, by = n.cfg.SeenEpoch()
	}
	if r := n.refusedEpoch.Load(); r > epoch {
		epoch, by = r, "a TaskManager this leader asked (it refused it as stale)"
	}
	return epoch, by
}

// NoteSeenEpoch records an epoch a TaskManager says it has seen (a registration or heartbeat
// the leader refused as STALE_EPOCH). Above the committed epoch on an established leader, it
// makes the leader loop establish again: a newer leader exists (establishing fails), or the
// state was lost (the state-behind guard stops it).
func (n *Node) NoteSeenEpoch(e uint64) {
	n.noteSeenEpoch(e)
	if n.Established() && e > n.sm.Epoch().GetEpoch() {
		select {
		case n.recheck <- struct{}{}:
		default:
		}
	}
}

// RaiseEpochFloor records an epoch a TaskManager confirmed it has seen (asked by the leader):
// a restore raises the state's epoch at least to it.
func (n *Node) RaiseEpochFloor(e uint64) { n.noteSeenEpoch(e) }

func (n *Node) noteSeenEpoch(e uint64) {
	for {
		old := n.refusedEpoch.Load()
		if e <= old || n.refusedEpoch.CompareAndSwap(old, e) {
			return
		}
	}
}

// PreviousLeaderContact is when this node, before it led, last heard from a leader (zero when
// never): the failover timeline's start.
func (n *Node) PreviousLeaderContact() time.Time {
	ns := n.prevContact.Load()
	if ns <= 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// Behind is why this Raft leader does not establish leadership (ErrStateBehind), or "".
func (n *Node) Behind() string {
	if p := n.behind.Load(); p != nil && n.IsLeader() {
		return *p
	}
	return ""
}

// establish makes this node the established leader: barrier, commit EstablishLeadership with
// epoch = committed + 1, then run the hook with ctx (cancelled on loss of leadership).
func (n *Node) establish(ctx context.Context) error {
	tctx, cancel := context.WithTimeout(ctx, n.cfg.EstablishTimeout)
	defer cancel()
	if err := waitFuture(tctx, n.raft.Barrier(n.cfg.EstablishTimeout)); err != nil {
		return fmt.Errorf("barrier: %w", err)
	}
	committed := n.sm.Epoch().GetEpoch()
	// Every epoch a TaskManager adopts was committed, and the barrier gives this leader every
	// committed entry: a higher epoch seen means the state was lost, and reconciling with it
	// would cancel the running tasks it no longer knows.
	if seen, by := n.seenEpoch(); seen > committed {
		return fmt.Errorf("%w: %s has seen leader epoch %d, above the %d this state holds", ErrStateBehind, by, seen, committed)
	}
	epoch := committed + 1
	cmd, err := fsm.Encode(pb.CommandType_COMMAND_TYPE_ESTABLISH_LEADERSHIP, &pb.EstablishLeadershipCommand{
		Epoch:             epoch,
		LeaderId:          n.cfg.ID,
		LeaderGrpcAddress: n.cfg.GRPCAddr,
		Timestamp:         time.Now().UnixMilli(),
	})
	if err != nil {
		return err
	}
	res, err := n.apply(tctx, cmd, n.cfg.EstablishTimeout)
	if err != nil {
		return fmt.Errorf("commit epoch %d: %w", epoch, err)
	}
	if res.Err != nil {
		return fmt.Errorf("commit epoch %d: rejected: %w", epoch, res.Err)
	}
	if n.raft.State() != raft.Leader || ctx.Err() != nil {
		return fmt.Errorf("epoch %d: %w", epoch, ErrLeadershipLost)
	}

	n.mu.Lock()
	n.established, n.epoch = true, epoch
	n.mu.Unlock()
	n.logger.Info("leadership established", "epoch", epoch, "index", res.Index)
	if afterEstablish != nil {
		afterEstablish(ctx, n, epoch)
	}

	if n.hooks != nil {
		if err := n.hooks.EstablishLeadership(ctx, epoch); err != nil {
			return fmt.Errorf("leader hook at epoch %d: %w", epoch, err)
		}
	}
	return nil
}

// afterEstablish is nil in every release build; the jmnext build of the mixed-version test
// sets it (next_jmnext.go).
var afterEstablish func(ctx context.Context, n *Node, epoch uint64)

// revoke undoes establish: clears the established epoch and calls RevokeLeadership once.
func (n *Node) revoke() {
	n.mu.Lock()
	was, epoch := n.established, n.epoch
	n.established, n.epoch = false, 0
	n.mu.Unlock()
	if !was {
		return
	}
	n.logger.Info("leadership revoked", "epoch", epoch)
	if n.hooks != nil {
		n.hooks.RevokeLeadership()
	}
}
