package jobmaster

import (
	"context"
	"sync"
	"time"
)

// tmWatch is a term's volatile bookkeeping of its TaskManagers, apart from the scheduling: their
// liveness as this leader judges it (liveness.go: the pulse, stalls of this process and the
// confirmation of leadership after one, probes of suspect TMs), the isolation rule's contact
// record (isolation.go: heartbeat streaks, answers, the held TMs) and the pool work (pool.go:
// memberships being committed, confirmed versions to commit, the view). It starts with the
// term and is forgotten with it; it reaches the term only through what it is given: the
// JobMaster, the term's context and epoch, its spawn, and what to do with a TM proven dead.
type tmWatch struct {
	jm    *JobMaster
	ctx   context.Context
	epoch uint64
	spawn func(func()) bool        // the term's spawn: every goroutine of the watch is the term's
	lost  func(tmID, cause string) // the term's taskManagerLost, for a TM proven dead once the gate is open
	begun time.Time                // when the term began

	// Liveness (liveness.go), guarded by mu.
	mu    sync.Mutex
	since time.Time // when this term last established itself: its start or the end of a stall
	beat  time.Time // the pulse's last run
	// unverified: since a stall this leader answers no TM until a quorum confirmed it still
	// leads; verifying: that confirmation is under way.
	unverified, verifying bool

	// Isolation (isolation.go).
	streakMu sync.Mutex
	streaks  map[string]streak // TM id -> its heartbeat streak with this leader
	// answered: TM id -> this leader's last answer to its heartbeat or registration, those of
	// TMs it does not know included (a TM outside the pool).
	answered map[string]time.Time
	// streakEpoch counts the streaks started (under streakMu); heldStreaks is its value when
	// held was computed (loop goroutine only).
	streakEpoch, heldStreaks uint64
	held                     map[string]string // heldTMs' last answer and when (loop goroutine only)
	heldAt                   time.Time

	pool *poolKeeper // pool changes and acks to commit (pool.go)
}

// newTMWatch is the watch of a term that begins now.
func newTMWatch(t *term) *tmWatch {
	now := time.Now()
	return &tmWatch{
		jm: t.jm, ctx: t.ctx, epoch: t.epoch, spawn: t.spawn, lost: t.taskManagerLost, begun: now,
		since: now, beat: now,
		streaks: map[string]streak{}, answered: map[string]time.Time{},
		pool: newPoolKeeper(),
	}
}
