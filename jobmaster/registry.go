package jobmaster

import (
	"github.com/jmcluster/jmcluster/security"

	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"

	"github.com/jmcluster/jmcluster/internal/failpoint"
)

// TaskManager is what the leader knows of one TM.
type TaskManager struct {
	ID       string
	GRPCAddr string
	DataAddr string
	Slots    int32
	// LastSeen is the time of the last heartbeat or registration (zero when only gossip knows it).
	LastSeen time.Time
	// Gossip is the TM's gossip state: "alive", "suspect", "dead", "left" or "" when unknown.
	Gossip string
	// GossipAt is when Gossip last changed.
	GossipAt time.Time
	// Lost is set once the leader has declared the TM lost (its executions failed).
	Lost bool
	// Incarnation is the process instance that registered last ("" before a registration, or
	// from a TM that sends none).
	Incarnation string
	// Protocol is the JobMaster-TaskManager protocol its last registration named (0 before
	// one, and from a TM of protocol 1): what its descriptors may use (protocol.go).
	Protocol uint32
	// Dead is set, with its cause, once the leader has proof that the registered process is
	// gone (its gRPC port refused connections: liveness.go); DeadAt is when. A direct contact,
	// or a registration, clears it.
	Dead   string
	DeadAt time.Time
	// CallFailedAt is when a call of the leader to the TM last failed, or its connection to the
	// TM broke (a reason to probe it).
	CallFailedAt time.Time
	// Registered is set once the TM registered with this leader in its current term (cleared
	// when a term begins): only a registered TM is given work and has its slots counted, and
	// only its heartbeats are accepted. A TM known by gossip alone, or that registered with an
	// earlier leader, is not.
	Registered bool
	// replaced are earlier incarnations, newest last (at most maxReplaced): news of them
	// (gossip, a late registration) is about a process that is gone.
	replaced []string
	// refusals counts the consecutive probes of the registered process its port refused, the
	// first at firstRefusal (liveness.go).
	refusals     int
	firstRefusal time.Time
}

// maxReplaced bounds the earlier incarnations remembered per TM.
const maxReplaced = 8

// ErrReplacedIncarnation refuses a registration or heartbeat from a TM process whose id has
// since registered with a newer incarnation.
var ErrReplacedIncarnation = errors.New("the TaskManager incarnation was replaced by a newer one")

// Registry is the set of known TMs and a cached gRPC client per TM. It is fed by
// registrations, heartbeats and gossip; it is volatile (rebuilt by every new leader).
type Registry struct {
	log     hclog.Logger
	timeout time.Duration
	maxMsg  int // message size limit of the connections to TMs
	tls     *security.TLS

	mu    sync.Mutex
	calls map[string]callRecord // by address: the calls of this JobMaster to a TM (CallContact)
	tms   map[string]*TaskManager
	conns map[string]*grpc.ClientConn // by address
	// refused: the last refusal of each TM id's registration, until it registers (at most
	// maxRefused, the oldest dropped first). Apart from tms: a refused request adds nothing
	// to what the leader may call or place on.
	refused map[string]Refusal
}

// Refusal is the leader's last refusal of a TM's registration: its reason (without the
// "register: " prefix) and when.
type Refusal struct {
	Reason string
	At     time.Time
}

// maxRefused bounds the refusals remembered (a client making up ids cannot grow the registry).
const maxRefused = 256

func newRegistry(log hclog.Logger, timeout time.Duration, maxMsg int) *Registry {
	return &Registry{log: log.Named("registry"), timeout: timeout, maxMsg: maxMsg, tms: map[string]*TaskManager{}, conns: map[string]*grpc.ClientConn{},
		calls: map[string]callRecord{}}
}

// Upsert records a TM's addresses; seen marks a registration with this leader (Register).
func (r *Registry) Upsert(id, grpcAddr, dataAddr string, slots int32, seen bool) *TaskManager {
	r.mu.Lock()
	defer r.mu.Unlock()
	tm := r.tms[id]
	if tm == nil {
		tm = &TaskManager{ID: id}
		r.tms[id] = tm
	}
	if grpcAddr != "" {
		tm.GRPCAddr = grpcAddr
	}
	if dataAddr != "" {
		tm.DataAddr = dataAddr
	}
	if slots > 0 {
		tm.Slots = slots
	}
	if seen {
		tm.LastSeen = time.Now()
		tm.Lost = false
		tm.Registered = true
		r.contactLocked(tm)
	}
	return tm
}

// contactLocked clears what the probes concluded: the TM reached the leader directly. A TM
// proven dead that talks again breaks the assumption that a refusal proves death (something
// forges resets, or the port was closed with the process alive): say so.
func (r *Registry) contactLocked(tm *TaskManager) {
	if tm.Dead != "" {
		r.log.Warn("a TaskManager proven dead by refused connections reached the leader again: something forges connection resets or it closed its port while alive", "tm", tm.ID, "proof", tm.Dead)
	}
	tm.Dead, tm.DeadAt = "", time.Time{}
	tm.refusals, tm.firstRefusal = 0, time.Time{}
}

// CheckReplaced refuses, with ErrReplacedIncarnation, an incarnation of id that a newer one
// has replaced (as Register does), so a late registration changes nothing, the pool included.
func (r *Registry) CheckReplaced(id, incarnation string) error {
	incarnation = seenIncarnation(incarnation)
	r.mu.Lock()
	defer r.mu.Unlock()
	if tm := r.tms[id]; tm != nil && incarnation != "" && slices.Contains(tm.replaced, incarnation) {
		return fmt.Errorf("%w: %s incarnation %s, now %s", ErrReplacedIncarnation, id, incarnation, tm.Incarnation)
	}
	return nil
}

// Register records a TM's registration (a direct contact). A registration with another
// incarnation than the registered one replaces it: everything the registry knew of the earlier
// process — its gossip state, the lost flag — is forgotten, so the new process gets slots at
// once, and the earlier incarnation is returned (the caller fails the attempts it held: the
// process is gone). A registration of an incarnation already replaced is refused with
// ErrReplacedIncarnation.
func (r *Registry) Register(id, incarnation, grpcAddr, dataAddr string, slots int32) (previous string, err error) {
	incarnation = seenIncarnation(incarnation)
	r.mu.Lock()
	tm := r.tms[id]
	if tm != nil && incarnation != "" && slices.Contains(tm.replaced, incarnation) {
		cur := tm.Incarnation
		r.mu.Unlock()
		return "", fmt.Errorf("%w: %s incarnation %s, now %s", ErrReplacedIncarnation, id, incarnation, cur)
	}
	if tm != nil && incarnation != "" && tm.Incarnation != "" && tm.Incarnation != incarnation {
		previous = tm.Incarnation
		tm.replaced = append(tm.replaced, previous)
		if n := len(tm.replaced) - maxReplaced; n > 0 {
			tm.replaced = slices.Delete(tm.replaced, 0, n)
		}
		tm.Gossip, tm.GossipAt = "", time.Time{}
		tm.Dead, tm.DeadAt, tm.refusals, tm.firstRefusal = "", time.Time{}, 0, time.Time{}
	}
	if tm != nil && incarnation != "" && tm.Dead != "" && tm.Incarnation != incarnation {
		// The proof was made for another process, or for one this leader knew no incarnation
		// of (it learned of the TM from the pool or gossip): a new process registering breaks
		// no assumption.
		tm.Dead, tm.DeadAt, tm.refusals, tm.firstRefusal = "", time.Time{}, 0, time.Time{}
	}
	if tm != nil && incarnation != "" {
		tm.Incarnation = incarnation
	}
	// The TM just reached us: a cached connection to its address that is backing off after
	// failed dials (the process was down) would keep refusing calls for up to gRPC's reconnect
	// backoff (seconds). A replaced process, or a connection in TRANSIENT_FAILURE (whose calls
	// fail anyway), gets a fresh connection on the next call. (ClientConn.ResetConnectBackoff
	// would do, but grpc-go 1.85 reads its subconnection map there without its lock: the race
	// detector caught it.)
	if cc := r.conns[grpcAddr]; cc != nil && (previous != "" || cc.GetState() == connectivity.TransientFailure) {
		_ = cc.Close()
		delete(r.conns, grpcAddr)
	}
	r.mu.Unlock()
	tm = r.Upsert(id, grpcAddr, dataAddr, slots, true)
	r.mu.Lock()
	if incarnation != "" {
		tm.Incarnation = incarnation
	}
	tm.Registered = true
	delete(r.refused, id)
	r.mu.Unlock()
	if previous != "" {
		r.log.Info("task manager restarted", "tm", id, "incarnation", incarnation, "previous", previous)
	}
	return previous, nil
}

// seenIncarnation is the incarnation as the registry uses it: none with the planted bug
// no-incarnation.
func seenIncarnation(inc string) string {
	if failpoint.Enabled(failpoint.NoIncarnation) {
		return ""
	}
	return inc
}

// SetGossipOf records what gossip says of one incarnation of a TM. News of another incarnation
// than the registered one is ignored: it is about a process that was replaced (gossip keeps a
// dead member's last metadata for a while, and a restarted member's alive message can lose to
// it until it refutes), or one that has not registered yet.
func (r *Registry) SetGossipOf(id, incarnation, state string) {
	incarnation = seenIncarnation(incarnation)
	r.mu.Lock()
	tm := r.tms[id]
	skip := tm != nil && incarnation != "" && tm.Incarnation != "" && incarnation != tm.Incarnation
	r.mu.Unlock()
	if !skip {
		r.SetGossip(id, state)
	}
}

// SetGossip records the TM's gossip state.
func (r *Registry) SetGossip(id, state string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if tm := r.tms[id]; tm != nil {
		if tm.Gossip != state {
			tm.Gossip, tm.GossipAt = state, time.Now()
			if state == "dead" || state == "left" {
				r.log.Info("gossip reports a task manager gone", "tm", id, "state", state)
			}
		}
		if state == "alive" {
			tm.Lost = false
		}
	}
}

// GoneByGossip reports whether gossip says the TM is dead or has left and no direct contact
// (registration or heartbeat) came after gossip said so. Gossip's failure detector gives false
// positives (a missed UDP probe on a busy host marks a live member dead until it refutes); a
// TM that still talks to the leader directly is alive whatever gossip says.
func (tm TaskManager) GoneByGossip() bool {
	return (tm.Gossip == "dead" || tm.Gossip == "left") && !tm.LastSeen.After(tm.GossipAt)
}

// Touch records a heartbeat; it returns false when the TM is unknown.
func (r *Registry) Touch(id string) bool { return r.TouchOf(id, "") }

// TouchOf records a heartbeat of one incarnation; it returns false when the TM is unknown or
// the incarnation is not the registered one (the TM registers again).
func (r *Registry) TouchOf(id, incarnation string) bool {
	incarnation = seenIncarnation(incarnation)
	r.mu.Lock()
	defer r.mu.Unlock()
	tm := r.tms[id]
	if tm == nil || tm.GRPCAddr == "" || !tm.Registered {
		return false
	}
	if incarnation != "" && tm.Incarnation != "" && incarnation != tm.Incarnation {
		return false
	}
	tm.LastSeen = time.Now()
	tm.Lost = false
	r.contactLocked(tm)
	return true
}

// BeginTerm forgets every registration: a new term's leader gives work only to the TMs that
// register with it (their heartbeats answer unknown_task_manager until they do).
func (r *Registry) BeginTerm() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, tm := range r.tms {
		tm.Registered = false
	}
}

// Refuse records that the leader refused a TM's registration (reason, now) and unregisters
// the TM if it was registered: a refused TM is given no work. It reports whether the reason is
// new for the id (the caller logs it once).
func (r *Registry) Refuse(id, reason string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if tm := r.tms[id]; tm != nil {
		tm.Registered = false
	}
	if r.refused == nil {
		r.refused = map[string]Refusal{}
	}
	prev, known := r.refused[id]
	if !known && len(r.refused) >= maxRefused {
		oldest := ""
		for k, v := range r.refused {
			if oldest == "" || v.At.Before(r.refused[oldest].At) {
				oldest = k
			}
		}
		delete(r.refused, oldest)
	}
	r.refused[id] = Refusal{Reason: reason, At: time.Now()}
	return !known || prev.Reason != reason
}

// Refused returns the refusals of the ids that have not registered since, by id.
func (r *Registry) Refused() map[string]Refusal {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]Refusal, len(r.refused))
	for k, v := range r.refused {
		out[k] = v
	}
	return out
}

// MarkLost flags a TM as lost and reports whether it was not already.
func (r *Registry) MarkLost(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	tm := r.tms[id]
	if tm == nil || tm.Lost {
		return false
	}
	tm.Lost = true
	return true
}

// Get returns a copy of one TM.
func (r *Registry) Get(id string) (TaskManager, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	tm := r.tms[id]
	if tm == nil {
		return TaskManager{}, false
	}
	return *tm, true
}

// List returns copies of every TM, sorted by id.
func (r *Registry) List() []TaskManager {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]TaskManager, 0, len(r.tms))
	for _, tm := range r.tms {
		out = append(out, *tm)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Usable returns the TMs a new attempt may be placed on: registered with this leader in its
// term, known address, not lost, not proven dead, not dead by gossip, and seen directly within
// maxSilence.
func (r *Registry) Usable(maxSilence time.Duration) []TaskManager {
	now := time.Now()
	var out []TaskManager
	for _, tm := range r.List() {
		if !tm.Registered || tm.Lost || tm.Dead != "" || tm.GRPCAddr == "" || tm.Slots <= 0 || tm.GoneByGossip() {
			continue
		}
		if tm.LastSeen.IsZero() || now.Sub(tm.LastSeen) > maxSilence {
			continue
		}
		out = append(out, tm)
	}
	return out
}

// SetProtocol records the protocol version a TM registered with.
func (r *Registry) SetProtocol(id string, v uint32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if tm := r.tms[id]; tm != nil {
		tm.Protocol = v
	}
}
