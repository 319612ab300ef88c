// Package jobmaster is the active JobMaster: the leader-only work of a JM replica. It owns the
// TaskManager registry, the RPC gate, slot allocation, deployment under the write-ahead rule,
// failover and cancellation. Every decision reads the committed state (fsm) and every intent is
// committed through Raft before it is acted on.
package jobmaster

import (
	"github.com/jmcluster/jmcluster/security"

	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/checkpoint"
	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/internal/failpoint"
	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// Sentinel errors of the active JobMaster.
var (
	// ErrNotLeader: the call needs the established leader and this node is not it.
	ErrNotLeader = errors.New("jobmaster: not the established leader")
	// ErrReconciling: the RPC gate is closed while the leader reconciles.
	ErrReconciling = errors.New("jobmaster: leader is reconciling")
	// ErrNoSlots: the usable TaskManagers do not have enough free slots for a deployment.
	ErrNoSlots = errors.New("jobmaster: not enough free slots")
	// ErrVerifyingLeadership: this leader was stalled and answers TaskManagers again once a
	// quorum confirms it still leads (liveness.go).
	ErrVerifyingLeadership = fmt.Errorf("%w: this leader was stalled and is confirming with a quorum that it still leads", ErrNotLeader)
)

// leaderVerifier is implemented by a Raft node that can confirm its leadership with a quorum
// (cluster.Node.VerifyLeader).
type leaderVerifier interface {
	VerifyLeader(ctx context.Context) error
}

// Raft is what the JobMaster needs of the Raft node (cluster.Node implements it).
type Raft interface {
	Apply(ctx context.Context, cmd []byte) (*fsm.Result, error)
	ID() string
	GRPCAddr() string
	IsLeader() bool
	LeaderGRPCAddr(ctx context.Context) (id, addr string, err error)
}

// Reconciler runs the reconciliation protocol when a node becomes leader, before the gate
// opens (package reconcile implements it), through the term's port. It returns once the
// reconciled graph is committed.
type Reconciler interface {
	Reconcile(ctx context.Context, t Term) error
}

// Config of the active JobMaster. Zero values mean the defaults.
type Config struct {
	// HeartbeatInterval is the interval TMs are told to heartbeat at (default 1s).
	HeartbeatInterval time.Duration
	// HeartbeatTimeout declares a TM lost when it has not heartbeated for this long (default
	// 10s). It is also the redeploy delay of the isolation rule: the attempts of a silent TM
	// not proven dead are redeployed no sooner, counted from the later of its last heartbeat
	// and the start of a strict majority of its pool's current heartbeat streaks, and only
	// while that majority heartbeats (isolation.go; Validate checks it against the timings
	// below).
	HeartbeatTimeout time.Duration
	// FenceTimeout, PoolQueryInterval, PoolQueryTimeout and TMLeaderGrace are the isolation
	// rule's timings, sent to every TM at registration: how long a TM may go without leader
	// contact before it asks the pool (default 5s, lowered to what HeartbeatTimeout allows),
	// how often it asks (default 500ms), how long one question may take (default 1s), and how
	// long it keeps its tasks through a JobMaster outage (default 5m).
	FenceTimeout, PoolQueryInterval, PoolQueryTimeout, TMLeaderGrace time.Duration
	// DeadRefusals and DeadRefusalWindow confirm a TM's death by its closed port: the leader
	// probes a TM that is overdue with its heartbeat (or whose calls fail, or that gossip reports
	// gone) with TCP connects to its gRPC address, and DeadRefusals refused connections in a
	// row, spanning at least DeadRefusalWindow, prove the process gone: it is lost at once
	// (defaults 3 and 300ms; --dead-refusals, --dead-refusal-window). See liveness.go.
	DeadRefusals      int
	DeadRefusalWindow time.Duration
	// RetryAfter is the delay the gate's refusal suggests (default 200ms).
	RetryAfter time.Duration
	// RPCTimeout bounds every JM -> TM call (default 5s).
	RPCTimeout time.Duration
	// MaxMessageSize bounds every message of the JM -> TM connections (default
	// transport.DefaultMaxMessageSize; --max-message-size).
	MaxMessageSize int
	// TLS: mutual TLS on the JM -> TM connections (the TM's certificate must have the
	// taskmanager role); nil for plaintext.
	TLS *security.TLS
	// TickInterval drives timeouts, pending deployments and restarts (default 200ms).
	TickInterval time.Duration
	// MaxBatch is the most execution-state updates committed in one Raft entry (default 1000).
	MaxBatch int
	// SlotTimeout: a deployment that has waited this long for free slots, without a break,
	// fails its job (FAILED, no restart) with a cause naming the slots needed and free
	// (Flink's slot.request.timeout; default 5 minutes). Negative: wait forever.
	SlotTimeout time.Duration
	// SizeLimits bound what a submitted job may expand to, checked on the leader before the
	// SUBMIT_JOB is committed. Zero fields mean graph.DefaultSizeLimits; a value above
	// graph.CeilingSizeLimits is lowered to the ceiling (jmnode refuses it at startup).
	SizeLimits graph.SizeLimits
	// RetainJobs is how many terminal jobs (FINISHED, CANCELED, FAILED) are kept; the leader
	// removes the oldest beyond it (default 100).
	RetainJobs int
	// RetainJobAge is how long a terminal job is kept after it ended (default 1h).
	RetainJobAge time.Duration
	// RetentionInterval is how often the leader looks for terminal jobs to remove (default
	// RetainJobAge/10, within [1s, 1m]). The same round aborts abandoned artifact uploads and
	// removes artifacts no job names that were stored more than RetainJobAge ago.
	RetentionInterval time.Duration
	// ArtifactMaxBytes, ArtifactMaxTotalBytes and ArtifactMaxCount are the limits of new
	// artifact uploads: bytes per artifact (default fsm.DefaultArtifactMaxBytes, 16 MiB), bytes
	// of every artifact and upload together (fsm.DefaultArtifactMaxTotalBytes, 256 MiB) and
	// their number (fsm.DefaultArtifactMaxCount, 100); each at most its replicated ceiling
	// (fsm.ArtifactCeiling*; Validate refuses more).
	ArtifactMaxBytes, ArtifactMaxTotalBytes int64
	ArtifactMaxCount                        int
	// SubmitBatchTasks is the most tasks one SubmitTasks call carries (default 512).
	SubmitBatchTasks int
	// SubmitBatchBytes bounds the encoded SubmitTasks request (default transport.ChunkBudget(0):
	// the 4 MiB message limit minus a 256 KiB margin). A single descriptor above it is failed
	// with an error naming the limit.
	SubmitBatchBytes int
	// SubmitAttempts is how many times a batch is sent when the call fails transiently
	// (UNAVAILABLE, DEADLINE_EXCEEDED) before its tasks are failed (default 3).
	SubmitAttempts int
	// Checkpoints is the checkpoint storage root (--checkpoint-dir): the leader deletes the
	// state of discarded checkpoints and of removed jobs from it. nil: checkpointed jobs are
	// refused at submission and nothing is triggered.
	Checkpoints *checkpoint.Store
	// ServersApply reports whether every Raft server gossips that it applies the commands of a
	// command level (agent: gossip metadata); the leader triggers checkpoints only while they
	// all apply fsm.LevelCheckpoints. nil: every server does.
	ServersApply func(level int) bool
	// Instruments receives what the JobMaster measures (metrics.JobMaster); nil: none.
	Instruments Instruments
	Logger      hclog.Logger
}

// Instruments receives the JobMaster's measurements: each commit, each reconciliation this
// node ran (its committed record, or the error), and each deployment of restarted regions
// (failure: counted by the restart strategy; otherwise moved, as a drain moves them).
type Instruments interface {
	Committed(took time.Duration, err error)
	ReconciliationEnded(rec *pb.ReconciliationRecord, gateOpen time.Time, err error)
	RegionsRestarted(n int, failure bool)
}

// Defaults of the terminal-job retention and of the confirmation of a TM's death by refused
// connections.
const (
	DefaultDeadRefusals      = 3
	DefaultDeadRefusalWindow = 300 * time.Millisecond

	DefaultRetainJobs = 100
	// DefaultSlotTimeout is Flink's slot.request.timeout.
	DefaultSlotTimeout  = 5 * time.Minute
	DefaultRetainJobAge = time.Hour
)

func (c *Config) setDefaults() {
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = time.Second
	}
	if c.HeartbeatTimeout <= 0 {
		c.HeartbeatTimeout = 10 * time.Second
	}
	if c.DeadRefusals <= 0 {
		c.DeadRefusals = DefaultDeadRefusals
	}
	if c.DeadRefusalWindow <= 0 {
		c.DeadRefusalWindow = DefaultDeadRefusalWindow
	}
	if c.RetryAfter <= 0 {
		c.RetryAfter = 200 * time.Millisecond
	}
	// The pool's timings scale down with a short heartbeat timeout (tests, demos), so that the
	// defaults always leave the fence timeout room.
	if c.PoolQueryInterval <= 0 {
		c.PoolQueryInterval = min(500*time.Millisecond, c.HeartbeatTimeout/20)
	}
	if c.PoolQueryTimeout <= 0 {
		c.PoolQueryTimeout = min(time.Second, c.HeartbeatTimeout/10)
	}
	if c.TMLeaderGrace <= 0 {
		c.TMLeaderGrace = 5 * time.Minute
	}
	if c.FenceTimeout <= 0 {
		c.FenceTimeout = min(5*time.Second, maxFenceTimeout(*c))
	}
	if c.RPCTimeout <= 0 {
		c.RPCTimeout = 5 * time.Second
	}
	if c.TickInterval <= 0 {
		c.TickInterval = 200 * time.Millisecond
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = 1000
	}
	if c.SlotTimeout == 0 {
		c.SlotTimeout = DefaultSlotTimeout
	}
	if c.SubmitBatchTasks <= 0 {
		c.SubmitBatchTasks = 512
	}
	if c.SubmitBatchBytes <= 0 {
		c.SubmitBatchBytes = transport.ChunkBudget(0)
	}
	if c.SubmitAttempts <= 0 {
		c.SubmitAttempts = 3
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if err := c.SizeLimits.Validate(); err != nil {
		c.Logger.Warn("size limit lowered to the replicated ceiling", "error", err)
	}
	c.SizeLimits = c.SizeLimits.Clamp()
	if c.RetainJobs <= 0 {
		c.RetainJobs = DefaultRetainJobs
	}
	if c.RetainJobAge <= 0 {
		c.RetainJobAge = DefaultRetainJobAge
	}
	if c.RetentionInterval <= 0 {
		c.RetentionInterval = min(max(c.RetainJobAge/10, time.Second), time.Minute)
	}
	if c.ArtifactMaxBytes <= 0 {
		c.ArtifactMaxBytes = fsm.DefaultArtifactMaxBytes
	}
	if c.ArtifactMaxTotalBytes <= 0 {
		c.ArtifactMaxTotalBytes = fsm.DefaultArtifactMaxTotalBytes
	}
	if c.ArtifactMaxCount <= 0 {
		c.ArtifactMaxCount = fsm.DefaultArtifactMaxCount
	}
	c.ArtifactMaxBytes = min(c.ArtifactMaxBytes, fsm.ArtifactCeilingBytes)
	c.ArtifactMaxTotalBytes = min(c.ArtifactMaxTotalBytes, fsm.ArtifactCeilingTotalBytes)
	c.ArtifactMaxCount = min(c.ArtifactMaxCount, fsm.ArtifactCeilingCount)
}

// JobMaster is created on every JM replica; it becomes active when the node establishes
// leadership (cluster calls EstablishLeadership) and goes passive when it is revoked.
type JobMaster struct {
	probeMu sync.Mutex
	probed  map[string]time.Time // TM address -> when witnessEpoch last asked it

	cfg   Config
	raft  Raft
	state *fsm.FSM
	log   hclog.Logger
	tms   *Registry

	reconciler Reconciler
	gateOpen   atomic.Bool

	// deployFailures counts deployments whose write-ahead commit failed; deployWaits those that
	// waited for free slots (observability and the write-ahead tests).
	deployFailures atomic.Int64
	deployWaits    atomic.Int64
	// foreignCancels counts completed CancelTask calls for attempts the graph does not own on
	// the TM that reported them.
	foreignCancels atomic.Int64

	// artifactMu serializes a job's artifact check and commit with artifact removals, so
	// that this leader never commits a job naming an artifact it removed meanwhile.
	artifactMu sync.Mutex
	// verdicts: the submit check's verdict on each module it read, by sha256 (modules.go;
	// guarded by artifactMu).
	verdicts map[string]moduleVerdict
	// uploads are the artifact uploads this node's handlers feed (artifacts.go); the
	// retention aborts the others.
	uploadsMu sync.Mutex
	uploads   map[string]bool

	mu     sync.Mutex
	term   *term // nil while not the established leader
	closed bool
}

// New creates a passive JobMaster.
func New(cfg Config, raft Raft, state *fsm.FSM) *JobMaster {
	cfg.setDefaults()
	jm := &JobMaster{
		cfg:   cfg,
		raft:  raft,
		state: state,
		log:   cfg.Logger.Named("jobmaster"),

		uploads: map[string]bool{},
	}
	jm.tms = newRegistry(jm.log, cfg.RPCTimeout, cfg.MaxMessageSize)
	jm.tms.tls = cfg.TLS
	return jm
}

// SetRaft sets the Raft node (it is created after the JobMaster, which is its leader hook).
func (jm *JobMaster) SetRaft(r Raft) { jm.raft = r }

// SetReconciler installs the reconciliation run at the start of every term.
func (jm *JobMaster) SetReconciler(r Reconciler) { jm.reconciler = r }

// DeployFailures is the number of deployments abandoned because their write-ahead commit (the
// attempts, their DEPLOYING state or the restart count) failed; no SubmitTask was sent for them.
func (jm *JobMaster) DeployFailures() int64 { return jm.deployFailures.Load() }

// ForeignCancels is the number of CancelTask calls completed for attempts a TM reported (in a
// heartbeat, or in its report to reconciliation) that the graph does not place on that TM
// (nothing is committed for them).
func (jm *JobMaster) ForeignCancels() int64 { return jm.foreignCancels.Load() }

// DeployWaits is the number of deployments that had to wait for free slots.
func (jm *JobMaster) DeployWaits() int64 { return jm.deployWaits.Load() }

// Registry returns the TaskManager registry (shared with reconcile and the HTTP views).
func (jm *JobMaster) Registry() *Registry { return jm.tms }

// State returns the replicated state this JobMaster reads.
func (jm *JobMaster) State() *fsm.FSM { return jm.state }

// Config returns the effective configuration.
func (jm *JobMaster) Config() Config { return jm.cfg }

// Epoch is the epoch of the current term, or 0 when not the established leader.
func (jm *JobMaster) Epoch() uint64 {
	jm.mu.Lock()
	defer jm.mu.Unlock()
	if jm.term == nil {
		return 0
	}
	return jm.term.epoch
}

// Active reports whether this node is the established leader.
func (jm *JobMaster) Active() bool { return jm.Epoch() != 0 }

// Reconciling reports whether this node is the leader with its RPC gate closed.
func (jm *JobMaster) Reconciling() bool { return jm.Active() && !jm.gateOpen.Load() }

// EstablishLeadership is called by the cluster's leader loop after EstablishLeadership{epoch}
// is committed. It closes the gate, reconciles, opens the gate and starts the scheduler. An
// error makes the node step down.
func (jm *JobMaster) EstablishLeadership(ctx context.Context, epoch uint64) error {
	jm.gateOpen.Store(false)
	// Work goes only to the TMs that register with this term (they do as soon as their
	// heartbeat is answered unknown_task_manager, or the new leader reaches them).
	jm.tms.BeginTerm()
	t := newTerm(ctx, jm, epoch)
	jm.mu.Lock()
	if jm.closed {
		jm.mu.Unlock()
		return errors.New("jobmaster: shut down")
	}
	jm.term = t
	jm.mu.Unlock()
	jm.log.Info("leadership established; gate closed", "epoch", epoch)

	early := failpoint.Enabled(failpoint.EarlyGate)
	if early {
		jm.log.Warn("failpoint early-gate: gate opened before reconciliation commits", "epoch", epoch)
		jm.gateOpen.Store(true)
		t.start()
	}
	if jm.reconciler != nil {
		if err := jm.reconciler.Reconcile(ctx, t); err != nil {
			jm.revoke(t)
			if in := jm.cfg.Instruments; in != nil {
				in.ReconciliationEnded(nil, time.Now(), err)
			}
			return fmt.Errorf("reconciliation at epoch %d: %w", epoch, err)
		}
	}
	if !early {
		jm.gateOpen.Store(true)
		t.start()
	}
	jm.log.Info("gate open", "epoch", epoch)
	if in := jm.cfg.Instruments; in != nil && jm.reconciler != nil {
		var rec *pb.ReconciliationRecord
		for _, r := range jm.state.Reconciliations() {
			if r.Epoch == epoch {
				rec = r
			}
		}
		in.ReconciliationEnded(rec, time.Now(), nil)
	}
	return nil
}

// RevokeLeadership stops every leader-only activity; called when leadership is lost.
func (jm *JobMaster) RevokeLeadership() {
	jm.mu.Lock()
	t := jm.term
	jm.mu.Unlock()
	if t != nil {
		jm.revoke(t)
	}
}

func (jm *JobMaster) revoke(t *term) {
	jm.gateOpen.Store(false)
	jm.mu.Lock()
	if jm.term == t {
		jm.term = nil
	}
	jm.mu.Unlock()
	t.stop()
	jm.log.Info("leadership revoked", "epoch", t.epoch)
}

// Shutdown stops the JobMaster for good.
func (jm *JobMaster) Shutdown() {
	jm.mu.Lock()
	jm.closed = true
	jm.mu.Unlock()
	jm.RevokeLeadership()
	jm.tms.close()
}

// currentTerm returns the active term or an error explaining why there is none.
func (jm *JobMaster) currentTerm() (*term, error) {
	jm.mu.Lock()
	defer jm.mu.Unlock()
	if jm.term == nil {
		return nil, ErrNotLeader
	}
	return jm.term, nil
}

// openTerm returns the active term when the gate is open.
func (jm *JobMaster) openTerm() (*term, error) {
	t, err := jm.currentTerm()
	if err != nil {
		return nil, err
	}
	if !jm.gateOpen.Load() {
		return nil, ErrReconciling
	}
	return t, nil
}

// Commit encodes and commits one command, returning the applier's value. A domain error of
// the applier is returned as the error.
func (jm *JobMaster) Commit(ctx context.Context, t pb.CommandType, m proto.Message) (*fsm.Result, error) {
	data, err := fsm.Encode(t, m)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	res, err := jm.raft.Apply(ctx, data)
	if in := jm.cfg.Instruments; in != nil {
		in.Committed(time.Since(start), err)
	}
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return res, res.Err
	}
	return res, nil
}

// Kick asks the scheduler to look at a job again (after a submit or cancel was committed).
func (jm *JobMaster) Kick(jobID string) {
	if t, err := jm.currentTerm(); err == nil {
		t.kick(jobID)
	}
}

func nowMillis() int64 { return time.Now().UnixMilli() }

// NodeID is this replica's id.
func (jm *JobMaster) NodeID() string { return jm.raft.ID() }

// GRPCAddr is this replica's advertised gRPC address.
func (jm *JobMaster) GRPCAddr() string { return jm.raft.GRPCAddr() }

// Logger returns the JobMaster's logger.
func (jm *JobMaster) Logger() hclog.Logger { return jm.log }
