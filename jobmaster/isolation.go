package jobmaster

import (
	"errors"
	"fmt"
	"time"

	"github.com/jmcluster/jmcluster/internal/setting"
)

// ClockDrift is the bound assumed on how far the rates of two hosts' monotonic clocks differ
// (1%: far above what NTP-disciplined or even free-running quartz clocks drift, about 0.01%).
// The isolation rule's margins multiply the fence timeout by 1 + ClockDrift.
const ClockDrift = 0.01

// RedeployDelayNeeded is the least redeploy delay (HeartbeatTimeout) the isolation rule needs
// for the given timings: a TM decides to stop its tasks once its leader contact is older than
// the fence timeout plus one heartbeat interval and one query timeout (so that members whose
// heartbeats were out of phase with its own have passed the fence timeout too), on a clock
// that may run ClockDrift slow; it asks at most one query interval later, and its question
// takes at most one query timeout.
func RedeployDelayNeeded(fence, heartbeat, interval, timeout time.Duration) time.Duration {
	decide := fence + heartbeat + timeout
	return time.Duration(float64(decide)*(1+ClockDrift)) + interval + timeout
}

// maxFenceTimeout is the longest fence timeout the configured redeploy delay allows.
func maxFenceTimeout(c Config) time.Duration {
	budget := c.HeartbeatTimeout - c.PoolQueryInterval - c.PoolQueryTimeout
	return time.Duration(float64(budget)/(1+ClockDrift)) - c.HeartbeatInterval - c.PoolQueryTimeout - time.Millisecond
}

// freshGap is the longest gap between two heartbeats of one TM within one heartbeat streak: a
// TM that heartbeats at least this often counts as in contact.
func (c Config) freshGap() time.Duration { return 2 * c.HeartbeatInterval }

// MinHeartbeatInterval is the least TaskManager heartbeat interval jmnode accepts (--tm-heartbeat-interval,
// and a TaskManager's own --heartbeat-interval): the leader takes a pause of its own longer
// than one interval for a stall (liveness.go) and answers no TaskManager until a quorum has
// confirmed it still leads; below 100 ms an ordinary scheduling delay on a loaded host does
// that. (The library accepts less: its tests run on fake clocks and idle machines.)
const MinHeartbeatInterval = 100 * time.Millisecond

// ErrInvalidConfig is the kind of every refusal of Validate (a *setting.Error).
var ErrInvalidConfig = errors.New("invalid jobmaster config")

// Validate refuses a configuration no cluster can work with, naming the field, the value and
// the rule (a *setting.Error; jmnode names the flag instead): a negative duration or count
// (zero means the default; SlotTimeout negative means wait forever); a TM leader grace that
// ends before a TM past its fence timeout has asked its pool once; a slot timeout within two
// heartbeat intervals (a deployment waits for a pool confirmation a heartbeat carries); and timings
// under which the isolation rule cannot hold: a redeploy delay (HeartbeatTimeout) not above
// RedeployDelayNeeded, or a fence timeout a TM in contact could reach between two heartbeats
// (fresh gap plus a query timeout).
func (c Config) Validate() error {
	for _, d := range []struct {
		field string
		v     time.Duration
	}{
		{"HeartbeatInterval", c.HeartbeatInterval}, {"HeartbeatTimeout", c.HeartbeatTimeout},
		{"FenceTimeout", c.FenceTimeout}, {"PoolQueryInterval", c.PoolQueryInterval},
		{"PoolQueryTimeout", c.PoolQueryTimeout}, {"TMLeaderGrace", c.TMLeaderGrace},
		{"DeadRefusalWindow", c.DeadRefusalWindow}, {"RetryAfter", c.RetryAfter},
		{"RPCTimeout", c.RPCTimeout}, {"TickInterval", c.TickInterval},
		{"RetainJobAge", c.RetainJobAge}, {"RetentionInterval", c.RetentionInterval},
	} {
		if err := setting.NonNegative(ErrInvalidConfig, d.field, d.v); err != nil {
			return err
		}
	}
	for _, n := range []struct {
		field string
		v     int
	}{
		{"DeadRefusals", c.DeadRefusals}, {"MaxBatch", c.MaxBatch}, {"RetainJobs", c.RetainJobs},
		{"SubmitBatchTasks", c.SubmitBatchTasks}, {"SubmitBatchBytes", c.SubmitBatchBytes},
		{"SubmitAttempts", c.SubmitAttempts}, {"MaxMessageSize", c.MaxMessageSize},
	} {
		if n.v < 0 {
			return setting.New(ErrInvalidConfig, n.field, n.v, "must not be negative")
		}
	}
	if err := c.validateArtifactLimits(); err != nil {
		return err
	}
	fenceGiven := c.FenceTimeout > 0
	c.setDefaults()
	if min := c.freshGap() + c.PoolQueryTimeout; !fenceGiven && c.FenceTimeout <= min {
		// The fence timeout was derived from the heartbeat timeout (the longest it allows), and
		// that leaves none a TM can use: the heartbeat timeout is what is too short.
		return setting.New(ErrInvalidConfig, "HeartbeatTimeout", c.HeartbeatTimeout, "the redeploy delay, leaves room for a fence timeout of at most %v, and a fence timeout must exceed two heartbeat intervals plus the pool query timeout (%v): raise --heartbeat-timeout (with the default fence timeout of 5s, above %v)",
			max(c.FenceTimeout, 0).Round(time.Millisecond), min, RedeployDelayNeeded(5*time.Second, c.HeartbeatInterval, c.PoolQueryInterval, c.PoolQueryTimeout).Round(time.Millisecond))
	}
	if ask := c.FenceTimeout + c.PoolQueryInterval + c.PoolQueryTimeout; c.TMLeaderGrace <= ask {
		return setting.New(ErrInvalidConfig, "TMLeaderGrace", c.TMLeaderGrace, "must exceed the fence timeout plus a pool query interval and timeout (%v + %v + %v = %v): a grace that ends before a TaskManager has asked its pool leaves the isolation rule no say, and every JobMaster outage that long stops every task",
			c.FenceTimeout, c.PoolQueryInterval, c.PoolQueryTimeout, ask)
	}
	if gap := c.freshGap(); c.SlotTimeout > 0 && c.SlotTimeout <= gap {
		return setting.New(ErrInvalidConfig, "SlotTimeout", c.SlotTimeout, "must exceed two heartbeat intervals (%v), or be negative (wait forever): a deployment waits for the TaskManagers to confirm a new pool version, which they do with their heartbeats", gap)
	}
	need := RedeployDelayNeeded(c.FenceTimeout, c.HeartbeatInterval, c.PoolQueryInterval, c.PoolQueryTimeout)
	if c.HeartbeatTimeout <= need {
		return setting.New(ErrInvalidConfig, "HeartbeatTimeout", c.HeartbeatTimeout, "the redeploy delay, must exceed (fence timeout %v + heartbeat interval %v + pool query timeout %v) x (1 + clock drift %.0f%%) + pool query interval %v + pool query timeout %v = %v: lower --fence-timeout or raise --heartbeat-timeout",
			c.FenceTimeout, c.HeartbeatInterval, c.PoolQueryTimeout, ClockDrift*100, c.PoolQueryInterval, c.PoolQueryTimeout, need)
	}
	if min := c.freshGap() + c.PoolQueryTimeout; c.FenceTimeout <= min {
		return setting.New(ErrInvalidConfig, "FenceTimeout", c.FenceTimeout, "must exceed two heartbeat intervals plus the pool query timeout (%v): a TM in contact with the leader must never look out of contact to its pool", min)
	}
	return nil
}

// streak is one TM's current run of heartbeats to this term's leader: when it began and the
// last one, by this leader's clock. A gap over freshGap ends a streak; a term starts with none,
// so every liveness timer counts from this leader's own contact (a new or returning leader
// never declares a TM lost because it was itself away).
type streak struct{ start, last time.Time }

// streakOf records a heartbeat (or registration) of tmID now.
func (w *tmWatch) streakOf(tmID string) {
	now := time.Now()
	w.streakMu.Lock()
	defer w.streakMu.Unlock()
	s := w.streaks[tmID]
	if s.last.IsZero() || now.Sub(s.last) > w.jm.cfg.freshGap() {
		s.start = now
		w.streakEpoch++ // a TM came back into contact: heldTMs must look again
	}
	s.last = now
	w.streaks[tmID] = s
	w.answered[tmID] = now
}

// noteAnswer records that this leader answers a heartbeat of tmID that it does not know (the
// TM counts the answer as contact: taskmanager answeredLocked). Answers older than the redeploy
// delay no longer matter to the rule and are dropped, so the map stays bounded.
func (w *tmWatch) noteAnswer(tmID string) {
	now := time.Now()
	w.streakMu.Lock()
	defer w.streakMu.Unlock()
	w.answered[tmID] = now
	if len(w.answered) > 1024 {
		for id, at := range w.answered {
			if now.Sub(at) > w.jm.cfg.HeartbeatTimeout {
				delete(w.answered, id)
			}
		}
	}
}

// mayRedeploy says whether the attempts of tmID, which is silent and not proven dead, may be
// redeployed at now (docs/reconciliation.md, "The isolated TaskManager"): for every pool
// version the TM may be counting on, a strict majority of its members must be in a heartbeat
// streak with this leader, and now must be HeartbeatTimeout past both the TM's last heartbeat
// to this leader and the start of those streaks (the latest of the majority's earliest). Any
// majority the TM can find then holds a member in contact with this leader, whose answer makes
// the TM stop its tasks within that delay. why says what is missing when the answer is no.
func (w *tmWatch) mayRedeploy(tmID string, now time.Time) (ok bool, why string) {
	versions, known := w.jm.state.PoolVersions(tmID)
	if !known {
		if _, _, _, member := w.jm.state.PoolMember(tmID); member {
			// A member whose oldest usable version is no longer kept may still count on it.
			return false, "its pool is not known (the versions it may use are no longer kept)"
		}
		return mayRedeployOutsidePool(w.contactOutsidePool(tmID), now, w.jm.cfg.HeartbeatTimeout)
	}
	gap, delay := w.jm.cfg.freshGap(), w.jm.cfg.HeartbeatTimeout
	w.streakMu.Lock()
	defer w.streakMu.Unlock()
	from := w.streaks[tmID].last
	for _, members := range versions {
		var starts []time.Time
		for _, id := range members {
			if s, ok := w.streaks[id]; ok && id != tmID && now.Sub(s.last) <= gap {
				starts = append(starts, s.start)
			}
		}
		need := len(members)/2 + 1
		if len(starts) < need {
			return false, fmt.Sprintf("only %d of its pool's %d members heartbeat to this leader, %d needed", len(starts), len(members), need)
		}
		sortTimes(starts)
		if s := starts[need-1]; s.After(from) {
			from = s
		}
	}
	if wait := from.Add(delay).Sub(now); wait > 0 {
		return false, fmt.Sprintf("the redeploy delay (%v) has %v to run", delay, wait.Round(time.Millisecond))
	}
	return true, ""
}

func sortTimes(ts []time.Time) {
	for i := 1; i < len(ts); i++ {
		for j := i; j > 0 && ts[j].Before(ts[j-1]); j-- {
			ts[j], ts[j-1] = ts[j-1], ts[j]
		}
	}
}

// heldTMs is the set of TMs whose attempts may not be redeployed now, with why: every pool
// member and known TM that is not in a heartbeat streak with this leader, not proven dead,
// and that mayRedeploy refuses. It is computed at most once per tick (loop goroutine only) and read by the plan.
func (w *tmWatch) heldTMs() map[string]string {
	now := time.Now()
	w.streakMu.Lock()
	started := w.streakEpoch
	w.streakMu.Unlock()
	if w.heldAt.Add(w.jm.cfg.TickInterval).After(now) && started == w.heldStreaks {
		return w.held // no streak started since: the answer of this tick holds
	}
	ids := map[string]bool{}
	for _, m := range w.jm.state.Pool().GetMembers() {
		ids[m.TmId] = true
	}
	for _, tm := range w.jm.tms.List() {
		ids[tm.ID] = true
	}
	held := map[string]string{}
	gap := w.jm.cfg.freshGap()
	for id := range ids {
		w.streakMu.Lock()
		s, ok := w.streaks[id]
		w.streakMu.Unlock()
		if ok && now.Sub(s.last) <= gap {
			continue // in contact: it gets the cancel of whatever it still runs
		}
		if tm, known := w.jm.tms.Get(id); known && tm.Dead != "" {
			continue // proven dead (its port refused connections: liveness.go): nothing of it runs
		}
		if ok, why := w.mayRedeploy(id, now); !ok {
			if w.begun.Add(w.jm.cfg.TMLeaderGrace+w.jm.cfg.HeartbeatTimeout).Before(now) && s.last.Add(w.jm.cfg.TMLeaderGrace+w.jm.cfg.HeartbeatTimeout).Before(now) {
				continue // past the TMs' leader grace and the margin: it has stopped them itself
			}
			held[id] = why
		}
	}
	w.held, w.heldAt, w.heldStreaks = held, now, started
	return held
}

// outsidePool is what the leader knows of its contact with a TM that is not a pool member, so
// knows no pool: only members are sent the pool view, a registration is answered only once its
// TM is a member (tmcalls.go), and no member is ever removed.
type outsidePool struct {
	begun    time.Time // the term's start: no earlier leader reaches a TM after it (the lease)
	answered time.Time // this leader's last answer to a heartbeat or registration of the TM (zero: none)
	callEnd  time.Time // the end of this JobMaster's last call to the TM (zero: none)
	inFlight bool      // a call to the TM is under way
}

// contactOutsidePool gathers outsidePool for tmID (its address from the registry).
func (w *tmWatch) contactOutsidePool(tmID string) outsidePool {
	c := outsidePool{begun: w.begun}
	w.streakMu.Lock()
	c.answered = w.answered[tmID]
	w.streakMu.Unlock()
	if tm, ok := w.jm.tms.Get(tmID); ok && tm.GRPCAddr != "" {
		c.callEnd, c.inFlight = w.jm.tms.CallContact(tm.GRPCAddr)
	}
	return c
}

// mayRedeployOutsidePool is the isolation rule for a silent TM that knows no pool
// (docs/reconciliation.md, "Waits for a pool"). Such a TM cannot find a majority to confirm a
// JobMaster outage, so it cancels every task at its first pool check once its last leader
// contact is older than F + H + R (taskmanager poolCheck: "no pool known"), on a clock that may
// run ClockDrift slow, checking every query interval Q. Its last contact is no later than the
// latest of: this term's start, this leader's last answer to it, the end of this JobMaster's
// last call to it (now while one is in flight). So its attempts may be redeployed once the
// redeploy delay D (HeartbeatTimeout, at least RedeployDelayNeeded) has passed since then: D
// covers (F + H + R)(1 + ClockDrift) + Q with a query timeout to spare. why says what is
// missing when the answer is no.
func mayRedeployOutsidePool(c outsidePool, now time.Time, delay time.Duration) (ok bool, why string) {
	if c.inFlight {
		return false, "it is outside the pool (it never confirmed one) and a call to it is in flight"
	}
	last := c.begun
	for _, at := range []time.Time{c.answered, c.callEnd} {
		if at.After(last) {
			last = at
		}
	}
	if wait := last.Add(delay).Sub(now); wait > 0 {
		return false, fmt.Sprintf("it is outside the pool (it never confirmed one): it stops its tasks itself within the redeploy delay (%v) after its last leader contact, %v to run", delay, wait.Round(time.Millisecond))
	}
	return true, ""
}
