package taskmanager

import (
	"context"
	"fmt"
	"time"
)

// graceLoop cancels every task when no leader has been reached for LeaderGrace, so an isolated
// TM frees its slots, or sooner (FenceTimeout) when a JobMaster names a live leader this TM
// cannot reach: that leader is about to declare this TM lost and redeploy its tasks.
func (f *fence) graceLoop(ctx context.Context) {
	tick := min(max(f.cfg.LeaderGrace/10, 5*time.Millisecond), time.Second)
	if ft := f.cfg.FenceTimeout; ft > 0 {
		tick = min(tick, max(ft/5, 5*time.Millisecond))
	}
	tick = min(tick, defaultPoolQueryInterval)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f.mu.Lock()
		contact := f.lastContact
		ft, grace := f.fenceTimeoutLocked(), f.leaderGraceLocked()
		f.mu.Unlock()
		since := time.Since(contact)
		if ft > 0 && since > ft && since <= grace {
			if leader := f.cutOffFrom(ctx); leader != "" {
				// Asking the JobMasters takes time; a leader may have reached this TM meanwhile
				// (a new leader's RequestReport), and then it is not cut off.
				if f.contact().After(contact) {
					continue
				}
				// Cut off means unreachable: a named leader that answers this TM is not (it may be
				// between winning an election and establishing its term, when it refuses the
				// heartbeats, and will reach the TM once established).
				if err := f.probe(ctx, leader); err == nil {
					f.log.Debug("named leader answers; not fencing", "leader", leader, "since_contact", since)
					continue
				}
				why := fmt.Sprintf("cut off from the live leader at %s for %v", leader, since.Round(time.Millisecond))
				if n := f.stop(why); n > 0 {
					f.log.Error("FENCED: cut off from a live leader; cancelling every task", "leader", leader, "tasks", n, "since_contact", since)
				}
				continue
			}
			// No JobMaster names a live leader (or none answers): the pool rule (poolLoop)
			// tells a JobMaster outage, which tasks survive, from this TM's own isolation.
			continue
		}
		if since <= grace {
			continue
		}
		why := fmt.Sprintf("no leader contact for %v (grace %v)", since.Round(time.Millisecond), grace)
		if n := f.stop(why); n > 0 {
			f.log.Error("LEADER GRACE EXPIRED: cancelling every task", "tasks", n, "since_contact", since, "grace", grace)
		}
	}
}

// cutOffFrom returns the address of a live leader this TM is cut off from, or "". It is called
// once no leader has been reached for FenceTimeout. A JobMaster naming an established leader
// is the evidence that one is alive: if it is the leader this TM has met (its epoch is not
// newer than the TM's), the TM has been cut off from it for FenceTimeout already; a newer
// leader gets FenceTimeout from the moment it is first seen to reach the TM (it asks for the
// TM's report as soon as it is established). When no JobMaster names a leader (a leader gap)
// or none answers, the TM keeps its tasks for the leader grace.
func (f *fence) cutOffFrom(ctx context.Context) string {
	f.fenceChecks.Add(1)
	addr, epoch := f.establishedLeader(ctx)
	if addr == "" {
		return ""
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if epoch <= f.epoch {
		return addr
	}
	if f.newLeaderSeen.epoch != epoch {
		f.newLeaderSeen.epoch, f.newLeaderSeen.at = epoch, time.Now()
		return ""
	}
	if time.Since(f.newLeaderSeen.at) > f.fenceTimeoutLocked() {
		return addr
	}
	return ""
}

// establishedLeader asks the JobMasters for the established leader and its epoch, bounded like
// the fence check.
func (f *fence) establishedLeader(ctx context.Context) (string, uint64) {
	ctx, cancel := context.WithTimeout(ctx, f.checkTimeout())
	defer cancel()
	return f.jms.established(ctx)
}

// probe asks the JobMaster at addr for its status, bounded like the fence check.
func (f *fence) probe(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, f.checkTimeout())
	defer cancel()
	_, err := f.jms.status(ctx, addr)
	return err
}

// checkTimeout bounds one fence check: the RPC timeout, or the fence timeout in force (the
// leader's, once registered) when shorter. The TM's own setting may be 0 (off) while its
// leader's is not.
func (f *fence) checkTimeout() time.Duration {
	f.mu.Lock()
	ft := f.fenceTimeoutLocked()
	f.mu.Unlock()
	if ft <= 0 {
		return f.cfg.RPCTimeout
	}
	return min(f.cfg.RPCTimeout, ft)
}
