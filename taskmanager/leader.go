package taskmanager

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// leaderLink is the TaskManager's contact with the JobMaster leader: it finds the leader,
// registers, heartbeats, follows NOT_LEADER hints and new leaders' announcements, and keeps
// the leader's refusals (refusal.go). It reads the slot table for its heartbeats and hands the
// leader's answers (epoch, pool, the rule's timings) to the fence. Lock order: TaskManager.mu,
// then leaderLink.mu, then fence.mu.
type leaderLink struct {
	cfg    Config
	log    hclog.Logger
	conns  *connPool
	jms    *jobMasters
	fence  *fence
	table  *slotTable
	events *eventLog
	// wakeOutbox makes the outbox's backing-off workers retry now (a new leader is known).
	wakeOutbox func()
	kick       chan struct{}

	mu          sync.Mutex
	addr, id    string // the leader's gRPC address and id
	registered  bool
	needResolve bool
	hbInterval  time.Duration
	// refusedWith: the last refusal logged per call; refusal: the current refusal;
	// refusalCounts: refusals by call and code (refusal.go).
	refusedWith   map[string]string
	refusal       *Refusal
	refusalCounts map[[2]string]int64

	// heartbeats counts the heartbeats the leader answered; contactFailures the failed
	// registrations and heartbeats.
	heartbeats, contactFailures atomic.Int64
}

func newLeaderLink(cfg Config, log hclog.Logger, conns *connPool, f *fence, table *slotTable, events *eventLog) *leaderLink {
	return &leaderLink{
		cfg: cfg, log: log, conns: conns, jms: f.jms, fence: f, table: table, events: events,
		kick: make(chan struct{}, 1), hbInterval: cfg.HeartbeatInterval, wakeOutbox: func() {},
	}
}

// loop registers with the leader and heartbeats; any failure makes it re-resolve the leader
// and register again.
func (l *leaderLink) loop(ctx context.Context) {
	lg := l.log.Named("leader")
	failures := 0
	for {
		l.mu.Lock()
		registered := l.registered
		l.mu.Unlock()
		var err error
		if registered {
			err = l.heartbeat(ctx)
		} else {
			err = l.register(ctx)
		}
		if err != nil && ctx.Err() == nil {
			lg.Debug("leader contact failed", "registered", registered, "error", err)
		}
		if err == nil {
			failures = 0
		} else {
			l.contactFailures.Add(1)
			failures++
		}
		iv := l.interval() // read after the call: a registration sets the leader's
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
		case <-l.kick:
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

// leader is the gRPC address of the leader the TM talks to, or "".
func (l *leaderLink) leader() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.addr
}

// interval is the heartbeat interval in force (the leader's, once registered).
func (l *leaderLink) interval() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.hbInterval
}

// wake nudges the loop (re-register, re-resolve).
func (l *leaderLink) wake() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// protocol is the protocol version this TM registers with.
func (l *leaderLink) protocol() uint32 {
	if l.cfg.ProtocolVersion != 0 {
		return l.cfg.ProtocolVersion
	}
	return ProtocolVersion
}

// register finds the leader and registers this TM with it.
func (l *leaderLink) register(ctx context.Context) error {
	l.mu.Lock()
	addr := l.addr
	if l.needResolve {
		addr = ""
	}
	l.mu.Unlock()
	epoch := l.fence.current()
	if addr == "" {
		var err error
		if addr, err = l.jms.resolve(ctx); err != nil {
			return err
		}
	}
	conn, err := l.conns.get(addr)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, l.cfg.RPCTimeout)
	defer cancel()
	sent := time.Now()
	resp, err := pb.NewJobMasterServiceClient(conn).RegisterTaskManager(cctx, &pb.RegisterTaskManagerRequest{
		TmId: l.cfg.ID, GrpcAddress: l.cfg.AdvertiseGRPC, DataAddress: l.cfg.AdvertiseData,
		Slots: int32(l.cfg.Slots), EpochSeen: epoch, Incarnation: l.cfg.Incarnation,
		ProtocolVersion: l.protocol(),
	})
	// Not a leader being unreachable or not elected yet: this TaskManager is refused (its
	// slots, its protocol, ...); say so loudly, once per answer, count it and keep it.
	l.noteAnswer(CallRegister, addr, err, false)
	if err != nil {
		l.mu.Lock()
		if l.addr == "" || l.addr == addr {
			l.addr = addr // so failed can act on it
		}
		l.mu.Unlock()
		l.failed(addr, err)
		return fmt.Errorf("register with %s: %w", addr, err)
	}
	l.mu.Lock()
	if _, ok := l.fence.answered(resp.GetEpoch(), sent, "register", resp, resp.GetPool()); !ok {
		l.needResolve = true
		l.mu.Unlock()
		return fmt.Errorf("%w: %s has epoch %d, seen %d", ErrStaleLeader, addr, resp.GetEpoch(), epoch)
	}
	changed := l.addr != addr
	l.addr, l.id = addr, resp.GetLeaderId()
	l.registered, l.needResolve = true, false
	if ms := resp.GetHeartbeatIntervalMs(); ms > 0 {
		l.hbInterval = time.Duration(ms) * time.Millisecond
	}
	l.mu.Unlock()
	l.log.Info("registered with leader", "leader", addr, "leader_id", resp.GetLeaderId(), "epoch", resp.GetEpoch())
	l.events.registered(resp.GetLeaderId(), resp.GetEpoch(), l.cfg.Incarnation)
	if changed {
		l.wakeOutbox()
	}
	return nil
}

// heartbeat reports the deployed executions to the leader.
func (l *leaderLink) heartbeat(ctx context.Context) error {
	addr := l.leader()
	req := &pb.HeartbeatRequest{TmId: l.cfg.ID, Incarnation: l.cfg.Incarnation}
	// The tasks, the free slots and the epoch are read under the task lock, as the leader's
	// calls change them: the epoch is the one every listed task was accepted under, or later.
	l.table.mu.Lock()
	req.FreeSlots, req.Deployed = int32(l.table.freeLocked()), l.table.deployedLocked()
	req.FlowClockNs = l.table.flowLocked(req.Deployed)
	req.EpochSeen = l.fence.current()
	req.PoolVersion, req.PoolRevision = l.fence.poolVersion()
	l.table.mu.Unlock()
	if addr == "" {
		l.mu.Lock()
		l.registered = false
		l.mu.Unlock()
		return ErrNoLeader
	}
	conn, err := l.conns.get(addr)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, l.cfg.RPCTimeout)
	defer cancel()
	sent := time.Now()
	resp, err := pb.NewJobMasterServiceClient(conn).Heartbeat(cctx, req)
	l.noteAnswer(CallHeartbeat, addr, err, false)
	if err != nil {
		l.failed(addr, err)
		return fmt.Errorf("heartbeat to %s: %w", addr, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if seen, ok := l.fence.answered(resp.GetEpoch(), sent, "heartbeat", nil, resp.GetPool()); !ok {
		l.registered, l.needResolve = false, true
		return fmt.Errorf("%w: %s has epoch %d, seen %d", ErrStaleLeader, addr, resp.GetEpoch(), seen)
	}
	l.heartbeats.Add(1)
	if resp.GetUnknownTaskManager() {
		l.registered = false
		l.wake()
	}
	return nil
}

// failed reacts to a failed call to the leader at addr: follow a NOT_LEADER hint, keep the
// leader while it reconciles, otherwise re-resolve and register again.
func (l *leaderLink) failed(addr string, err error) {
	if transport.IsReconciling(err) {
		return
	}
	l.mu.Lock()
	if addr == "" || l.addr != addr {
		l.mu.Unlock()
		return
	}
	if hint := transport.LeaderHint(err); hint != "" && hint != addr {
		l.addr, l.needResolve = hint, false
	} else {
		l.needResolve = true
	}
	l.registered = false
	l.mu.Unlock()
	l.wake()
}

// announced follows a new leader that announced itself (RequestReport) and reports whether it
// is another than the one followed: the TM registers with it.
func (l *leaderLink) announced(addr, id string, epoch uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if addr == "" || addr == l.addr {
		return false
	}
	l.log.Info("leader announced itself", "leader", addr, "leader_id", id, "epoch", epoch)
	l.addr, l.id = addr, id
	l.registered, l.needResolve = false, false
	return true
}
