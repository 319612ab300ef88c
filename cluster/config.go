package cluster

import (
	"github.com/jmcluster/jmcluster/internal/setting"
	"github.com/jmcluster/jmcluster/security"

	"fmt"
	"net"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
)

// Peer is one JobMaster of an explicit, static cluster definition.
type Peer struct {
	ID       string
	RaftAddr string
	GRPCAddr string
}

// Config configures a Node. A zero duration or count means the default of DefaultConfig.
type Config struct {
	// ID is the node's Raft server id; unique and stable across restarts.
	ID string
	// DataDir holds raft.db (log and stable store) and snapshots/.
	DataDir string
	// RaftBindAddr is where the Raft TCP transport listens ("127.0.0.1:0" picks a port).
	RaftBindAddr string
	// RaftAdvertiseAddr is the Raft address other nodes dial; empty means the bound address.
	RaftAdvertiseAddr string
	// GRPCAddr is this node's advertised gRPC address (committed in EstablishLeadership so
	// followers can forward to the leader).
	GRPCAddr string

	// BootstrapExpect is the number of JobMasters to wait for before bootstrapping a new
	// cluster from the Join addresses. 0 disables bootstrap-expect.
	BootstrapExpect int
	// Join lists the gRPC addresses of other JobMasters (OperatorService).
	Join []string
	// Peers is an explicit static cluster definition (including this node); an alternative
	// to BootstrapExpect.
	Peers []Peer

	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	SnapshotInterval   time.Duration
	SnapshotThreshold  uint64
	TrailingLogs       uint64

	// ApplyTimeout bounds one Apply (enqueue and commit).
	ApplyTimeout time.Duration
	// ForwardHoldTime is how long a follower waits for a leader (with a known gRPC address)
	// before giving up with ErrNoLeader.
	ForwardHoldTime time.Duration
	// EstablishTimeout bounds the barrier and the EstablishLeadership commit of a new leader.
	EstablishTimeout time.Duration

	// DialOptions are used for gRPC connections to other JobMasters (leader forwarding,
	// bootstrap discovery). Empty means the credentials TLS says.
	DialOptions []grpc.DialOption
	// TLS: mutual TLS on the Raft transport (a TLS stream layer that admits only jobmaster
	// certificates) and on the gRPC connections to other JobMasters; nil for plaintext.
	TLS *security.TLS
	// MaxMessageSize bounds every message those connections send or receive (default
	// transport.DefaultMaxMessageSize; --max-message-size).
	MaxMessageSize int

	// SeenEpoch returns the highest leader epoch any TaskManager claims to have seen, and which
	// one (from gossip); nil or 0 when unknown. A new leader whose committed state holds a lower
	// epoch has lost its state (a wiped cluster): it does not establish leadership, since its
	// reconciliation would cancel the tasks its empty state does not know, and waits for a
	// snapshot restore (Node.Restore).
	SeenEpoch func() (epoch uint64, by string)

	Logger hclog.Logger
}

// DefaultConfig returns the hashicorp/raft default timings and the node's own defaults.
func DefaultConfig() Config {
	rc := raft.DefaultConfig()
	return Config{
		HeartbeatTimeout:   rc.HeartbeatTimeout,
		ElectionTimeout:    rc.ElectionTimeout,
		LeaderLeaseTimeout: rc.LeaderLeaseTimeout,
		CommitTimeout:      rc.CommitTimeout,
		SnapshotInterval:   rc.SnapshotInterval,
		SnapshotThreshold:  rc.SnapshotThreshold,
		TrailingLogs:       rc.TrailingLogs,
		ApplyTimeout:       10 * time.Second,
		ForwardHoldTime:    5 * time.Second,
		EstablishTimeout:   30 * time.Second,
	}
}

// TestConfig returns fast timings for clusters on loopback in one test process, bound to
// 127.0.0.1 on a free port. ID, DataDir and GRPCAddr are left to the caller.
func TestConfig() Config {
	c := DefaultConfig()
	c.RaftBindAddr = "127.0.0.1:0"
	c.HeartbeatTimeout = 200 * time.Millisecond
	c.ElectionTimeout = 200 * time.Millisecond
	c.LeaderLeaseTimeout = 100 * time.Millisecond
	c.CommitTimeout = 5 * time.Millisecond
	c.ApplyTimeout = 3 * time.Second
	c.ForwardHoldTime = 3 * time.Second
	c.EstablishTimeout = 3 * time.Second
	return c
}

// withDefaults returns a copy in which every zero value is replaced by its default.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	setDur := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	setDur(&c.HeartbeatTimeout, d.HeartbeatTimeout)
	setDur(&c.ElectionTimeout, d.ElectionTimeout)
	setDur(&c.LeaderLeaseTimeout, d.LeaderLeaseTimeout)
	setDur(&c.CommitTimeout, d.CommitTimeout)
	setDur(&c.SnapshotInterval, d.SnapshotInterval)
	setDur(&c.ApplyTimeout, d.ApplyTimeout)
	setDur(&c.ForwardHoldTime, d.ForwardHoldTime)
	setDur(&c.EstablishTimeout, d.EstablishTimeout)
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = d.SnapshotThreshold
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = d.TrailingLogs
	}
	if c.Logger == nil {
		c.Logger = hclog.Default()
	}
	return c
}

// Validate reports the first problem of the configuration (after defaults are applied). A
// refusal of one field is a *setting.Error naming it (jmnode names the flag instead).
func (c *Config) Validate() error {
	v := c.withDefaults()
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	field := func(name string, value any, rule string, args ...any) error {
		return setting.New(ErrInvalidConfig, name, value, rule, args...)
	}
	switch {
	case v.ID == "":
		return field("ID", v.ID, "is required")
	case v.DataDir == "":
		return field("DataDir", v.DataDir, "is required")
	case v.RaftBindAddr == "":
		return field("RaftBindAddr", v.RaftBindAddr, "is required")
	case v.GRPCAddr == "":
		return field("GRPCAddr", v.GRPCAddr, "is required")
	case v.BootstrapExpect < 0:
		return field("BootstrapExpect", v.BootstrapExpect, "must not be negative")
	case v.BootstrapExpect > 0 && len(v.Peers) > 0:
		return field("BootstrapExpect", v.BootstrapExpect, "and Peers are alternatives; set one")
	case v.BootstrapExpect > 1 && len(v.Join) == 0:
		return field("BootstrapExpect", v.BootstrapExpect, "needs Join addresses (the other JobMasters)")
	}
	if err := setting.HostPort(ErrInvalidConfig, "RaftBindAddr", v.RaftBindAddr, 0); err != nil {
		return err
	}
	if err := setting.HostPort(ErrInvalidConfig, "GRPCAddr", v.GRPCAddr, 1); err != nil {
		return err
	}
	for _, j := range v.Join {
		if err := setting.HostPort(ErrInvalidConfig, "Join", j, 1); err != nil {
			return err
		}
	}
	if v.RaftAdvertiseAddr != "" {
		if err := setting.HostPort(ErrInvalidConfig, "RaftAdvertiseAddr", v.RaftAdvertiseAddr, 1); err != nil {
			return err
		}
		a, err := net.ResolveTCPAddr("tcp", v.RaftAdvertiseAddr)
		if err != nil {
			return field("RaftAdvertiseAddr", v.RaftAdvertiseAddr, "does not resolve: %v", err)
		}
		if a.IP == nil || a.IP.IsUnspecified() {
			return field("RaftAdvertiseAddr", v.RaftAdvertiseAddr, "is not an address other nodes can dial")
		}
	} else if host, _, _ := net.SplitHostPort(v.RaftBindAddr); host == "" || net.ParseIP(host) != nil && net.ParseIP(host).IsUnspecified() {
		// hashicorp/raft advertises the bound address, and refuses one nobody can dial.
		return field("RaftBindAddr", v.RaftBindAddr, "binds every interface, which other nodes cannot dial: give the address they dial (RaftAdvertiseAddr, jmnode --raft-advertise)")
	}
	if err := validatePeers(v.ID, v.Peers); err != nil {
		list := make([]string, len(v.Peers))
		for i, p := range v.Peers {
			list[i] = p.ID + "=" + p.RaftAddr + "@" + p.GRPCAddr
		}
		return field("Peers", strings.Join(list, ","), "%v", err)
	}
	rc := v.raftConfig(nil)
	if err := raft.ValidateConfig(rc); err != nil {
		return bad("%v", err)
	}
	return nil
}

func validatePeers(self string, peers []Peer) error {
	if len(peers) == 0 {
		return nil
	}
	seen := make(map[string]bool, len(peers))
	addrs := make(map[string]bool, len(peers))
	found := false
	for _, p := range peers {
		if p.ID == "" || p.RaftAddr == "" {
			return fmt.Errorf("peer %+v: ID and RaftAddr are required", p)
		}
		if seen[p.ID] {
			return fmt.Errorf("duplicate peer id %q", p.ID)
		}
		if addrs[p.RaftAddr] {
			return fmt.Errorf("duplicate peer raft address %q", p.RaftAddr)
		}
		seen[p.ID], addrs[p.RaftAddr] = true, true
		found = found || p.ID == self
	}
	if !found {
		return fmt.Errorf("Peers must include this node (%q)", self)
	}
	return nil
}

// raftConfig builds the hashicorp/raft configuration; c must have its defaults applied.
func (c Config) raftConfig(notify chan bool) *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(c.ID)
	rc.HeartbeatTimeout = c.HeartbeatTimeout
	rc.ElectionTimeout = c.ElectionTimeout
	rc.LeaderLeaseTimeout = c.LeaderLeaseTimeout
	rc.CommitTimeout = c.CommitTimeout
	rc.SnapshotInterval = c.SnapshotInterval
	rc.SnapshotThreshold = c.SnapshotThreshold
	rc.TrailingLogs = c.TrailingLogs
	if notify != nil {
		rc.NotifyCh = notify
	}
	if c.Logger != nil {
		rc.Logger = c.Logger.Named("raft")
	}
	return rc
}
