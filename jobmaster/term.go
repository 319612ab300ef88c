package jobmaster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"

	"github.com/jmcluster/jmcluster/internal/logsum"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// term is one leadership term of this node: its epoch, its goroutines and the volatile
// bookkeeping that only makes sense while this node leads. Everything it decides is read from
// the committed state; what it keeps here is only "what have I already sent in this term".
type term struct {
	jm     *JobMaster
	epoch  uint64
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	kicks   chan string
	batch   *batcher
	ckpt    *coordinator // checkpoints.go
	started sync.Once
	// checkMu: one heartbeat's deployment check at a time (deployment.go).
	checkMu sync.Mutex

	mu          sync.Mutex
	stopping    bool                         // stop has begun: no CancelTask is started
	cancelSent  map[cancelKey]time.Time      // attempt and TM address a CancelTask was sent for, and when
	submitting  map[string]bool              // attempt ids whose SubmitTask is in flight
	missing     map[string]int               // consecutive heartbeats an expected attempt was absent from
	restartAt   map[string]map[int]time.Time // job id -> region id -> not before (restart delay)
	waiting     map[string]string            // job id -> why a deployment waits (logged once)
	waits       map[string]wait              // job id -> why and since when a deployment waits (under mu: job views read it)
	jobWaits    map[string]jobWait           // job id -> why the job waits, of every kind (under mu; wait.go)
	driven      map[string]uint64            // job id -> modify index when last driven (loop goroutine only)
	regions     map[string]jobRegions        // job id -> failover regions (loop goroutine only)
	retryCancel map[string]bool              // job ids with a CancelTask to retry
	acked       map[string]time.Time         // attempt id -> when its TM acknowledged the submission
	holding     map[string]string            // job id -> the restarts last logged as waiting (loop goroutine only)
	// behindSince: when a usable TM was first seen behind the pool version (guarded by mu).
	behindSince map[string]time.Time

	watch *tmWatch   // liveness, isolation and pool bookkeeping of the TMs (tmwatch.go)
	flow  *flowStore // the running subtasks' last two flow samples (flow.go)
}

func newTerm(parent context.Context, jm *JobMaster, epoch uint64) *term {
	ctx, cancel := context.WithCancel(parent)
	t := &term{
		jm: jm, epoch: epoch, ctx: ctx, cancel: cancel,
		kicks:       make(chan string, 1024),
		cancelSent:  map[cancelKey]time.Time{},
		submitting:  map[string]bool{},
		missing:     map[string]int{},
		restartAt:   map[string]map[int]time.Time{},
		regions:     map[string]jobRegions{},
		waiting:     map[string]string{},
		waits:       map[string]wait{},
		jobWaits:    map[string]jobWait{},
		driven:      map[string]uint64{},
		retryCancel: map[string]bool{},
		acked:       map[string]time.Time{},
		holding:     map[string]string{},
		behindSince: map[string]time.Time{},
	}
	t.watch = newTMWatch(t)
	t.flow = newFlowStore(3 * jm.cfg.HeartbeatInterval)
	t.batch = newBatcher(t)
	t.ckpt = newCoordinator(t)
	// The batcher serves reconciliation too, so it runs from the start of the term; so does
	// the pulse, whose probes let reconciliation stop waiting for a TM proven dead.
	t.wg.Add(2)
	go func() { defer t.wg.Done(); t.batch.run() }()
	go func() { defer t.wg.Done(); t.watch.pulse() }()
	return t
}

// start launches the scheduler loop (once the gate opens).
func (t *term) start() {
	t.started.Do(func() {
		// Every TM registered in this term gets a fresh heartbeat deadline (liveness timers
		// restart on every leadership gain: liveness.go). A TM known only by gossip, or that
		// has not registered with this leader yet, is not touched: it gets no work until it
		// registers. A TM reconciliation found lost stays lost until it registers or
		// heartbeats again, and one proven dead stays proven.
		for _, tm := range t.jm.tms.List() {
			if tm.Registered && tm.GRPCAddr != "" && !tm.Lost && tm.Dead == "" {
				t.jm.tms.Touch(tm.ID)
			}
		}
		t.spawn(t.loop)
		t.spawn(t.retain)
		t.spawn(t.ckpt.run)
		t.spawn(t.ckpt.commitAcks)
		t.kick("")
	})
}

func (t *term) stop() {
	t.mu.Lock()
	t.stopping = true
	t.mu.Unlock()
	t.cancel()
	t.wg.Wait()
}

// spawn runs fn on a goroutine of the term, unless the term is stopping: the check and the
// wait group's Add are made under the lock stop takes before it waits, so no goroutine joins
// the group once stop waits on it (RPC handlers — a heartbeat's deployment check, a
// registration — call this from outside the term's goroutines). It reports whether fn runs.
func (t *term) spawn(fn func()) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.spawnLocked(fn)
}

// spawnLocked is spawn with t.mu held.
func (t *term) spawnLocked(fn func()) bool {
	if t.stopping {
		return false
	}
	t.wg.Add(1)
	go func() { defer t.wg.Done(); fn() }()
	return true
}

// kick schedules a look at one job ("" means every job).
func (t *term) kick(jobID string) {
	select {
	case t.kicks <- jobID:
	default:
		// The queue is full: a full pass on the next tick covers it.
	}
}

func (t *term) loop() {
	tick := time.NewTicker(t.jm.cfg.TickInterval)
	defer tick.Stop()
	ticks := 0
	for {
		select {
		case <-t.ctx.Done():
			return
		case id := <-t.kicks:
			ids := map[string]bool{id: true}
			// Coalesce whatever else is queued.
		drain:
			for {
				select {
				case more := <-t.kicks:
					ids[more] = true
				default:
					break drain
				}
			}
			if ids[""] {
				t.driveAll()
				continue
			}
			for _, jobID := range t.jm.state.JobIDs() {
				if ids[jobID] {
					t.drive(jobID)
				}
			}
		case <-tick.C:
			t.checkTaskManagers()
			t.prune(time.Now())
			t.watch.flushPoolAcks()
			ticks++
			t.driveStale(ticks%fullPassTicks == 0)
		}
	}
}

// fullPassTicks: every this many ticks every job is driven, changed or not.
const fullPassTicks = 10

// driveStale drives, on a tick, the jobs whose committed record changed since they were last
// driven and the jobs with time-based work pending (a restart delay, a wait for slots, a
// cancellation to retry); full drives every job. Reading a job's index does not copy it, so an
// idle 100k-execution job costs nothing per tick.
func (t *term) driveStale(full bool) {
	ids := t.jm.state.JobIDs()
	if full {
		t.forgetRemoved(ids)
	}
	for _, id := range ids {
		if t.ctx.Err() != nil {
			return
		}
		var index uint64
		var status pb.JobStatus
		t.jm.state.WithJob(id, func(rec *pb.JobRecord) { index, status = rec.ModifyIndex, rec.Status })
		if full || index != t.driven[id] || t.pending(id, status) {
			t.drive(id)
		}
	}
}

// forgetRemoved drops the loop's bookkeeping of jobs no longer in the state (removed by the
// retention), so that a long term does not keep one entry per job it ever drove.
func (t *term) forgetRemoved(ids []string) {
	live := make(map[string]bool, len(ids))
	for _, id := range ids {
		live[id] = true
	}
	for id := range t.driven {
		if !live[id] {
			delete(t.driven, id)
		}
	}
	for id := range t.waiting {
		if !live[id] {
			delete(t.waiting, id)
		}
	}
	t.mu.Lock()
	for id := range t.waits {
		if !live[id] {
			delete(t.waits, id)
		}
	}
	for id := range t.jobWaits {
		if !live[id] {
			delete(t.jobWaits, id)
		}
	}
	t.mu.Unlock()
	for id := range t.regions {
		if !live[id] {
			delete(t.regions, id)
		}
	}
	for id := range t.holding {
		if !live[id] {
			delete(t.holding, id)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for id := range t.restartAt {
		if !live[id] {
			delete(t.restartAt, id)
		}
	}
}

// pending reports time-based work on a job that no commit will announce.
func (t *term) pending(jobID string, status pb.JobStatus) bool {
	if status == jobFailing || status == jobCancelling || status == jobRestarting || t.waiting[jobID] != "" || t.holding[jobID] != "" {
		return true // a region restart held by the isolation rule is looked at again every tick
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.retryCancel[jobID] {
		return true
	}
	return len(t.restartAt[jobID]) > 0
}

func (t *term) driveAll() {
	for _, id := range t.jm.state.JobIDs() {
		if t.ctx.Err() != nil {
			return
		}
		t.drive(id)
	}
}

// checkTaskManagers declares lost every TM proven dead (liveness.go), that stopped
// heartbeating or that gossip reports dead, and fails the executions it held. Silence and a
// gossip death count from the later of the event and this term's establishment (its start or
// the end of a stall), so a leader that was away declares nothing lost for it. A gossip death
// counts once the TM has had two heartbeat intervals to contradict it by a direct contact
// (gossip marks a live but busy member dead now and then); a gossip leave counts at once.
func (t *term) checkTaskManagers() {
	now := time.Now()
	if !t.watch.awake(now) {
		return
	}
	since := t.watch.liveSince()
	for _, tm := range t.jm.tms.List() {
		if tm.Lost {
			continue
		}
		if tm.Dead != "" {
			t.taskManagerLost(tm.ID, tm.Dead)
			continue
		}
		gossipAt := tm.GossipAt
		if since.After(gossipAt) {
			gossipAt = since
		}
		dead := tm.GoneByGossip() && (tm.Gossip == "left" || now.Sub(gossipAt) > 2*t.jm.cfg.HeartbeatInterval)
		silent := !tm.LastSeen.IsZero() && now.Sub(t.watch.lastContact(tm)) > t.jm.cfg.HeartbeatTimeout
		if dead || silent {
			cause := "TaskManager " + tm.ID + " lost: no heartbeat for " + t.jm.cfg.HeartbeatTimeout.String()
			if dead {
				cause = "TaskManager " + tm.ID + " lost: " + tm.Gossip + " by gossip"
			}
			t.taskManagerLost(tm.ID, cause)
		}
	}
}

// taskManagerLost fails every non-terminal execution on the TM (committed before any
// redeployment, like every other state change).
func (t *term) taskManagerLost(tmID, cause string) {
	if !t.jm.tms.MarkLost(tmID) {
		return
	}
	t.jm.log.Warn("task manager lost", "tm", tmID, "cause", logsum.Text(cause))
	if tm, ok := t.jm.tms.Get(tmID); ok {
		t.jm.tms.Forget(tm.GRPCAddr)
	}
	// Its jobs' pending checkpoints end first, with the TM named (their failures would abort
	// them too, as task failures).
	t.ckpt.abortForLostTM(tmID, cause)
	t.failAttempts(t.attemptsOn(tmID, cause))
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// NewJobID returns a fresh 32-hex-character job id.
func NewJobID() string { return newID() }
