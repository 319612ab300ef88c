package taskmanager

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/jmcluster/jmcluster/internal/logsum"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// The isolation rule (docs/reconciliation.md, "The isolated TaskManager"): a TM that has not
// reached a leader for its fence timeout asks the pool — the committed set of TMs the leader
// sends it — whether anyone has. It keeps its tasks only while a strict majority of the pool
// (itself included) answers that it has had no leader contact within the fence timeout either:
// a JobMaster outage, which tasks are meant to survive. A pool member that reached the leader
// this TM knows (or an older one) proves a live leader this TM cannot reach: it cancels its
// tasks. A member that reached a newer leader gives that leader the fence timeout from its
// first contact to reach this TM too. Anything else (no majority answers) cancels the tasks.
// The leader redeploys a silent TM's attempts only while a strict majority of that TM's pool
// heartbeats to it, so the two majorities share a member whose answer reveals the leader.

// Defaults of the rule's timings until a leader sends its own.
const (
	defaultPoolQueryInterval = 500 * time.Millisecond
	defaultPoolQueryTimeout  = time.Second
)

// poolState is what the TM knows of the pool and of its own leader contact (guarded by tm.mu).
type poolState struct {
	version, revision uint64
	peers             []*pb.PoolPeer // sorted by id

	// The rule's timings as the leader sent them (0: the TM's own configuration).
	fence, interval, timeout, grace time.Duration

	// contactAt: the last heartbeat or registration a leader answered, timed when it was sent
	// (zero: never); epochOf: that leader's epoch; epochAt: the first answered one of epochOf.
	contactAt, epochAt time.Time
	epochOf            uint64

	// newer: a newer leader that pool members reached, and the earliest such contact (on this
	// TM's clock), so it gets the fence timeout from then to reach this TM.
	newer struct {
		epoch uint64
		at    time.Time
	}
	// lastCheck and lastVerdict: the last pool query and its outcome ("" kept the tasks).
	lastCheck   time.Time
	lastVerdict string
}

// answeredLocked records that the leader answered a heartbeat or registration the TM sent at
// sent. For the isolation rule that is the TM's contact, timed at the send, so it is never
// later than the leader's record of it (the leader's streaks; calls the leader makes count for
// the fence and the grace, not here).
func (tm *TaskManager) answeredLocked(sent time.Time) {
	tm.lastContact = time.Now()
	if sent.After(tm.pool.contactAt) {
		tm.pool.contactAt = sent
	}
	if tm.pool.epochOf != tm.epoch || tm.pool.epochAt.IsZero() {
		tm.pool.epochOf, tm.pool.epochAt = tm.epoch, sent
	}
}

// fenceTimeoutLocked is the fence timeout in force: the leader's, else the TM's own.
func (tm *TaskManager) fenceTimeoutLocked() time.Duration {
	if tm.pool.fence > 0 {
		return tm.pool.fence
	}
	return tm.cfg.FenceTimeout
}

func (tm *TaskManager) poolTimingsLocked() (interval, timeout time.Duration) {
	interval, timeout = defaultPoolQueryInterval, defaultPoolQueryTimeout
	if tm.pool.interval > 0 {
		interval = tm.pool.interval
	}
	if tm.pool.timeout > 0 {
		timeout = tm.pool.timeout
	}
	return interval, timeout
}

// adoptRuleLocked takes the rule's timings from a registration response.
func (tm *TaskManager) adoptRuleLocked(r *pb.RegisterTaskManagerResponse) {
	if ms := r.GetFenceTimeoutMs(); ms > 0 {
		tm.pool.fence = time.Duration(ms) * time.Millisecond
	}
	if ms := r.GetPoolQueryIntervalMs(); ms > 0 {
		tm.pool.interval = time.Duration(ms) * time.Millisecond
	}
	if ms := r.GetPoolQueryTimeoutMs(); ms > 0 {
		tm.pool.timeout = time.Duration(ms) * time.Millisecond
	}
	if ms := r.GetLeaderGraceMs(); ms > 0 {
		tm.pool.grace = time.Duration(ms) * time.Millisecond
	}
}

// leaderGraceLocked is the leader grace in force: the leader's, else the TM's own.
func (tm *TaskManager) leaderGraceLocked() time.Duration {
	if tm.pool.grace > 0 {
		return tm.pool.grace
	}
	return tm.cfg.LeaderGrace
}

// adoptPoolLocked takes a newer pool view from the leader.
func (tm *TaskManager) adoptPoolLocked(v *pb.PoolView) {
	if v == nil || v.Revision <= tm.pool.revision {
		return
	}
	peers := make([]*pb.PoolPeer, 0, len(v.Peers))
	for _, p := range v.Peers {
		if p.GetTmId() != "" {
			peers = append(peers, &pb.PoolPeer{TmId: p.TmId, GrpcAddress: p.GrpcAddress})
		}
	}
	sort.Slice(peers, func(i, j int) bool { return peers[i].TmId < peers[j].TmId })
	tm.pool.version, tm.pool.revision, tm.pool.peers = v.Version, v.Revision, peers
	tm.log.Info("pool", "version", v.Version, "revision", v.Revision, "members", len(peers))
}

// PoolVersion is the pool version the TM knows (0: none).
func (tm *TaskManager) PoolVersion() uint64 {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.pool.version
}

// ageMs is the age of t in milliseconds, -1 for the zero time.
func ageMs(t time.Time) int64 {
	if t.IsZero() {
		return -1
	}
	return time.Since(t).Milliseconds()
}

// peerService answers other TMs' pool queries.
type peerService struct {
	pb.UnimplementedPeerServiceServer
	tm *TaskManager
}

func (s *peerService) LeaderContact(_ context.Context, req *pb.LeaderContactRequest) (*pb.LeaderContactResponse, error) {
	tm := s.tm
	tm.mu.Lock()
	defer tm.mu.Unlock()
	// The epoch is that of the leader that answered last, not the highest seen: a report request
	// of a newer leader is no contact here, and pairing its epoch with an older contact would
	// tell the asking TM that the newer leader reached this one.
	resp := &pb.LeaderContactResponse{TmId: tm.cfg.ID, Epoch: tm.pool.epochOf, ContactAgeMs: ageMs(tm.pool.contactAt), EpochContactAgeMs: ageMs(tm.pool.epochAt), PoolVersion: tm.pool.version}
	tm.peerQueries.Add(1)
	return resp, nil
}

// poolLoop applies the isolation rule on its own clock, every query interval: the leader's
// redeploy delay counts on a check at least that often, so nothing else may hold it up (the
// JobMaster questions of graceLoop wait up to an RPC timeout each when the JobMasters are cut
// off by DROP; a pool check behind them came after the leader had redeployed: jepsen
// tm-from-jms seed 1). It counts from the last heartbeat the leader answered, which calls from
// the leader do not refresh: a TM whose heartbeats fail must not look in contact to its pool.
func (tm *TaskManager) poolLoop(ctx context.Context) {
	for {
		tm.mu.Lock()
		interval, _ := tm.poolTimingsLocked()
		answered, contact := tm.pool.contactAt, tm.lastContact
		f, grace := tm.fenceTimeoutLocked(), tm.leaderGraceLocked()
		tm.mu.Unlock()
		if !sleepCtx(ctx, interval) {
			return
		}
		if answered.IsZero() || answered.After(contact) {
			answered = contact
		}
		since := time.Since(answered)
		if f > 0 && since > f/2 && time.Since(contact) <= grace {
			tm.warmPool()
		}
		if f <= 0 || since <= f || time.Since(contact) > grace {
			continue // in contact, the rule off, or past the grace (graceLoop has cancelled)
		}
		if why := tm.poolCheck(ctx); why != "" {
			if ts := tm.cancelAll(why); len(ts) > 0 {
				tm.log.Error("FENCED: the pool shows no JobMaster outage; cancelling every task", "why", why, "tasks", len(ts), "since_heartbeat", since.Round(time.Millisecond))
			}
		}
	}
}

// warmPool connects to every other pool member ahead of a check, once half the fence timeout
// has passed without an answer from a leader: the check's queries then find their connections
// ready and need a round trip each within the query timeout, not a dial as well (in-process
// test clusters on a loaded machine lost whole checks to dials: every member "unreachable").
// Connecting to an already ready member does nothing.
func (tm *TaskManager) warmPool() {
	tm.mu.Lock()
	peers := append([]*pb.PoolPeer(nil), tm.pool.peers...)
	tm.mu.Unlock()
	for _, p := range peers {
		if p.TmId == tm.cfg.ID || p.GrpcAddress == "" {
			continue
		}
		if conn, err := tm.conns.peer(p.GrpcAddress); err == nil {
			conn.Connect()
		}
	}
}

// poolCheck runs the rule once no leader has answered a heartbeat for the fence timeout. It returns "" to keep the tasks, or why they must stop. It
// decides only once contact is older than the fence timeout plus a heartbeat interval and a
// query timeout (a member whose heartbeats were just out of phase with this TM's has then
// passed the fence timeout too), and asks the pool at most once per query interval.
func (tm *TaskManager) poolCheck(ctx context.Context) string {
	tm.mu.Lock()
	contact := tm.pool.contactAt
	if contact.IsZero() {
		contact = tm.lastContact // never answered: counted from the start
	}
	ft := tm.fenceTimeoutLocked()
	interval, timeout := tm.poolTimingsLocked()
	since := time.Since(contact)
	switch {
	case ft <= 0:
		tm.mu.Unlock()
		return "" // the fence is off: the leader grace alone
	case since <= ft+tm.hbInterval+timeout:
		tm.mu.Unlock()
		return ""
	case tm.pool.version == 0:
		tm.mu.Unlock()
		// Without a pool nothing can confirm an outage (the leader counts on this: it treats
		// a member that never confirmed a pool as one that may know none).
		return fmt.Sprintf("no leader contact for %v and no pool known to confirm a JobMaster outage", since.Round(time.Millisecond))
	case time.Since(tm.pool.lastCheck) < interval:
		v := tm.pool.lastVerdict
		tm.mu.Unlock()
		return v
	}
	tm.pool.lastCheck = time.Now()
	peers := append([]*pb.PoolPeer(nil), tm.pool.peers...)
	// Answers are weighed against the epoch of the leader that last answered this TM: a newer
	// leader that only reached it by a call (a report request) has not heard from it yet.
	myEpoch := tm.pool.epochOf
	tm.mu.Unlock()

	verdict := tm.askPool(ctx, peers, myEpoch, ft, timeout)

	tm.mu.Lock()
	defer tm.mu.Unlock()
	if tm.pool.contactAt.After(contact) {
		verdict = "" // the leader answered this TM meanwhile
	}
	tm.pool.lastVerdict = verdict
	return verdict
}

// askPool queries every other member in parallel and applies the rule to the answers.
func (tm *TaskManager) askPool(ctx context.Context, peers []*pb.PoolPeer, myEpoch uint64, ft, timeout time.Duration) string {
	tm.poolChecks.Add(1)
	type answer struct {
		peer string
		sent time.Time
		resp *pb.LeaderContactResponse
		err  error
	}
	var (
		mu      sync.Mutex
		answers []answer
		wg      sync.WaitGroup
		member  bool
	)
	qctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, p := range peers {
		if p.TmId == tm.cfg.ID {
			member = true
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := answer{peer: p.TmId, sent: time.Now()}
			if conn, err := tm.conns.peer(p.GrpcAddress); err != nil {
				a.err = err
			} else {
				a.resp, a.err = pb.NewPeerServiceClient(conn).LeaderContact(qctx, &pb.LeaderContactRequest{TmId: tm.cfg.ID})
			}
			mu.Lock()
			answers = append(answers, a)
			mu.Unlock()
		}()
	}
	wg.Wait()
	sort.Slice(answers, func(i, j int) bool { return answers[i].peer < answers[j].peer })

	size, quiet := len(peers), 0
	if member {
		quiet = 1
	}
	var failed []string
	var newest uint64
	var newestAt time.Time
	for _, a := range answers {
		if a.err != nil {
			failed = append(failed, a.peer)
			continue
		}
		r := a.resp
		if r.ContactAgeMs < 0 || time.Duration(r.ContactAgeMs)*time.Millisecond >= ft {
			quiet++
			continue
		}
		age := time.Duration(r.ContactAgeMs) * time.Millisecond
		if r.Epoch < myEpoch {
			quiet++ // a deposed leader: no evidence of a live one (the live leader's epoch is >= ours)
			continue
		}
		if r.Epoch == myEpoch {
			return fmt.Sprintf("pool member %s reached the leader of epoch %d %v ago; this TM has not been answered by it within the fence timeout (%v)",
				a.peer, r.Epoch, age.Round(time.Millisecond), ft)
		}
		// A newer leader: its first contact with that member, on this TM's clock (the earliest
		// it can have been, so the fence timeout it gets is not stretched by the query).
		first := a.sent.Add(-time.Duration(max(r.EpochContactAgeMs, r.ContactAgeMs)) * time.Millisecond)
		if r.Epoch > newest || (r.Epoch == newest && first.Before(newestAt)) {
			newest, newestAt = r.Epoch, first
		}
	}
	if newest > 0 {
		tm.mu.Lock()
		if tm.pool.newer.epoch != newest || newestAt.Before(tm.pool.newer.at) {
			tm.pool.newer.epoch, tm.pool.newer.at = newest, newestAt
		}
		at := tm.pool.newer.at
		tm.mu.Unlock()
		if waited := time.Since(at); waited > ft {
			return fmt.Sprintf("the leader of epoch %d reached pool members %v ago and not this TM (fence timeout %v)", newest, waited.Round(time.Millisecond), ft)
		}
		return ""
	}
	if majority := size/2 + 1; quiet < majority {
		return fmt.Sprintf("only %d of the %d pool members confirm a JobMaster outage (no leader contact within %v), %d needed; unreachable: %s",
			quiet, size, ft, majority, logsum.List(failed))
	}
	return ""
}
