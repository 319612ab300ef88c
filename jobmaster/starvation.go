package jobmaster

import (
	"time"

	"github.com/jmcluster/jmcluster/internal/failpoint"
)

// A starved leader: alive and answering, but given too little CPU to keep up (a CPU quota, a
// noisy neighbour; KAFKA-15019 was an overloaded controller fencing live brokers). Such a
// leader must not declare a TaskManager lost because it was slow itself, and one that stays
// starved hands leadership over to a voter that can keep up.
//
// The meter: a goroutine of the term wakes every starveRule.Tick and notes how late it woke
// (the gap since its last wake-up beyond the tick). A process that runs freely wakes within a
// fraction of a millisecond; one under a quota of 5 % of a core runs 5 ms in every 100 ms and
// wakes about once per period, 90 ms late. The decision (judgeStarvation, pure) sums the
// lateness over the last Window: at or above Share of it, the leader is starved, and it stays
// starved until the lateness falls below ExitShare (a stretch does not end on a lucky period).
// A process whose work fits its quota is never stopped and is not starved: it keeps up.
//
// What a starved leader does:
//   - Its liveness timers restart on every starved verdict, as after a stall (liveness.go):
//     silence and gossip deaths count from the end of the starvation, so a heartbeat that
//     waited in this leader's own queues never counts as a missing one. Proofs (refused
//     connections, a new incarnation) still count at once.
//   - Starved without a break for HandOverAfter, in a term at least MinTerm old, it hands
//     leadership over (hashicorp/raft's leadership transfer to the most up-to-date voter), and
//     tries again every HandOverAfter while it stays starved and leads. The new leader
//     reconciles with the TaskManagers (their tasks keep running) before their fence timeout.
//
// The failpoint starved-leader-fences turns both off, for the fault suite's self-test.

// starveRule is the decision's timings and threshold.
type starveRule struct {
	Tick          time.Duration // the meter's period
	Window        time.Duration // the lateness judged: the last Window
	MinLate       time.Duration // a wake-up later than this counts; the scheduling jitter of a loaded host does not
	Share         float64       // starved when the lateness fills at least this share of Window
	ExitShare     float64       // a starved stretch ends when the lateness falls below this share
	HandOverAfter time.Duration // starved this long without a break: hand leadership over
	MinTerm       time.Duration // a term younger than this does not hand over
}

// starveRuleFor derives the rule from the TM heartbeat interval, with floors that do not
// scale down with it (a process's scheduling does not get finer because its heartbeats are
// frequent: the tests' 200 ms interval under the race detector on a loaded host read as
// starved at a 4 ms bound, and their leaders handed over again and again): a 10 ms tick,
// wake-ups counted when 25 ms late or more (a CPU quota stops a process for most of its
// 100 ms period; an oversubscribed host delays a thread by a few milliseconds at a time), a
// window of one interval and at least a second, half of it late to start a stretch and under
// a quarter to end it, a hand-over after three intervals starved and at least three seconds
// (the TMs' fence timeout is five intervals by default: the new leader reaches them first),
// not in the first five intervals of a term and five seconds (a cluster whose every replica
// is starved changes leader at most that often).
func starveRuleFor(heartbeat time.Duration) starveRule {
	return starveRule{
		Tick:          10 * time.Millisecond,
		Window:        max(heartbeat, time.Second),
		MinLate:       25 * time.Millisecond,
		Share:         0.5,
		ExitShare:     0.25,
		HandOverAfter: max(3*heartbeat, 3*time.Second),
		MinTerm:       max(5*heartbeat, 5*time.Second),
	}
}

// tickSeen is one wake-up of the meter: when, and how late.
type tickSeen struct {
	At   time.Time
	Late time.Duration
}

// starveVerdict is the decision at one moment.
type starveVerdict struct {
	Share    float64   // the share of the window this process spent late
	Starved  bool      // at or above the rule's share
	Since    time.Time // when the starved stretch began (zero when not starved)
	HandOver bool      // hand leadership over now
}

// starveInput is what the decision reads: the meter's wake-ups (oldest first), the moment, the
// term's start, the start of the starved stretch so far (zero: none) and the last hand-over
// attempt (zero: none in this stretch).
type starveInput struct {
	Ticks     []tickSeen
	Now       time.Time
	TermStart time.Time
	Since     time.Time
	LastTry   time.Time
}

// judgeStarvation decides whether the leader is starved and whether it hands leadership over.
// Pure: no clock, no state. The lateness of each wake-up in the window at least MinLate late
// counts, clipped to the window; so does the time since the last wake-up beyond one tick (a
// meter that has not run yet is late too). A term younger than one window is not judged.
func judgeStarvation(in starveInput, r starveRule) starveVerdict {
	var v starveVerdict
	if r.Window <= 0 || in.Now.Sub(in.TermStart) < r.Window {
		return v
	}
	from := in.Now.Add(-r.Window)
	var late time.Duration
	last := in.TermStart
	for _, t := range in.Ticks {
		if t.At.After(last) {
			last = t.At
		}
		if !t.At.After(from) || t.Late < r.MinLate {
			continue
		}
		late += min(t.Late, t.At.Sub(from))
	}
	if pending := in.Now.Sub(last) - r.Tick; pending >= r.MinLate {
		late += min(pending, r.Window)
	}
	v.Share = min(float64(late)/float64(r.Window), 1)
	v.Starved = v.Share >= r.Share || (!in.Since.IsZero() && v.Share >= r.ExitShare)
	if !v.Starved {
		return v
	}
	v.Since = in.Since
	if v.Since.IsZero() {
		v.Since = in.Now
	}
	due := in.LastTry.IsZero() || in.Now.Sub(in.LastTry) >= r.HandOverAfter
	v.HandOver = in.Now.Sub(v.Since) >= r.HandOverAfter && in.Now.Sub(in.TermStart) >= r.MinTerm && due
	return v
}

// leadershipHandOver is implemented by a Raft node that can hand its leadership to another
// voter (cluster.Node.TransferLeadership; "" picks the most up-to-date one).
type leadershipHandOver interface {
	TransferLeadership(to string) (string, error)
}

// starveMeter is the meter's state (meter goroutine only).
type starveMeter struct {
	rule    starveRule
	ticks   []tickSeen
	since   time.Time // the starved stretch's start; zero when not starved
	lastTry time.Time // the stretch's last hand-over attempt
}

// The log lines of a starved stretch, which the fault suite reads (jepsen-style
// cluster_throttle.go matches them by these texts: keep the two in step).
const (
	logStarved      = "this leader is starved of CPU"
	logNotStarved   = "this leader is no longer starved"
	logStarvedEnded = "this leader's term ended while it was starved"
	logHandingOver  = "this leader has been starved of CPU too long; handing leadership over"
)

// meter runs for the whole term: it wakes every tick, judges, and acts on the verdict.
func (w *tmWatch) meter() {
	m := &starveMeter{rule: starveRuleFor(w.jm.cfg.HeartbeatInterval)}
	timer := time.NewTimer(m.rule.Tick)
	defer timer.Stop()
	last := time.Now()
	for {
		select {
		case <-w.ctx.Done():
			if !m.since.IsZero() {
				w.jm.log.Info(logStarvedEnded, "starved_for", time.Since(m.since).Round(time.Millisecond), "epoch", w.epoch)
			}
			return
		case <-timer.C:
		}
		now := time.Now()
		late := now.Sub(last) - m.rule.Tick
		last = now
		m.ticks = append(m.ticks, tickSeen{At: now, Late: max(late, 0)})
		m.prune(now)
		v := judgeStarvation(starveInput{Ticks: m.ticks, Now: now, TermStart: w.begun, Since: m.since, LastTry: m.lastTry}, m.rule)
		w.onStarvation(m, now, v)
		timer.Reset(m.rule.Tick)
	}
}

// prune drops the wake-ups older than the window (the last one stays: it is the latest run).
func (m *starveMeter) prune(now time.Time) {
	from := now.Add(-m.rule.Window)
	i := 0
	for i < len(m.ticks)-1 && !m.ticks[i].At.After(from) {
		i++
	}
	if i > 0 {
		m.ticks = append(m.ticks[:0], m.ticks[i:]...)
	}
}

// onStarvation carries a verdict out: a stretch's start and end are logged; while starved the
// liveness timers restart, and a hand-over starts when due. The failpoint starved-leader-fences
// keeps the log and drops the two actions.
func (w *tmWatch) onStarvation(m *starveMeter, now time.Time, v starveVerdict) {
	if !v.Starved {
		if !m.since.IsZero() {
			w.jm.log.Info(logNotStarved+"; TaskManager liveness timers count from now", "starved_for", now.Sub(m.since).Round(time.Millisecond), "epoch", w.epoch)
			m.since, m.lastTry = time.Time{}, time.Time{}
		}
		return
	}
	if m.since.IsZero() {
		w.jm.log.Warn(logStarved+"; TaskManager liveness timers restart until it is not", "late_share", v.Share, "window", m.rule.Window, "epoch", w.epoch)
	}
	m.since = v.Since
	if failpoint.Enabled(failpoint.StarvedLeaderFences) {
		return
	}
	w.mu.Lock()
	if now.After(w.since) {
		w.since = now
	}
	w.mu.Unlock()
	if !v.HandOver {
		return
	}
	m.lastTry = now
	starvedFor := now.Sub(v.Since)
	w.spawn(func() { w.handOver(starvedFor, v.Share) })
}

// handOver hands leadership to another voter (the term ends when Raft steps this node down).
func (w *tmWatch) handOver(starvedFor time.Duration, share float64) {
	h, ok := w.jm.raft.(leadershipHandOver)
	if !ok {
		w.jm.log.Warn("this leader is starved but its Raft node cannot hand leadership over", "starved_for", starvedFor.Round(time.Millisecond), "epoch", w.epoch)
		return
	}
	w.jm.log.Warn(logHandingOver, "starved_for", starvedFor.Round(time.Millisecond), "late_share", share, "epoch", w.epoch)
	to, err := h.TransferLeadership("")
	if err != nil {
		w.jm.log.Warn("leadership hand-over of a starved leader failed; trying again while it stays starved", "error", err, "epoch", w.epoch)
		return
	}
	w.jm.log.Info("leadership handed over by a starved leader", "to", to, "epoch", w.epoch)
}
