package taskmanager

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// leaderLoop registers with the leader and heartbeats; any failure makes it re-resolve the
// leader and register again.
func (tm *TaskManager) leaderLoop(ctx context.Context) {
	lg := tm.log.Named("leader")
	failures := 0
	for {
		tm.mu.Lock()
		registered := tm.registered
		tm.mu.Unlock()
		var err error
		if registered {
			err = tm.heartbeat(ctx)
		} else {
			err = tm.register(ctx)
		}
		if err != nil && ctx.Err() == nil {
			lg.Debug("leader contact failed", "registered", registered, "error", err)
		}
		if err == nil {
			failures = 0
		} else {
			tm.contactFailures.Add(1)
			failures++
		}
		tm.mu.Lock()
		iv := tm.hbInterval // read after the call: a registration sets the leader's
		tm.mu.Unlock()
		if failures > 1 {
			// A failure wakes the loop to try the next leader at once; after a second one in a
			// row, wait before trying again (doubling up to the heartbeat interval), or a leader
			// that refuses connections has the TM spinning on it.
			if !sleepCtx(ctx, min(leaderRetryMin<<min(failures-2, 10), iv)) {
				return
			}
		}
		timer := time.NewTimer(iv)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-tm.kick:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// leaderRetryMin is the first pause between two failed contacts with the leader in a row.
const leaderRetryMin = 10 * time.Millisecond

// sleepCtx waits d or until ctx ends; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// resolveLeader asks the LeaderResolver, then each JobMaster's ClusterStatus (an unreachable
// one is skipped: another may name the leader).
func (tm *TaskManager) resolveLeader(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, tm.cfg.RPCTimeout)
	defer cancel()
	if r := tm.cfg.LeaderResolver; r != nil {
		if addr, err := r(ctx); err == nil && addr != "" {
			return addr, nil
		}
	}
	for _, jm := range tm.jobMasters() {
		conn, err := tm.conns.get(jm)
		if err != nil {
			continue
		}
		resp, err := pb.NewClientServiceClient(conn).ClusterStatus(ctx, &pb.ClusterStatusRequest{})
		if err == nil && resp.GetLeaderGrpcAddress() != "" {
			return resp.GetLeaderGrpcAddress(), nil
		}
	}
	return "", ErrNoLeader
}

// cutOffFrom returns the address of a live leader this TM is cut off from, or "". It is called
// once no leader has been reached for FenceTimeout. A JobMaster naming an established leader
// is the evidence that one is alive: if it is the leader this TM has met (its epoch is not
// newer than the TM's), the TM has been cut off from it for FenceTimeout already; a newer
// leader gets FenceTimeout from the moment it is first seen to reach the TM (it asks for the
// TM's report as soon as it is established). When no JobMaster names a leader (a leader gap)
// or none answers, the TM keeps its tasks for the leader grace.
func (tm *TaskManager) cutOffFrom(ctx context.Context) string {
	tm.fenceChecks.Add(1)
	addr, epoch := tm.establishedLeader(ctx)
	if addr == "" {
		return ""
	}
	tm.mu.Lock()
	defer tm.mu.Unlock()
	if epoch <= tm.epoch {
		return addr
	}
	if tm.newLeaderSeen.epoch != epoch {
		tm.newLeaderSeen.epoch, tm.newLeaderSeen.at = epoch, time.Now()
		return ""
	}
	if time.Since(tm.newLeaderSeen.at) > tm.fenceTimeoutLocked() {
		return addr
	}
	return ""
}

// probe asks the JobMaster at addr for its status, bounded like the fence check.
func (tm *TaskManager) probe(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, tm.fenceCheckTimeout())
	defer cancel()
	conn, err := tm.conns.get(addr)
	if err != nil {
		return err
	}
	_, err = pb.NewClientServiceClient(conn).ClusterStatus(ctx, &pb.ClusterStatusRequest{})
	return err
}

// fenceCheckTimeout bounds one fence check: the RPC timeout, or the fence timeout in force (the
// leader's, once registered) when shorter. The TM's own setting may be 0 (off) while its
// leader's is not.
func (tm *TaskManager) fenceCheckTimeout() time.Duration {
	tm.mu.Lock()
	f := tm.fenceTimeoutLocked()
	tm.mu.Unlock()
	if f <= 0 {
		return tm.cfg.RPCTimeout
	}
	return min(tm.cfg.RPCTimeout, f)
}

// establishedLeader asks the JobMasters for the established leader and its epoch.
func (tm *TaskManager) establishedLeader(ctx context.Context) (string, uint64) {
	ctx, cancel := context.WithTimeout(ctx, tm.fenceCheckTimeout())
	defer cancel()
	for _, jm := range tm.jobMasters() {
		conn, err := tm.conns.get(jm)
		if err != nil {
			continue
		}
		resp, err := pb.NewClientServiceClient(conn).ClusterStatus(ctx, &pb.ClusterStatusRequest{})
		if err == nil && resp.GetLeaderGrpcAddress() != "" {
			return resp.GetLeaderGrpcAddress(), resp.GetEpoch()
		}
	}
	return "", 0
}

// jobMasters is the JobMasters to ask for the leader: the configured ones (--jm), then those
// DiscoverJobMasters knows (gossip), each once.
func (tm *TaskManager) jobMasters() []string {
	out := append([]string(nil), tm.cfg.JobMasters...)
	if d := tm.cfg.DiscoverJobMasters; d != nil {
		for _, a := range d() {
			if a != "" && !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	return out
}

// register finds the leader and registers this TM with it.
func (tm *TaskManager) register(ctx context.Context) error {
	tm.mu.Lock()
	addr := tm.leaderAddr
	if tm.needResolve {
		addr = ""
	}
	epoch := tm.epoch
	tm.mu.Unlock()
	if addr == "" {
		var err error
		if addr, err = tm.resolveLeader(ctx); err != nil {
			return err
		}
	}
	conn, err := tm.conns.get(addr)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, tm.cfg.RPCTimeout)
	defer cancel()
	sent := time.Now()
	resp, err := pb.NewJobMasterServiceClient(conn).RegisterTaskManager(cctx, &pb.RegisterTaskManagerRequest{
		TmId: tm.cfg.ID, GrpcAddress: tm.cfg.AdvertiseGRPC, DataAddress: tm.cfg.AdvertiseData,
		Slots: int32(tm.cfg.Slots), EpochSeen: epoch, Incarnation: tm.cfg.Incarnation,
		ProtocolVersion: tm.protocol(),
	})
	// Not a leader being unreachable or not elected yet: this TaskManager is refused (its
	// slots, its protocol, ...); say so loudly, once per answer, count it and keep it.
	tm.noteAnswer(CallRegister, addr, err, false)
	if err != nil {
		tm.mu.Lock()
		if tm.leaderAddr == "" || tm.leaderAddr == addr {
			tm.leaderAddr = addr // so leaderFailed can act on it
		}
		tm.mu.Unlock()
		tm.leaderFailed(addr, err)
		return fmt.Errorf("register with %s: %w", addr, err)
	}
	tm.mu.Lock()
	if resp.GetEpoch() != 0 && resp.GetEpoch() < tm.epoch {
		tm.needResolve = true
		tm.mu.Unlock()
		return fmt.Errorf("%w: %s has epoch %d, seen %d", ErrStaleLeader, addr, resp.GetEpoch(), epoch)
	}
	tm.adoptEpochLocked(resp.GetEpoch(), "register")
	changed := tm.leaderAddr != addr
	tm.leaderAddr, tm.leaderID = addr, resp.GetLeaderId()
	tm.registered, tm.needResolve = true, false
	tm.answeredLocked(sent)
	if ms := resp.GetHeartbeatIntervalMs(); ms > 0 {
		tm.hbInterval = time.Duration(ms) * time.Millisecond
	}
	tm.adoptRuleLocked(resp)
	tm.adoptPoolLocked(resp.GetPool())
	tm.mu.Unlock()
	tm.log.Info("registered with leader", "leader", addr, "leader_id", resp.GetLeaderId(), "epoch", resp.GetEpoch())
	tm.events.registered(resp.GetLeaderId(), resp.GetEpoch(), tm.cfg.Incarnation)
	if changed {
		tm.outbox.wake()
	}
	return nil
}

// heartbeat reports the deployed executions to the leader.
func (tm *TaskManager) heartbeat(ctx context.Context) error {
	tm.mu.Lock()
	addr := tm.leaderAddr
	req := &pb.HeartbeatRequest{TmId: tm.cfg.ID, EpochSeen: tm.epoch, FreeSlots: int32(tm.freeSlotsLocked()), Incarnation: tm.cfg.Incarnation, PoolVersion: tm.pool.version, PoolRevision: tm.pool.revision}
	// Every task the TM still holds, terminal ones included until the leader acknowledges them:
	// a FINISHED whose UpdateTaskExecutionState is delayed (the outbox backing off) is still
	// here, so the leader does not take it for missing and fail it.
	for _, t := range sortedTasks(tm.tasks) {
		if !t.silent {
			req.Deployed = append(req.Deployed, &pb.DeployedExecution{JobId: t.tdd.GetJobId(), AttemptId: t.attempt(), State: t.state})
		}
	}
	tm.mu.Unlock()
	if addr == "" {
		tm.markUnregistered()
		return ErrNoLeader
	}
	conn, err := tm.conns.get(addr)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, tm.cfg.RPCTimeout)
	defer cancel()
	sent := time.Now()
	resp, err := pb.NewJobMasterServiceClient(conn).Heartbeat(cctx, req)
	tm.noteAnswer(CallHeartbeat, addr, err, false)
	if err != nil {
		tm.leaderFailed(addr, err)
		return fmt.Errorf("heartbeat to %s: %w", addr, err)
	}
	tm.mu.Lock()
	defer tm.mu.Unlock()
	if resp.GetEpoch() != 0 && resp.GetEpoch() < tm.epoch {
		tm.registered, tm.needResolve = false, true
		return fmt.Errorf("%w: %s has epoch %d, seen %d", ErrStaleLeader, addr, resp.GetEpoch(), tm.epoch)
	}
	tm.adoptEpochLocked(resp.GetEpoch(), "heartbeat")
	tm.answeredLocked(sent)
	tm.adoptPoolLocked(resp.GetPool())
	tm.heartbeats.Add(1)
	if resp.GetUnknownTaskManager() {
		tm.registered = false
		tm.wake()
	}
	return nil
}

func (tm *TaskManager) markUnregistered() {
	tm.mu.Lock()
	tm.registered = false
	tm.mu.Unlock()
}

// leaderFailed reacts to a failed call to the leader at addr: follow a NOT_LEADER hint, keep
// the leader while it reconciles, otherwise re-resolve and register again.
func (tm *TaskManager) leaderFailed(addr string, err error) {
	if transport.IsReconciling(err) {
		return
	}
	tm.mu.Lock()
	if addr == "" || tm.leaderAddr != addr {
		tm.mu.Unlock()
		return
	}
	if hint := transport.LeaderHint(err); hint != "" && hint != addr {
		tm.leaderAddr, tm.needResolve = hint, false
	} else {
		tm.needResolve = true
	}
	tm.registered = false
	tm.mu.Unlock()
	tm.wake()
}

// adoptEpochLocked raises the highest seen epoch.
func (tm *TaskManager) adoptEpochLocked(epoch uint64, via string) {
	if epoch > tm.epoch {
		tm.log.Info("adopting leader epoch", "old", tm.epoch, "new", epoch, "via", via)
		tm.epoch = epoch
	}
}

// graceLoop cancels every task when no leader has been reached for LeaderGrace, so an isolated
// TM frees its slots, or sooner (FenceTimeout) when a JobMaster names a live leader this TM
// cannot reach: that leader is about to declare this TM lost and redeploy its tasks.
func (tm *TaskManager) graceLoop(ctx context.Context) {
	tick := min(max(tm.cfg.LeaderGrace/10, 5*time.Millisecond), time.Second)
	if f := tm.cfg.FenceTimeout; f > 0 {
		tick = min(tick, max(f/5, 5*time.Millisecond))
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
		tm.mu.Lock()
		contact := tm.lastContact
		f, grace := tm.fenceTimeoutLocked(), tm.leaderGraceLocked()
		tm.mu.Unlock()
		since := time.Since(contact)
		if f > 0 && since > f && since <= grace {
			if leader := tm.cutOffFrom(ctx); leader != "" {
				// Asking the JobMasters takes time; a leader may have reached this TM meanwhile
				// (a new leader's RequestReport), and then it is not cut off.
				tm.mu.Lock()
				reached := tm.lastContact.After(contact)
				tm.mu.Unlock()
				if reached {
					continue
				}
				// Cut off means unreachable: a named leader that answers this TM is not (it may be
				// between winning an election and establishing its term, when it refuses the
				// heartbeats, and will reach the TM once established).
				if err := tm.probe(ctx, leader); err == nil {
					tm.log.Debug("named leader answers; not fencing", "leader", leader, "since_contact", since)
					continue
				}
				why := fmt.Sprintf("cut off from the live leader at %s for %v", leader, since.Round(time.Millisecond))
				if ts := tm.cancelAll(why); len(ts) > 0 {
					tm.log.Error("FENCED: cut off from a live leader; cancelling every task", "leader", leader, "tasks", len(ts), "since_contact", since)
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
		if ts := tm.cancelAll(why); len(ts) > 0 {
			tm.log.Error("LEADER GRACE EXPIRED: cancelling every task", "tasks", len(ts), "since_contact", since, "grace", grace)
		}
	}
}

// disown cancels an attempt the leader no longer owns, without reporting it again.
func (tm *TaskManager) disown(attempt string) {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	t := tm.tasks[attempt]
	if t == nil {
		return
	}
	t.silent = true
	if !isTerminal(t.state) {
		tm.cancelLocked(t, "leader does not own the attempt (accepted=false)")
	}
}
