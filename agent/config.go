package agent

import (
	"errors"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/jmcluster/jmcluster/cluster"
	"github.com/jmcluster/jmcluster/internal/setting"
	"github.com/jmcluster/jmcluster/jmserver"
	"github.com/jmcluster/jmcluster/jobmaster"
	"github.com/jmcluster/jmcluster/membership"
	"github.com/jmcluster/jmcluster/reconcile"
	"github.com/jmcluster/jmcluster/security"
	"github.com/jmcluster/jmcluster/taskmanager"
)

// JobMasterConfig configures one JM replica.
type JobMasterConfig struct {
	// Cluster is the Raft node's configuration (ID, DataDir, addresses, bootstrap).
	Cluster cluster.Config
	// GRPCAddr is the gRPC listen address; Cluster.GRPCAddr is the advertised one (defaults to
	// the bound address).
	GRPCAddr string
	// HTTPAddr is the HTTP listen address; empty turns HTTP off.
	HTTPAddr string
	// Gossip configures memberlist; nil turns gossip off.
	Gossip *membership.Config
	// JobMaster and Reconcile tune the active JobMaster and the reconciliation.
	JobMaster jobmaster.Config
	Reconcile reconcile.Config
	// CheckpointDir is the checkpoint storage root (--checkpoint-dir), shared with every
	// TaskManager that may restore a task's state; opened as JobMaster.Checkpoints unless that
	// is set. Empty: no checkpoint storage (checkpointed jobs are refused).
	CheckpointDir string
	// WriteLimit bounds each client's SubmitJob and CancelJob rate on this replica.
	WriteLimit jmserver.WriteLimit
	// MaxMessageSize bounds every gRPC message the replica receives or sends: its server and
	// its connections to other JMs and to TMs (default transport.DefaultMaxMessageSize).
	MaxMessageSize int
	// TLS turns on mutual TLS on every connection of the replica: its gRPC server (any role may
	// connect; the policy table checks each method), the Raft transport (jobmaster
	// certificates only), its connections to other JMs and to TMs. nil: plaintext.
	TLS *security.TLS
	// Tokens: bearer tokens (operator and reader) the gRPC server and HTTP accept besides
	// certificates; needs TLS. nil: none.
	Tokens *security.Tokens
	// MetricsAuth: /metrics needs a token or certificate too (HTTP with TLS or tokens).
	MetricsAuth bool
	// CleanupDeadServers > 0: the leader removes a voter gossip has reported dead or left for
	// this long, keeping at least MinQuorum voters (autopilot.go). 0: off.
	CleanupDeadServers time.Duration
	MinQuorum          int
	Logger             hclog.Logger
}

// TaskManagerConfig configures one TM process.
type TaskManagerConfig struct {
	TM taskmanager.Config
	// Gossip configures memberlist; nil turns gossip off (then TM.JobMasters must be set).
	Gossip *membership.Config
	// HTTPAddr serves /metrics (Prometheus) and /healthz; empty turns HTTP off.
	HTTPAddr string
	Logger   hclog.Logger
}

// ErrInvalidConfig is the kind of the refusals of the assembly's own fields.
var ErrInvalidConfig = errors.New("invalid agent config")

// Validate refuses a configuration the replica cannot start with, before anything is bound: the
// rules of each package's Config, the refusal's field within its section ("JobMaster.FenceTimeout",
// "Cluster.ID", "Gossip.BindAddr"), then the assembly's own fields (a *setting.Error each;
// jmnode names the flag instead). Zero means the default, as in every package.
func (c JobMasterConfig) Validate() error {
	cl := c.Cluster
	if cl.GRPCAddr == "" {
		// StartJobMaster advertises the address it binds (GRPCAddr may pick a port): checked
		// as the listen address below, a stand-in here.
		cl.GRPCAddr = "127.0.0.1:1"
	}
	var gossip error
	if c.Gossip != nil {
		g := *c.Gossip
		g.Meta = membership.Meta{Role: membership.RoleJobMaster, ID: c.Cluster.ID} // StartJobMaster sets the rest
		gossip = setting.Within(g.Validate(), "Gossip")
	}
	return first(
		setting.HostPort(ErrInvalidConfig, "GRPCAddr", c.GRPCAddr, 0),
		setting.Within(cl.Validate(), "Cluster"),
		optionalAddr("HTTPAddr", c.HTTPAddr),
		setting.Within(c.JobMaster.Validate(), "JobMaster"),
		setting.Within(c.Reconcile.Validate(), "Reconcile"),
		gossip,
		nonNegative("MaxMessageSize", c.MaxMessageSize),
		cleanup(c.CleanupDeadServers, c.Gossip != nil),
		nonNegative("MinQuorum", c.MinQuorum),
		tokens(c.Tokens != nil, c.TLS != nil),
	)
}

// Validate refuses a configuration the TaskManager cannot start with, as JobMasterConfig's
// does: the TaskManager's rules (fields within "TM"), gossip's ("Gossip"), the HTTP address.
func (c TaskManagerConfig) Validate() error {
	tm := c.TM // Validate fills in defaults: the copy keeps c as given
	var gossip error
	if c.Gossip != nil {
		g := *c.Gossip
		g.Meta = membership.Meta{Role: membership.RoleTaskManager, ID: c.TM.ID} // StartTaskManager sets the rest
		gossip = setting.Within(g.Validate(), "Gossip")
	}
	return first(
		setting.Within(tm.Validate(), "TM"),
		gossip,
		optionalAddr("HTTPAddr", c.HTTPAddr),
	)
}

// cleanup: CleanupDeadServers is 0 (off) or positive, and then gossip must be on.
func cleanup(d time.Duration, gossip bool) error {
	switch {
	case d < 0:
		return setting.New(ErrInvalidConfig, "CleanupDeadServers", d, "must be 0 (off) or above 0")
	case d > 0 && !gossip:
		return setting.New(ErrInvalidConfig, "CleanupDeadServers", d, "needs gossip (--gossip-addr): dead servers are found through it")
	}
	return nil
}

// tokens: bearer tokens need TLS.
func tokens(set, tls bool) error {
	if set && !tls {
		return errors.New("bearer tokens need TLS (--tls-ca, --tls-cert, --tls-key): they would travel in plaintext")
	}
	return nil
}

func nonNegative(field string, v int) error {
	if v < 0 {
		return setting.New(ErrInvalidConfig, field, v, "must not be negative")
	}
	return nil
}

// optionalAddr checks a listen address that may be empty (off).
func optionalAddr(field, addr string) error {
	if addr == "" {
		return nil
	}
	return setting.HostPort(ErrInvalidConfig, field, addr, 0)
}

// first returns the first non-nil error.
func first(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
