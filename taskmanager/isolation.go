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

// poolState is what the TM knows of the pool and of its own leader contact (guarded by f.mu).
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
func (f *fence) answeredLocked(sent time.Time) {
	f.lastContact = time.Now()
	if sent.After(f.pool.contactAt) {
		f.pool.contactAt = sent
	}
	if f.pool.epochOf != f.epoch || f.pool.epochAt.IsZero() {
		f.pool.epochOf, f.pool.epochAt = f.epoch, sent
	}
}

// fenceTimeoutLocked is the fence timeout in force: the leader's, else the TM's own.
func (f *fence) fenceTimeoutLocked() time.Duration {
	if f.pool.fence > 0 {
		return f.pool.fence
	}
	return f.cfg.FenceTimeout
}

func (f *fence) poolTimingsLocked() (interval, timeout time.Duration) {
	interval, timeout = defaultPoolQueryInterval, defaultPoolQueryTimeout
	if f.pool.interval > 0 {
		interval = f.pool.interval
	}
	if f.pool.timeout > 0 {
		timeout = f.pool.timeout
	}
	return interval, timeout
}

// adoptRuleLocked takes the rule's timings from a registration response.
func (f *fence) adoptRuleLocked(r *pb.RegisterTaskManagerResponse) {
	if ms := r.GetFenceTimeoutMs(); ms > 0 {
		f.pool.fence = time.Duration(ms) * time.Millisecond
	}
	if ms := r.GetPoolQueryIntervalMs(); ms > 0 {
		f.pool.interval = time.Duration(ms) * time.Millisecond
	}
	if ms := r.GetPoolQueryTimeoutMs(); ms > 0 {
		f.pool.timeout = time.Duration(ms) * time.Millisecond
	}
	if ms := r.GetLeaderGraceMs(); ms > 0 {
		f.pool.grace = time.Duration(ms) * time.Millisecond
	}
}

// leaderGraceLocked is the leader grace in force: the leader's, else the TM's own.
func (f *fence) leaderGraceLocked() time.Duration {
	if f.pool.grace > 0 {
		return f.pool.grace
	}
	return f.cfg.LeaderGrace
}

// adoptPoolLocked takes a newer pool view from the leader.
func (f *fence) adoptPoolLocked(v *pb.PoolView) {
	if v == nil || v.Revision <= f.pool.revision {
		return
	}
	peers := make([]*pb.PoolPeer, 0, len(v.Peers))
	for _, p := range v.Peers {
		if p.GetTmId() != "" {
			peers = append(peers, &pb.PoolPeer{TmId: p.TmId, GrpcAddress: p.GrpcAddress})
		}
	}
	sort.Slice(peers, func(i, j int) bool { return peers[i].TmId < peers[j].TmId })
	f.pool.version, f.pool.revision, f.pool.peers = v.Version, v.Revision, peers
	f.log.Info("pool", "version", v.Version, "revision", v.Revision, "members", len(peers))
}

// poolVersion is the pool version and revision the TM knows (0: none).
func (f *fence) poolVersion() (version, revision uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pool.version, f.pool.revision
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
	f *fence
}

func (s *peerService) LeaderContact(_ context.Context, req *pb.LeaderContactRequest) (*pb.LeaderContactResponse, error) {
	f := s.f
	f.mu.Lock()
	defer f.mu.Unlock()
	// The epoch is that of the leader that answered last, not the highest seen: a report request
	// of a newer leader is no contact here, and pairing its epoch with an older contact would
	// tell the asking TM that the newer leader reached this one.
	resp := &pb.LeaderContactResponse{TmId: f.cfg.ID, Epoch: f.pool.epochOf, ContactAgeMs: ageMs(f.pool.contactAt), EpochContactAgeMs: ageMs(f.pool.epochAt), PoolVersion: f.pool.version}
	f.peerQueries.Add(1)
	return resp, nil
}

// poolLoop applies the isolation rule on its own clock, every query interval: the leader's
// redeploy delay counts on a check at least that often, so nothing else may hold it up (the
// JobMaster questions of graceLoop wait up to an RPC timeout each when the JobMasters are cut
// off by DROP; a pool check behind them came after the leader had redeployed: jepsen
// tm-from-jms seed 1). It counts from the last heartbeat the leader answered, which calls from
// the leader do not refresh: a TM whose heartbeats fail must not look in contact to its pool.
func (f *fence) poolLoop(ctx context.Context) {
	for {
		f.mu.Lock()
		interval, _ := f.poolTimingsLocked()
		answered, contact := f.pool.contactAt, f.lastContact
		ft, grace := f.fenceTimeoutLocked(), f.leaderGraceLocked()
		f.mu.Unlock()
		if !sleepCtx(ctx, interval) {
			return
		}
		if answered.IsZero() || answered.After(contact) {
			answered = contact
		}
		since := time.Since(answered)
		if ft > 0 && since > ft/2 && time.Since(contact) <= grace {
			f.warmPool()
		}
		if ft <= 0 || since <= ft || time.Since(contact) > grace {
			continue // in contact, the rule off, or past the grace (graceLoop has cancelled)
		}
		if why := f.poolCheck(ctx); why != "" {
			if n := f.stop(why); n > 0 {
				f.log.Error("FENCED: the pool shows no JobMaster outage; cancelling every task", "why", why, "tasks", n, "since_heartbeat", since.Round(time.Millisecond))
			}
		}
	}
}

// warmPool connects to every other pool member ahead of a check, once half the fence timeout
// has passed without an answer from a leader: the check's queries then find their connections
// ready and need a round trip each within the query timeout, not a dial as well (in-process
// test clusters on a loaded machine lost whole checks to dials: every member "unreachable").
// Connecting to an already ready member does nothing.
func (f *fence) warmPool() {
	f.mu.Lock()
	peers := append([]*pb.PoolPeer(nil), f.pool.peers...)
	f.mu.Unlock()
	for _, p := range peers {
		if p.TmId == f.cfg.ID || p.GrpcAddress == "" {
			continue
		}
		if conn, err := f.conns.peer(p.GrpcAddress); err == nil {
			conn.Connect()
		}
	}
}

// poolCheck runs the rule once no leader has answered a heartbeat for the fence timeout. It returns "" to keep the tasks, or why they must stop. It
// decides only once contact is older than the fence timeout plus a heartbeat interval and a
// query timeout (a member whose heartbeats were just out of phase with this TM's has then
// passed the fence timeout too), and asks the pool at most once per query interval.
func (f *fence) poolCheck(ctx context.Context) string {
	hb := f.interval()
	f.mu.Lock()
	contact := f.pool.contactAt
	if contact.IsZero() {
		contact = f.lastContact // never answered: counted from the start
	}
	ft := f.fenceTimeoutLocked()
	interval, timeout := f.poolTimingsLocked()
	since := time.Since(contact)
	switch {
	case ft <= 0:
		f.mu.Unlock()
		return "" // the fence is off: the leader grace alone
	case since <= ft+hb+timeout:
		f.mu.Unlock()
		return ""
	case f.pool.version == 0:
		f.mu.Unlock()
		// Without a pool nothing can confirm an outage (the leader counts on this: it treats
		// a member that never confirmed a pool as one that may know none).
		return fmt.Sprintf("no leader contact for %v and no pool known to confirm a JobMaster outage", since.Round(time.Millisecond))
	case time.Since(f.pool.lastCheck) < interval:
		v := f.pool.lastVerdict
		f.mu.Unlock()
		return v
	}
	f.pool.lastCheck = time.Now()
	peers := append([]*pb.PoolPeer(nil), f.pool.peers...)
	// Answers are weighed against the epoch of the leader that last answered this TM: a newer
	// leader that only reached it by a call (a report request) has not heard from it yet.
	myEpoch := f.pool.epochOf
	f.mu.Unlock()

	verdict := f.askPool(ctx, peers, myEpoch, ft, timeout)

	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pool.contactAt.After(contact) {
		verdict = "" // the leader answered this TM meanwhile
	}
	f.pool.lastVerdict = verdict
	return verdict
}

// askPool queries every other member in parallel and applies the rule to the answers.
func (f *fence) askPool(ctx context.Context, peers []*pb.PoolPeer, myEpoch uint64, ft, timeout time.Duration) string {
	f.poolChecks.Add(1)
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
		if p.TmId == f.cfg.ID {
			member = true
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := answer{peer: p.TmId, sent: time.Now()}
			if conn, err := f.conns.peer(p.GrpcAddress); err != nil {
				a.err = err
			} else {
				a.resp, a.err = pb.NewPeerServiceClient(conn).LeaderContact(qctx, &pb.LeaderContactRequest{TmId: f.cfg.ID})
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
		f.mu.Lock()
		if f.pool.newer.epoch != newest || newestAt.Before(f.pool.newer.at) {
			f.pool.newer.epoch, f.pool.newer.at = newest, newestAt
		}
		at := f.pool.newer.at
		f.mu.Unlock()
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
