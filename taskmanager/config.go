// Package taskmanager is the TaskManager (TM): it offers slots, runs tasks with real operators,
// exchanges records with other TMs over gRPC streams, and reports to the JobMaster leader
// through an ordered, retrying outbox. See DESIGN.md.
package taskmanager

import (
	"cmp"
	"context"
	"errors"
	"io"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"github.com/jmcluster/jmcluster/internal/setting"
	"github.com/jmcluster/jmcluster/security"

	"github.com/jmcluster/jmcluster/transport"
)

// Config configures a TaskManager. Zero values mean the defaults of DefaultConfig.
type Config struct {
	// ID names the TM in the cluster; required.
	ID string
	// Slots is the number of task slots (default 4).
	Slots int
	// GRPCAddr is the listen address of the TaskManagerService (e.g. 127.0.0.1:0).
	GRPCAddr string
	// DataAddr is the listen address of the DataService (a separate listener).
	DataAddr string
	// AdvertiseGRPC and AdvertiseData are the addresses others use; default: the bound ones.
	AdvertiseGRPC, AdvertiseData string
	// JobMasters are JM gRPC addresses asked (ClientService.ClusterStatus) for the leader when
	// LeaderResolver finds none, and by the self-fence's check for a live leader.
	JobMasters []string
	// LeaderResolver returns the leader's gRPC address (e.g. from gossip); optional.
	LeaderResolver func(ctx context.Context) (string, error)
	// DiscoverJobMasters returns JM gRPC addresses known by other means than JobMasters (the
	// JobMasters gossip knows); optional. They are asked after JobMasters, both to find the
	// leader and by the self-fence's check for a live leader, so the self-fence works with
	// gossip alone.
	DiscoverJobMasters func() []string
	// RegisterServices registers more services on the TaskManagerService server (the agent's
	// GossipService); optional. Each needs a row in the policy table.
	RegisterServices func(grpc.ServiceRegistrar)
	// ObserveCall is told of every call the TM's servers serve (metrics); optional.
	ObserveCall transport.CallObserver
	// ObserveAlignment is told how long each barrier alignment of a task with inputs took, from
	// the first barrier of a checkpoint on any of its channels to the last (metrics); optional.
	ObserveAlignment func(time.Duration)
	// Incarnation identifies this TM process: a random id chosen by New when empty. It travels
	// in registration, heartbeats, reports and gossip, so the leader tells a restarted TM (same
	// id and addresses, a new incarnation) from the process that died.
	Incarnation string
	// ProtocolVersion is the JobMaster-TaskManager protocol this TM says it speaks in its
	// registration: ProtocolVersion (the constant) when 0. Tests set others to see a leader
	// refuse them.
	ProtocolVersion uint32
	// ExchangeWithoutGroups serves Exchange as a build before channel groups did: no hello, and
	// a ChannelControl's open_group ignored. Tests set it to stand for an older producer.
	ExchangeWithoutGroups bool
	// Int64Records consumes records as a build before bytes records did (tests of mixed
	// clusters): its channels ask for the int64 record format.
	Int64Records bool
	// HeartbeatInterval (default 1s); the leader's RegisterTaskManagerResponse may override it.
	HeartbeatInterval time.Duration
	// LeaderGrace: tasks keep running while no leader is reachable for this long, then all are
	// cancelled (default 5m).
	LeaderGrace time.Duration
	// FenceTimeout: when no leader has been reached for this long and a JobMaster names an
	// established leader (one that is alive, but that this TM cannot reach), the TM is cut off
	// from a live leader, which will fail its tasks over; it cancels them itself so that two
	// attempts of one subtask never run at once. It must be shorter than the leader's heartbeat
	// timeout (default 5s; 0 turns it off). Without such evidence (a leader gap) tasks keep
	// running for LeaderGrace. It must also be well above a Raft election: the followers keep
	// naming a vanished leader until they notice it is gone (about two election timeouts).
	FenceTimeout time.Duration
	// RetainTerminal: terminal task states are kept for reports this long unless acknowledged
	// (default 10m). Finished BLOCKING partitions are kept as long.
	RetainTerminal time.Duration
	// OutboxBackoffMin and OutboxBackoffMax bound the outbox's jittered exponential backoff
	// (defaults 50ms and 2s).
	OutboxBackoffMin, OutboxBackoffMax time.Duration
	// ReportChunkSize is the executions per report chunk when the leader asks for 0 (default 1000).
	ReportChunkSize int
	// ReportChunkBytes bounds the encoded bytes of one report chunk (default
	// transport.ChunkBudget(0): the message limit minus a 256 KiB margin). A leader that asks
	// for less (RequestReportRequest.max_chunk_bytes) gets less.
	ReportChunkBytes int
	// MaxMessageSize bounds every gRPC message the TM receives or sends, on both servers and
	// every client connection (default transport.DefaultMaxMessageSize, 4 MiB;
	// --max-message-size).
	MaxMessageSize int
	// MaxRecordSize bounds a record's key and value bytes (0: DefaultMaxRecordSize, 1 MiB,
	// or a quarter of MaxMessageSize when that is less; --max-record-size): a task that emits a larger one fails with an error naming the
	// limit and the record's size. At most a quarter of MaxMessageSize (the default is that
	// when a quarter is less than 1 MiB), so that a record always fits in a message to
	// another TaskManager.
	MaxRecordSize int
	// TLS: mutual TLS on both servers and every connection; nil for plaintext. The gRPC server
	// admits the jobmaster and taskmanager roles (the policy table checks each method), the
	// data server the taskmanager role only; connections to JobMasters want a jobmaster
	// certificate, connections to TaskManagers a taskmanager one.
	TLS *security.TLS
	// RPCTimeout bounds each TM -> JM call (default 5s).
	RPCTimeout time.Duration
	// InputConnectTimeout bounds how long an input channel waits for its producer's partition to
	// appear before the task fails (default 2m).
	InputConnectTimeout time.Duration
	// CancelWait bounds how long CancelTask waits for the task to stop (default 3s).
	CancelWait time.Duration
	// ShutdownTimeout bounds Stop's wait for tasks and the outbox to drain (default 5s).
	ShutdownTimeout time.Duration
	// WorkDir is where relative sink paths are written (default: the process's directory).
	WorkDir string
	// CheckpointDir is the checkpoint storage root (checkpoint.Store; --checkpoint-dir): every
	// TaskManager that may restore a task's state and the JobMasters, which delete discarded
	// checkpoints, must reach the same directory (a shared volume across machines). Empty:
	// this TaskManager refuses tasks of checkpointed jobs.
	CheckpointDir string
	// SecretsDir holds the credentials connectors name, a file per credential (--secrets-dir;
	// docs/connectors.md#credentials). Empty: a task whose connector names one fails.
	SecretsDir string
	// ArtifactCacheDir keeps the artifacts this TM fetched, a file per sha256, so a restarted
	// TM does not fetch them again (default: .artifacts under WorkDir; --artifact-cache-dir).
	ArtifactCacheDir string
	// ArtifactCacheBytes bounds the artifacts kept in memory, the most recently used (default
	// DefaultArtifactCacheBytes, 64 MiB; --artifact-cache-bytes).
	ArtifactCacheBytes int64
	// EventLog receives JSON lines of task lifecycle events; optional.
	EventLog io.Writer
	// Logger; default a null logger.
	Logger hclog.Logger
}

// ErrInvalidConfig is returned by Validate.
var ErrInvalidConfig = errors.New("invalid taskmanager config")

// ProtocolVersion is the JobMaster-TaskManager protocol this build speaks: 4, records of bytes
// with event time and watermarks (3 was shared channel lists in SubmitTasks, 2 the Exchange
// data plane; jobmaster.MinTMProtocol and MaxTMProtocol are what a leader accepts).
const ProtocolVersion = 4

// DefaultMaxRecordSize is the largest record (key and value bytes) a task emits by default,
// and at most a quarter of MaxMessageSize (maxRecordShare).
const DefaultMaxRecordSize = 1 << 20

// maxRecordShare: MaxRecordSize is at most MaxMessageSize / maxRecordShare, so that a message
// to another TaskManager holds a record besides the other channels' batches it carries.
const maxRecordShare = 4

// DefaultConfig returns a Config with every default filled in (ID and addresses excepted).
func DefaultConfig() Config {
	return Config{
		Slots:               4,
		GRPCAddr:            "127.0.0.1:0",
		DataAddr:            "127.0.0.1:0",
		HeartbeatInterval:   time.Second,
		LeaderGrace:         5 * time.Minute,
		FenceTimeout:        5 * time.Second,
		RetainTerminal:      10 * time.Minute,
		OutboxBackoffMin:    50 * time.Millisecond,
		OutboxBackoffMax:    2 * time.Second,
		ReportChunkSize:     1000,
		ReportChunkBytes:    transport.ChunkBudget(0),
		MaxMessageSize:      transport.DefaultMaxMessageSize,
		RPCTimeout:          5 * time.Second,
		InputConnectTimeout: 2 * time.Minute,
		CancelWait:          3 * time.Second,
		ShutdownTimeout:     5 * time.Second,
	}
}

// Validate fills zero fields with defaults and checks the rest. A refusal is a
// *setting.Error naming the field, the value and the rule (jmnode names the flag instead).
// The rules: no negative count, size or duration; Slots within [transport.MinSlots,
// transport.MaxSlots], what the leader accepts at registration; FenceTimeout 0 (off) or above
// two heartbeat intervals and LeaderGrace above two heartbeat intervals, since a TM that
// heartbeats has gone that long without leader contact between two heartbeats; addresses
// host:port.
func (c *Config) Validate() error {
	d := DefaultConfig()
	if c.ID == "" {
		return setting.New(ErrInvalidConfig, "ID", c.ID, "is required")
	}
	setInt := func(v *int, def int, name string) error {
		if *v < 0 {
			return setting.New(ErrInvalidConfig, name, *v, "must not be negative")
		}
		if *v == 0 {
			*v = def
		}
		return nil
	}
	setDur := func(v *time.Duration, def time.Duration, name string) error {
		if *v < 0 {
			return setting.New(ErrInvalidConfig, name, *v, "must not be negative")
		}
		if *v == 0 {
			*v = def
		}
		return nil
	}
	for _, f := range []error{
		setInt(&c.Slots, d.Slots, "Slots"),
		setInt(&c.ReportChunkSize, d.ReportChunkSize, "ReportChunkSize"),
		setInt(&c.ReportChunkBytes, d.ReportChunkBytes, "ReportChunkBytes"),
		setInt(&c.MaxMessageSize, d.MaxMessageSize, "MaxMessageSize"),
		setDur(&c.HeartbeatInterval, d.HeartbeatInterval, "HeartbeatInterval"),
		setDur(&c.LeaderGrace, d.LeaderGrace, "LeaderGrace"),
		setting.NonNegative(ErrInvalidConfig, "FenceTimeout", c.FenceTimeout),
		setDur(&c.RetainTerminal, d.RetainTerminal, "RetainTerminal"),
		setDur(&c.OutboxBackoffMin, d.OutboxBackoffMin, "OutboxBackoffMin"),
		setDur(&c.OutboxBackoffMax, d.OutboxBackoffMax, "OutboxBackoffMax"),
		setDur(&c.RPCTimeout, d.RPCTimeout, "RPCTimeout"),
		setDur(&c.InputConnectTimeout, d.InputConnectTimeout, "InputConnectTimeout"),
		setDur(&c.CancelWait, d.CancelWait, "CancelWait"),
		setDur(&c.ShutdownTimeout, d.ShutdownTimeout, "ShutdownTimeout"),
	} {
		if f != nil {
			return f
		}
	}
	if c.ArtifactCacheBytes < 0 {
		return setting.New(ErrInvalidConfig, "ArtifactCacheBytes", c.ArtifactCacheBytes, "must not be negative (0 means %d, DefaultArtifactCacheBytes)", DefaultArtifactCacheBytes)
	}
	if c.ArtifactCacheBytes == 0 {
		c.ArtifactCacheBytes = DefaultArtifactCacheBytes
	}
	if c.ArtifactCacheDir == "" {
		c.ArtifactCacheDir = filepath.Join(cmp.Or(c.WorkDir, "."), ".artifacts")
	}
	if c.Slots < transport.MinSlots || c.Slots > transport.MaxSlots {
		return setting.New(ErrInvalidConfig, "Slots", c.Slots, "must be in [%d, %d] (the leader refuses the registration of a TaskManager outside it)", transport.MinSlots, transport.MaxSlots)
	}
	if gap := 2 * c.HeartbeatInterval; c.FenceTimeout != 0 && c.FenceTimeout <= gap {
		return setting.New(ErrInvalidConfig, "FenceTimeout", c.FenceTimeout, "must be 0 (off) or above two heartbeat intervals (%v): a TaskManager in contact goes that long without leader contact between two heartbeats", gap)
	}
	if gap := 2 * c.HeartbeatInterval; c.LeaderGrace <= gap {
		return setting.New(ErrInvalidConfig, "LeaderGrace", c.LeaderGrace, "must be above two heartbeat intervals (%v): a TaskManager in contact goes that long without leader contact between two heartbeats", gap)
	}
	limit := c.MaxMessageSize / maxRecordShare
	if c.MaxRecordSize < 0 {
		return setting.New(ErrInvalidConfig, "MaxRecordSize", c.MaxRecordSize, "must not be negative")
	}
	if c.MaxRecordSize == 0 {
		c.MaxRecordSize = min(DefaultMaxRecordSize, limit)
	}
	if c.MaxRecordSize > limit {
		return setting.New(ErrInvalidConfig, "MaxRecordSize", c.MaxRecordSize, "must be at most a quarter of MaxMessageSize %d (%d): a record must fit in a message to another TaskManager", c.MaxMessageSize, limit)
	}
	if c.OutboxBackoffMax < c.OutboxBackoffMin {
		return setting.New(ErrInvalidConfig, "OutboxBackoffMax", c.OutboxBackoffMax, "must not be below OutboxBackoffMin %v", c.OutboxBackoffMin)
	}
	if c.GRPCAddr == "" {
		c.GRPCAddr = d.GRPCAddr
	}
	if c.DataAddr == "" {
		c.DataAddr = d.DataAddr
	}
	for _, a := range []struct {
		field, addr string
		minPort     int
	}{{"GRPCAddr", c.GRPCAddr, 0}, {"DataAddr", c.DataAddr, 0}, {"AdvertiseGRPC", c.AdvertiseGRPC, 1}, {"AdvertiseData", c.AdvertiseData, 1}} {
		if a.addr == "" {
			continue
		}
		if err := setting.HostPort(ErrInvalidConfig, a.field, a.addr, a.minPort); err != nil {
			return err
		}
	}
	for _, jm := range c.JobMasters {
		if err := setting.HostPort(ErrInvalidConfig, "JobMasters", jm, 1); err != nil {
			return err
		}
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return nil
}
