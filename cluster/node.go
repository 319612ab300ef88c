// Package cluster is the Raft node of a JobMaster replica: hashicorp/raft over a bolt log and
// stable store, file snapshots and a TCP transport; bootstrap and join; the leadership monitor
// that fences every new leader with a committed epoch; and forwarding to the leader.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/transport/pb"
)

const (
	raftDBFile       = "raft.db"
	snapshotsRetain  = 2
	logCacheSize     = 512
	transportMaxPool = 3
	transportTimeout = 10 * time.Second
	// transportMaxInFlight 1 turns off hashicorp/raft's pipelined replication: with it, a
	// follower answering an AppendEntries with success=false (it could not store the entries: a
	// full or failing disk) can leave the pipeline's send and decode goroutines waiting on each
	// other, so the leader never sends that follower another entry (while its heartbeats keep
	// it from calling an election) and raft.Shutdown never returns
	// (TestDiskFullNeverAcknowledges hung in Shutdown with it on). hashicorp/raft measured
	// pipelining to bring little (raft#541); replication is synchronous per follower.
	transportMaxInFlight = 1
	pollInterval         = 10 * time.Millisecond
)

// StateMachine is the replicated state machine the node drives. Apply must return
// *fsm.Result. Epoch may be called concurrently with Apply.
type StateMachine interface {
	raft.FSM
	// Epoch returns the committed leader epoch record (never nil; epoch 0 before the first
	// election).
	Epoch() *pb.LeaderEpoch
}

// LeaderHooks is told when this node has established leadership (its EstablishLeadership
// entry is committed) and when it loses it. ctx is cancelled when leadership is lost. An error
// from EstablishLeadership revokes leadership and makes the node step down.
type LeaderHooks interface {
	EstablishLeadership(ctx context.Context, epoch uint64) error
	RevokeLeadership()
}

// Node is one Raft voter of the JobMaster cluster.
type Node struct {
	cfg    Config
	logger hclog.Logger
	sm     StateMachine
	hooks  LeaderHooks

	raft      *raft.Raft
	transport *raft.NetworkTransport
	store     *raftboltdb.BoltStore
	logs      raft.LogStore
	snaps     *raft.FileSnapshotStore
	raftAddr  string
	notifyCh  chan bool

	// ctx is cancelled by Shutdown; wg tracks the goroutines that watch it.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	started      atomic.Bool
	closed       atomic.Bool
	shutdownOnce sync.Once
	shutdownErr  error

	mu          sync.Mutex
	grpcAddrs   map[string]string // server id -> gRPC address, learned from config and discovery
	established bool
	epoch       uint64

	restoreCh    chan restoreReq        // Restore -> leaderLoop
	recheck      chan struct{}          // NoteSeenEpoch -> leaderLoop: establish again
	restoring    atomic.Bool            // a Restore runs
	prevContact  atomic.Int64           // unix ns of the last contact with a leader before this node led
	behind       atomic.Pointer[string] // why the leader does not establish (ErrStateBehind)
	refusedEpoch atomic.Uint64          // the highest epoch named by a STALE_EPOCH refusal

	fwd forwarder

	// peers: the voters this node's Raft, while it leads, fails to heartbeat (peercontact.go).
	peers peerContacts
}

// NewNode opens the stores in cfg.DataDir, binds the Raft transport and starts Raft. The
// leadership monitor and any bootstrap start with Start, which should follow promptly: raft
// blocks on its leadership notifications once their buffer is full.
func NewNode(cfg Config, sm StateMachine, hooks LeaderHooks) (n *Node, err error) {
	if sm == nil {
		return nil, fmt.Errorf("%w: nil StateMachine", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	logger := cfg.Logger.Named("cluster").With("node", cfg.ID)

	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("cluster: data dir: %w", err)
	}
	var closers []func() error
	defer func() {
		if err != nil {
			for i := len(closers) - 1; i >= 0; i-- {
				_ = closers[i]()
			}
		}
	}()

	if err := verifyOnStart(cfg, logger); err != nil {
		return nil, err
	}
	// One bolt file is both the log store and the stable store; every write is fsynced.
	store, err := raftboltdb.New(raftboltdb.Options{
		Path:        filepath.Join(cfg.DataDir, raftDBFile),
		BoltOptions: &bbolt.Options{Timeout: time.Second},
		NoSync:      false,
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: open %s: %w", raftDBFile, err)
	}
	closers = append(closers, store.Close)
	health := newDiskHealth(logger, diskFailHoldoff)
	// Beneath the disk failpoints, every entry and value is checksummed (logchecksum.go), then
	// held in memory while disk-lose-unsynced is on (lostwrites.go).
	lossy := newLossyStore(store, store, logger)
	logs, err := raft.NewLogCache(logCacheSize, faultyLogStore{checksumLogStore{LogStore: lossyLogs{lossy}}, health})
	if err != nil {
		return nil, fmt.Errorf("cluster: log cache: %w", err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, snapshotsRetain, logger.Named("snapshots"))
	if err != nil {
		return nil, fmt.Errorf("cluster: snapshot store: %w", err)
	}

	var advertise net.Addr
	if cfg.RaftAdvertiseAddr != "" {
		if advertise, err = net.ResolveTCPAddr("tcp", cfg.RaftAdvertiseAddr); err != nil {
			return nil, fmt.Errorf("cluster: raft advertise address: %w", err)
		}
	}
	tcfg := &raft.NetworkTransportConfig{
		MaxPool: transportMaxPool, Timeout: transportTimeout, Logger: logger.Named("raft-net"),
		MaxRPCsInFlight: transportMaxInFlight,
	}
	var trans *raft.NetworkTransport
	if cfg.TLS != nil {
		trans, err = newTLSTransport(cfg.RaftBindAddr, advertise, cfg.TLS, tcfg)
	} else {
		trans, err = raft.NewTCPTransportWithConfig(cfg.RaftBindAddr, advertise, tcfg)
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: raft transport on %s: %w", cfg.RaftBindAddr, err)
	}
	closers = append(closers, trans.Close)

	notifyCh := make(chan bool, 16)
	stable := faultyStableStore{checksumStableStore{lossyStable{lossy}}, health}
	snapStore := faultySnapshotStore{checksumSnapshotStore{snaps, filepath.Join(cfg.DataDir, snapshotsDir)}}
	r, err := raft.NewRaft(cfg.raftConfig(notifyCh), sm, logs, stable, snapStore, diskAwareTransport{trans, health})
	if err != nil {
		return nil, fmt.Errorf("cluster: start raft: %w", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	n = &Node{
		cfg:       cfg,
		logger:    logger,
		sm:        sm,
		hooks:     hooks,
		raft:      r,
		transport: trans,
		store:     store,
		logs:      logs,
		snaps:     snaps,
		raftAddr:  string(trans.LocalAddr()),
		notifyCh:  notifyCh,
		ctx:       ctx,
		cancel:    cancel,
		grpcAddrs: make(map[string]string),
		restoreCh: make(chan restoreReq),
		recheck:   make(chan struct{}, 1),
	}
	for _, p := range cfg.Peers {
		if p.GRPCAddr != "" {
			n.grpcAddrs[p.ID] = p.GRPCAddr
		}
	}
	n.wg.Add(1)
	go n.watchPeers()
	logger.Info("raft started", "tls", cfg.TLS != nil, "raft_addr", n.raftAddr, "grpc_addr", cfg.GRPCAddr, "data_dir", cfg.DataDir)
	return n, nil
}

// ID is this node's Raft server id.
func (n *Node) ID() string { return n.cfg.ID }

// RaftAddr is the advertised Raft transport address (the bound port when 0 was asked for).
func (n *Node) RaftAddr() string { return n.raftAddr }

// GRPCAddr is this node's advertised gRPC address.
func (n *Node) GRPCAddr() string { return n.cfg.GRPCAddr }

// IsLeader reports whether Raft considers this node the leader (established or not).
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// Leader returns the current leader's id and Raft address as this node knows them, or "".
func (n *Node) Leader() (id, raftAddr string) {
	addr, sid := n.raft.LeaderWithID()
	return string(sid), string(addr)
}

// LeaderIsFresh reports whether this node has evidence that the leader it knows is alive now:
// it is the leader, or it is a follower that heard from the leader within half the Raft
// heartbeat timeout (a live leader sends a heartbeat every tenth of it, so that is five missed
// heartbeats). After a leader dies its followers keep naming it until their heartbeat timeout
// fires (up to twice the timeout, more on a busy host); a TaskManager must not take that name
// as proof of a live leader it is cut off from.
func (n *Node) LeaderIsFresh() bool {
	if n.IsLeader() {
		return true
	}
	if id, _ := n.Leader(); id == "" {
		return false
	}
	return time.Since(n.raft.LastContact()) <= n.cfg.HeartbeatTimeout/2
}

// State is the Raft state: "Follower", "Candidate", "Leader" or "Shutdown".
func (n *Node) State() string { return n.raft.State().String() }

// Epoch is the epoch this node established, when it is the established leader; else 0.
func (n *Node) Epoch() uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.epoch
}

// Established reports whether this node is the leader and its EstablishLeadership entry is
// committed.
func (n *Node) Established() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.established
}

// AppliedIndex is the index of the last entry applied to the FSM.
func (n *Node) AppliedIndex() uint64 { return n.raft.AppliedIndex() }

// CommitIndex is the index of the last committed entry this node knows of.
func (n *Node) CommitIndex() uint64 { return n.raft.CommitIndex() }

// Apply commits cmd (built with fsm.Encode) through the established leader and returns the
// FSM's result. A command the FSM rejects comes back as (*fsm.Result with Err set, nil).
// On a follower it returns an error wrapping ErrNotLeader; on a leader that has not yet
// committed its epoch, ErrNotEstablished.
func (n *Node) Apply(ctx context.Context, cmd []byte) (*fsm.Result, error) {
	if err := n.checkLeader(); err != nil {
		return nil, err
	}
	if !n.Established() {
		return nil, ErrNotEstablished
	}
	return n.apply(ctx, cmd, n.cfg.ApplyTimeout)
}

// apply commits cmd without the established check (the leader loop uses it to commit the
// epoch itself); timeout bounds both the enqueue and the wait for the commit.
func (n *Node) apply(ctx context.Context, cmd []byte, timeout time.Duration) (*fsm.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	f := n.raft.Apply(cmd, boundTimeout(ctx, timeout))
	if err := waitFuture(ctx, f); err != nil {
		return nil, fmt.Errorf("cluster: apply: %w", err)
	}
	res, ok := f.Response().(*fsm.Result)
	if !ok {
		return nil, fmt.Errorf("cluster: apply: FSM returned %T, want *fsm.Result", f.Response())
	}
	if res.Index == 0 {
		res.Index = f.Index()
	}
	return res, nil
}

// Barrier waits until every entry committed before it is applied on this leader.
func (n *Node) Barrier(ctx context.Context) error {
	if err := n.checkLeader(); err != nil {
		return err
	}
	if err := waitFuture(ctx, n.raft.Barrier(boundTimeout(ctx, n.cfg.ApplyTimeout))); err != nil {
		return fmt.Errorf("cluster: barrier: %w", err)
	}
	return nil
}

// VerifyLeader confirms with a quorum that this node is still the established leader; a
// read served after it returns nil is current.
func (n *Node) VerifyLeader(ctx context.Context) error {
	if err := n.checkLeader(); err != nil {
		return err
	}
	if !n.Established() {
		return ErrNotEstablished
	}
	return n.verifyRaftLeader(ctx)
}

// VerifyBehindLeader is VerifyLeader for a Raft leader whose state is behind the TaskManagers
// (it never establishes): Raft confirms its leadership, and every committed entry is applied.
func (n *Node) VerifyBehindLeader(ctx context.Context) error {
	if err := n.checkLeader(); err != nil {
		return err
	}
	if n.Behind() == "" {
		return ErrNotEstablished
	}
	if err := waitFuture(ctx, n.raft.Barrier(n.cfg.ApplyTimeout)); err != nil {
		return fmt.Errorf("cluster: barrier: %w", err)
	}
	return n.verifyRaftLeader(ctx)
}

func (n *Node) verifyRaftLeader(ctx context.Context) error {
	if err := waitFuture(ctx, n.raft.VerifyLeader()); err != nil {
		return fmt.Errorf("cluster: verify leader: %w", err)
	}
	return nil
}

// WaitForLeader waits until this node knows a leader.
func (n *Node) WaitForLeader(ctx context.Context) error {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		if id, _ := n.Leader(); id != "" {
			return nil
		}
		if n.closed.Load() {
			return ErrShutdown
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ErrNoLeader, ctx.Err())
		case <-t.C:
		}
	}
}

// Snapshot takes a snapshot now and returns its id and last included index.
func (n *Node) Snapshot() (id string, index uint64, err error) {
	f := n.raft.Snapshot()
	if err := f.Error(); err != nil {
		return "", 0, fmt.Errorf("cluster: snapshot: %w", mapRaftErr(err))
	}
	meta, rc, err := f.Open()
	if err != nil {
		return "", 0, fmt.Errorf("cluster: open snapshot: %w", err)
	}
	_ = rc.Close()
	return meta.ID, meta.Index, nil
}

// Info describes this node for bootstrap discovery and operators.
func (n *Node) Info() *pb.NodeInfoResponse {
	leader, _ := n.Leader()
	return &pb.NodeInfoResponse{
		Id:          n.cfg.ID,
		RaftAddress: n.raftAddr,
		GrpcAddress: n.cfg.GRPCAddr,
		HasState:    n.hasState(),
		LeaderId:    leader,
		RaftState:   n.State(),
	}
}

// Stats returns hashicorp/raft's statistics plus the node's own.
func (n *Node) Stats() map[string]string {
	s := n.raft.Stats()
	s["node_id"] = n.cfg.ID
	s["grpc_address"] = n.cfg.GRPCAddr
	s["raft_address"] = n.raftAddr
	s["established"] = strconv.FormatBool(n.Established())
	s["epoch"] = strconv.FormatUint(n.Epoch(), 10)
	s["committed_epoch"] = strconv.FormatUint(n.sm.Epoch().GetEpoch(), 10)
	return s
}

func (n *Node) hasState() bool {
	if n.closed.Load() {
		return false
	}
	ok, err := raft.HasExistingState(n.logs, n.store, n.snaps)
	if err != nil {
		n.logger.Warn("cannot read raft state", "error", err)
		return false
	}
	return ok
}

// checkLeader returns nil on the Raft leader, else an error wrapping ErrNotLeader (or
// ErrShutdown).
func (n *Node) checkLeader() error {
	if n.closed.Load() {
		return ErrShutdown
	}
	if n.raft.State() == raft.Leader {
		return nil
	}
	if id, _ := n.Leader(); id != "" {
		return fmt.Errorf("%w (leader is %s)", ErrNotLeader, id)
	}
	return ErrNotLeader
}

// grpcAddrFor returns the gRPC address of server id, or "" when unknown. The committed epoch
// record is authoritative for the leader that wrote it.
func (n *Node) grpcAddrFor(id string) string {
	if id == "" {
		return ""
	}
	if id == n.cfg.ID {
		return n.cfg.GRPCAddr
	}
	if e := n.sm.Epoch(); e.GetLeaderId() == id && e.GetLeaderGrpcAddress() != "" {
		return e.GetLeaderGrpcAddress()
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.grpcAddrs[id]
}

func (n *Node) learnGRPCAddr(id, addr string) {
	if id == "" || addr == "" || id == n.cfg.ID {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.grpcAddrs[id] = addr
}

// boundTimeout returns d, shortened to the context's deadline when that comes first.
func boundTimeout(ctx context.Context, d time.Duration) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		if left := time.Until(dl); left < d {
			return max(left, time.Millisecond)
		}
	}
	return d
}

// waitFuture waits for a raft future or the context, mapping raft errors to this package's
// sentinels. The future always resolves (raft answers every future on leadership loss and
// shutdown), so the helper goroutine never leaks.
func waitFuture(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return mapRaftErr(err)
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrOutcomeUnknown, ctx.Err())
	}
}

func mapRaftErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return fmt.Errorf("%w: %w", ErrNotLeader, err)
	case errors.Is(err, raft.ErrLeadershipLost):
		return fmt.Errorf("%w: %w", ErrLeadershipLost, err)
	case errors.Is(err, raft.ErrRaftShutdown):
		return fmt.Errorf("%w: %w", ErrShutdown, err)
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
	}
	return err
}
