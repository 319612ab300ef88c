package jobmaster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Liveness of the TaskManagers, as the leader judges it.
//
// Dead is dead: a TM whose process is gone is declared lost on proof, not after a timeout. Two
// things prove it: a registration of a newer incarnation (incarnation.go), and connections to
// its gRPC port refused (ECONNREFUSED: the host answered that nothing listens there; a timeout
// proves nothing) DeadRefusals times in a row over at least DeadRefusalWindow. The leader
// probes — one TCP connect, nothing sent — every TM that is overdue with its heartbeat, whose
// calls failed or whose connection broke since its last contact (Registry.watch), or that
// gossip reports gone. Broken data streams reported
// by its peers are no proof (an isolated live TM produces them too) and are not used.
//
// This holds only where (1) nothing forges connection resets on the way (an iptables REJECT
// with tcp-reset would; the fault suite's partitions DROP) and (2) a TM closes its gRPC port only
// after its tasks have stopped (taskmanager.Stop's order; a crashed process has no tasks).
//
// Liveness timers restart on every leadership gain: a TM's silence counts from the later of its
// last contact and the moment this leader established itself — the term's start, or the end of
// a stall of this process (SIGSTOP, a frozen VM): a pulse goroutine notices when it was not
// scheduled for longer than a heartbeat interval. A leader that was away thus never declares a
// TM lost because it did not hear from it.
//
// Nor does a leader that was away answer a TM as its leader before it knows it still is one.
// A process stopped past its Raft leader lease and resumed can be deposed without knowing it
// yet; a heartbeat or registration it answered in that moment would tell the TM (and, through
// the TM's answers, its pool) that a leader lives which no longer does, and the isolation rule
// counts on such answers only coming from the live leader. So after a stall the term answers
// TaskManagers with ErrVerifyingLeadership until Raft's VerifyLeader (a round trip to a quorum)
// confirms it; a deposed leader fails that and steps down.

// probeTimeout bounds one probe's connect: a probe that neither connects nor is refused within
// it (a dropped SYN) says nothing.
const probeTimeout = time.Second

// liveSince is when this term last established itself: its start or the end of a stall.
func (w *tmWatch) liveSince() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.since
}

// lastContact is what a TM's silence counts from in this term.
func (w *tmWatch) lastContact(tm TaskManager) time.Time {
	since := w.liveSince()
	if tm.LastSeen.After(since) {
		return tm.LastSeen
	}
	return since
}

// stallAfter: a gap this long in the pulse means this process was not running.
func (w *tmWatch) stallAfter() time.Duration { return w.jm.cfg.HeartbeatInterval }

// awake reports whether the pulse ran recently; when it did not, the process was stalled (the
// caller runs first after a resume), and the term's liveness timers restart now.
func (w *tmWatch) awake(now time.Time) bool {
	w.mu.Lock()
	gap := now.Sub(w.beat)
	stalled := gap > w.stallAfter()
	verify := false
	if stalled {
		w.since, w.beat = now, now
		w.unverified = true
		verify, w.verifying = !w.verifying, true
	}
	w.mu.Unlock()
	if stalled {
		w.jm.log.Warn("this leader was stalled; TaskManager liveness timers restart, and TaskManagers are answered once a quorum confirms this leader", "gap", gap.Round(time.Millisecond), "epoch", w.epoch)
	}
	if verify && !w.spawn(w.verifyAfterStall) {
		w.mu.Lock()
		w.verifying = false
		w.mu.Unlock()
	}
	return !stalled
}

// verifyAfterStall confirms with a quorum that this leader still leads, trying again every
// RetryAfter until it does or the term ends (a deposed leader's term ends when Raft steps it
// down).
func (w *tmWatch) verifyAfterStall() {
	defer func() {
		w.mu.Lock()
		w.verifying = false
		w.mu.Unlock()
	}()
	v, ok := w.jm.raft.(leaderVerifier)
	for w.ctx.Err() == nil {
		err := error(nil)
		if ok {
			ctx, cancel := context.WithTimeout(w.ctx, max(w.jm.cfg.HeartbeatInterval, time.Second))
			err = v.VerifyLeader(ctx)
			cancel()
		}
		if err == nil {
			w.mu.Lock()
			w.unverified = false
			w.mu.Unlock()
			w.jm.log.Info("leadership confirmed after the stall; answering TaskManagers again", "epoch", w.epoch)
			return
		}
		w.jm.log.Warn("leadership not confirmed after the stall; TaskManagers wait", "epoch", w.epoch, "error", err)
		select {
		case <-w.ctx.Done():
		case <-time.After(w.jm.cfg.RetryAfter):
		}
	}
}

// answersTaskManagers returns nil when this term may answer a TM as its leader now, and
// ErrVerifyingLeadership while a stall has not been followed by a confirmation of leadership.
func (w *tmWatch) answersTaskManagers(now time.Time) error {
	w.awake(now)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.unverified {
		return ErrVerifyingLeadership
	}
	return nil
}

// pulse runs for the whole term: it keeps the term's heartbeat (awake) and probes suspect TMs.
func (w *tmWatch) pulse() {
	if !w.spawn(w.meter) { // the starvation meter (starvation.go)
		return
	}
	tick := time.NewTicker(min(w.probeInterval(), w.stallAfter()/4))
	defer tick.Stop()
	probing := map[string]bool{} // TMs with a probe in flight (this goroutine only)
	done := make(chan string, 64)
	for {
		select {
		case <-w.ctx.Done():
			return
		case id := <-done:
			delete(probing, id)
		case <-tick.C:
			now := time.Now()
			if !w.awake(now) {
				continue
			}
			w.mu.Lock()
			w.beat = now
			w.mu.Unlock()
			for _, tm := range w.jm.tms.List() {
				if probing[tm.ID] || !w.suspect(tm, now) {
					continue
				}
				probing[tm.ID] = true
				id, addr, inc := tm.ID, tm.GRPCAddr, tm.Incarnation
				if !w.spawn(func() {
					w.probe(id, addr, inc)
					select {
					case done <- id:
					case <-w.ctx.Done():
					}
				}) {
					return
				}
			}
		}
	}
}

// probeInterval spaces the probes so that DeadRefusals of them span DeadRefusalWindow, with 5%
// to spare (the span is measured between probe results, which scheduling jitters: without the
// margin the last probe often lands a little short of the window and one more is needed).
func (w *tmWatch) probeInterval() time.Duration {
	n := w.jm.cfg.DeadRefusals
	every := w.jm.cfg.DeadRefusalWindow
	if n > 1 {
		every /= time.Duration(n - 1)
	}
	return max(every+every/20, 10*time.Millisecond)
}

// suspect: a TM worth probing — known address, not proven dead, and overdue with its
// heartbeat, or a call to it failed since its last contact, or gossip reports it gone. A lost
// TM is probed too while the isolation rule may hold its regions (until the TMs' leader grace
// plus the heartbeat timeout after its last contact, when heldTMs lets go of it anyway): a TM
// declared lost by silence or gossip and killed afterwards is proven dead by its refused port,
// which frees its regions at once rather than after the grace.
func (w *tmWatch) suspect(tm TaskManager, now time.Time) bool {
	if tm.Dead != "" || tm.GRPCAddr == "" {
		return false
	}
	if tm.Lost {
		return now.Sub(w.lastContact(tm)) <= w.jm.cfg.TMLeaderGrace+w.jm.cfg.HeartbeatTimeout
	}
	// A quarter interval of slack: a late heartbeat of a live TM costs one probe that connects.
	overdue := now.Sub(w.lastContact(tm)) > w.jm.cfg.HeartbeatInterval*5/4
	failed := tm.CallFailedAt.After(tm.LastSeen)
	return overdue || failed || tm.GoneByGossip()
}

// probe connects once to a TM's gRPC port and counts the outcome; on proof of death it
// declares the TM lost (once the gate is open; during reconciliation the collector reads the
// proof and does not wait for the TM).
func (w *tmWatch) probe(id, addr, incarnation string) {
	ctx, cancel := context.WithTimeout(w.ctx, probeTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if conn != nil {
		_ = conn.Close()
	}
	if w.ctx.Err() != nil {
		return
	}
	refused := err != nil && errors.Is(err, syscall.ECONNREFUSED)
	cause, proved := w.jm.tms.probed(id, incarnation, addr, refused, time.Now(), w.jm.cfg.DeadRefusals, w.jm.cfg.DeadRefusalWindow)
	if !proved {
		return
	}
	w.jm.log.Warn("task manager proven dead", "tm", id, "cause", cause)
	if w.jm.gateOpen.Load() {
		w.lost(id, cause)
	}
}

// probed counts one probe of a TM's registered incarnation: a refusal adds to the run, anything
// else ends it. Once the run reaches n refusals spanning at least window, the TM is proven dead
// (Dead, DeadAt) and the cause is returned with true (once).
func (r *Registry) probed(id, incarnation, addr string, refused bool, at time.Time, n int, window time.Duration) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	tm := r.tms[id]
	if tm == nil || tm.Incarnation != incarnation || tm.GRPCAddr != addr || tm.Dead != "" {
		return "", false
	}
	if !refused {
		tm.refusals, tm.firstRefusal = 0, time.Time{}
		return "", false
	}
	if tm.refusals == 0 {
		tm.firstRefusal = at
	}
	tm.refusals++
	span := at.Sub(tm.firstRefusal)
	if tm.refusals < n || span < window {
		return "", false
	}
	tm.Dead = fmt.Sprintf("TaskManager %s lost: connection refused %d times over %dms at %s (its process is gone)",
		id, tm.refusals, span.Milliseconds(), addr)
	tm.DeadAt = at
	return tm.Dead, true
}

// callFailed: a call error that may mean the TM is gone (a transport failure or a timeout), as
// opposed to an answer of the TM.
func callFailed(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	s, ok := status.FromError(err)
	if !ok {
		return true
	}
	return s.Code() == codes.Unavailable || s.Code() == codes.DeadlineExceeded
}
