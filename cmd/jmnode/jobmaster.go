package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/jmcluster/jmcluster/agent"
	"github.com/jmcluster/jmcluster/cluster"
	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/internal/setting"
	"github.com/jmcluster/jmcluster/jmserver"
	"github.com/jmcluster/jmcluster/jobmaster"
	"github.com/jmcluster/jmcluster/security"
	"github.com/jmcluster/jmcluster/transport"
)

// jobMasterConfig is what `jmnode jobmaster` runs with: the agent's configuration, whose
// fields most flags set directly, and the flags that build the rest (build).
type jobMasterConfig struct {
	agent agent.JobMasterConfig
	proc  processFlags
	// The Raft node's flags: cluster.Config is built from them (its timings depend on --fast-raft).
	id, dataDir, raftAddr, raftAdvertise, grpcAdvertise, join, peers string
	expect                                                           int
	fast                                                             bool
	tokenFile                                                        string
	// Raft's snapshot cadence (hashicorp/raft's defaults: 8192 entries, checked every 120 s).
	snapThreshold int64
	snapInterval  time.Duration
	// grpcFlag names the flag the advertised gRPC address comes from (build).
	grpcFlag string
}

// newJobMasterConfig registers the flags of `jmnode jobmaster` on fs, each into the field it sets.
func newJobMasterConfig(fs *flag.FlagSet) *jobMasterConfig {
	c := &jobMasterConfig{}
	a, jm := &c.agent, &c.agent.JobMaster
	fs.StringVar(&c.id, "id", "", "node id, unique in the cluster (required)")
	fs.StringVar(&c.dataDir, "data-dir", "", "directory for the Raft log, stable store and snapshots (required)")
	fs.StringVar(&c.raftAddr, "raft-addr", "127.0.0.1:7000", "Raft bind address")
	fs.StringVar(&c.raftAdvertise, "raft-advertise", "", "Raft address other nodes dial (default: --raft-addr)")
	fs.StringVar(&a.GRPCAddr, "grpc-addr", "127.0.0.1:7100", "gRPC listen address (clients, operators, TaskManagers)")
	fs.StringVar(&c.grpcAdvertise, "grpc-advertise", "", "gRPC address other nodes dial (default: --grpc-addr)")
	fs.StringVar(&a.HTTPAddr, "http-addr", "127.0.0.1:7200", "HTTP address for /metrics, /healthz, /readyz, /api/v1 and the web UI (empty: off)")
	fs.IntVar(&a.MaxMessageSize, "max-message-size", transport.DefaultMaxMessageSize, "bound in bytes on every gRPC message this JobMaster receives or sends (its server, its connections to JobMasters and TaskManagers)")
	fs.Float64Var(&a.WriteLimit.Rate, "client-write-rate", jmserver.DefaultWriteRate, "SubmitJob and CancelJob calls per second each client (by IP address) may make on this JobMaster; negative: no limit")
	fs.IntVar(&a.WriteLimit.Burst, "client-write-burst", jmserver.DefaultWriteBurst, "SubmitJob and CancelJob calls a client may make at once on this JobMaster")
	fs.IntVar(&c.expect, "bootstrap-expect", 0, "bootstrap once this many JMs (including this one) are seen through --join")
	fs.StringVar(&c.join, "join", "", "comma-separated gRPC addresses of other JMs (bootstrap discovery or joining a running cluster)")
	fs.StringVar(&c.peers, "peers", "", "explicit initial cluster, id=raftaddr@grpcaddr,... (alternative to --bootstrap-expect)")
	fs.DurationVar(&a.Reconcile.ReportDeadline, "report-deadline", 10*time.Second, "how long a new leader waits for TaskManager reports")
	fs.DurationVar(&jm.HeartbeatTimeout, "heartbeat-timeout", 10*time.Second, "a TaskManager silent for this long is declared lost; also the least delay before a silent TaskManager's tasks are redeployed (it must exceed what --fence-timeout and the pool query timings need)")
	fs.DurationVar(&jm.FenceTimeout, "fence-timeout", 0, "a TaskManager without leader contact this long asks its pool whether the JobMasters are down and stops its tasks unless a majority says so (0: 5s, or less if --heartbeat-timeout needs it)")
	fs.DurationVar(&jm.PoolQueryInterval, "pool-query-interval", 0, "how often a TaskManager past its fence timeout asks its pool (0: 500ms, or --heartbeat-timeout/20 if shorter)")
	fs.DurationVar(&jm.PoolQueryTimeout, "pool-query-timeout", 0, "how long one pool question may take (0: 1s, or --heartbeat-timeout/10 if shorter)")
	fs.DurationVar(&jm.HeartbeatInterval, "tm-heartbeat-interval", time.Second, "the interval TaskManagers are told to heartbeat at")
	fs.DurationVar(&jm.TMLeaderGrace, "tm-leader-grace", 5*time.Minute, "how long TaskManagers keep their tasks through a JobMaster outage (their pool confirming it)")
	fs.IntVar(&jm.DeadRefusals, "dead-refusals", jobmaster.DefaultDeadRefusals, "a TaskManager whose gRPC port refuses this many of the leader's probe connections in a row (spanning --dead-refusal-window) is proven dead and lost at once (at least 1)")
	fs.DurationVar(&jm.DeadRefusalWindow, "dead-refusal-window", jobmaster.DefaultDeadRefusalWindow, "the least time the refused probe connections that prove a TaskManager dead must span (above 0)")
	def, ceiling := graph.DefaultSizeLimits(), graph.CeilingSizeLimits()
	fs.Int64Var(&jm.SizeLimits.MaxExecutions, graph.LimitExecutions, def.MaxExecutions,
		fmt.Sprintf("refuse a job of more executions (sum of the parallelisms); at most %d", ceiling.MaxExecutions))
	fs.Int64Var(&jm.SizeLimits.MaxInputChannels, graph.LimitInputChannels, def.MaxInputChannels,
		fmt.Sprintf("refuse a job of more input channels (FORWARD: one per consumer subtask, ALL_TO_ALL: producer x consumer parallelism); at most %d", ceiling.MaxInputChannels))
	fs.Int64Var(&jm.SizeLimits.MaxGraphBytes, graph.LimitGraphBytes, def.MaxGraphBytes,
		fmt.Sprintf("refuse a job whose execution graph, deployed, is estimated larger (bytes); at most %d", ceiling.MaxGraphBytes))
	fs.IntVar(&jm.RetainJobs, "retain-jobs", jobmaster.DefaultRetainJobs, "terminal jobs (FINISHED, CANCELED, FAILED) kept; the oldest beyond it are removed (at least 1)")
	fs.StringVar(&a.CheckpointDir, "checkpoint-dir", "", "checkpoint storage root: the shared directory every JobMaster and every TaskManager that may restore a task's state must reach (one host: a local directory; across hosts: a shared file system; docs/checkpoints.md). Empty: checkpointed jobs are refused")
	fs.DurationVar(&jm.RetainJobAge, "retain-job-age", jobmaster.DefaultRetainJobAge, "a terminal job is removed this long after it ended; an artifact no job names, this long after it was stored")
	fs.Int64Var(&jm.ArtifactMaxBytes, "artifact-max-bytes", fsm.DefaultArtifactMaxBytes, fmt.Sprintf("refuse an artifact upload of more bytes; at most %d (fsm.ArtifactCeilingBytes)", fsm.ArtifactCeilingBytes))
	fs.Int64Var(&jm.ArtifactMaxTotalBytes, "artifact-max-total-bytes", fsm.DefaultArtifactMaxTotalBytes, fmt.Sprintf("refuse an artifact upload that would take the stored artifacts and uploads in progress over this many bytes; at most %d (fsm.ArtifactCeilingTotalBytes)", fsm.ArtifactCeilingTotalBytes))
	fs.IntVar(&jm.ArtifactMaxCount, "artifact-max-count", fsm.DefaultArtifactMaxCount, fmt.Sprintf("refuse an artifact upload beyond this many stored artifacts and uploads in progress; at most %d (fsm.ArtifactCeilingCount)", fsm.ArtifactCeilingCount))
	fs.Int64Var(&c.snapThreshold, "raft-snapshot-threshold", 8192, "Raft takes a snapshot once this many log entries were written since the last one")
	fs.DurationVar(&c.snapInterval, "raft-snapshot-interval", 120*time.Second, "how often Raft checks whether a snapshot is due")
	fs.BoolVar(&c.fast, "fast-raft", false, "use fast Raft timings (loopback clusters, demos and tests)")
	c.proc.register(fs, "this JobMaster's jobmaster", "<data-dir>/gossip.keyring")
	fs.StringVar(&c.tokenFile, "token-file", "", "file of bearer tokens the gRPC server and HTTP accept besides certificates, a line each: NAME ROLE SECRET (role operator or reader); needs --tls-*; read again when it changes")
	fs.DurationVar(&jm.SlotTimeout, "slot-timeout", jobmaster.DefaultSlotTimeout, "a job whose deployment has waited this long for free slots fails (FAILED, not restarted) with a cause naming the slots needed and free; negative: wait forever")
	fs.DurationVar(&a.CleanupDeadServers, "cleanup-dead-servers", 0, "the leader removes a JobMaster gossip has reported dead or left for this long from the Raft configuration, one at a time (0: off, the default: removing a voter is an operator's decision)")
	fs.IntVar(&a.MinQuorum, "min-quorum", 3, "dead-server cleanup never leaves fewer voters than this")
	fs.BoolVar(&a.MetricsAuth, "http-metrics-auth", false, "with TLS or --token-file, /metrics too needs a token or client certificate (/healthz and /readyz stay open)")
	return c
}

// build completes the agent's configuration from the parsed flags: the Raft node's (the
// advertised gRPC address is --grpc-advertise, or the bound --grpc-addr), the gossip
// membership's (its key comes with TLS, at start), the message size every part shares.
func (c *jobMasterConfig) build() error {
	ccfg := cluster.DefaultConfig()
	if c.fast {
		ccfg = cluster.TestConfig()
	}
	c.grpcFlag = "--grpc-advertise"
	if c.grpcAdvertise == "" {
		c.grpcAdvertise, c.grpcFlag = c.agent.GRPCAddr, "--grpc-addr"
	}
	ccfg.ID, ccfg.DataDir, ccfg.RaftBindAddr, ccfg.RaftAdvertiseAddr = c.id, c.dataDir, c.raftAddr, c.raftAdvertise
	ccfg.GRPCAddr, ccfg.BootstrapExpect, ccfg.Join = c.grpcAdvertise, c.expect, splitList(c.join)
	ccfg.SnapshotThreshold, ccfg.SnapshotInterval = uint64(max(c.snapThreshold, 1)), c.snapInterval
	for _, p := range splitList(c.peers) {
		peer, err := parsePeer(p)
		if err != nil {
			return err
		}
		ccfg.Peers = append(ccfg.Peers, peer)
	}
	c.agent.Cluster = ccfg
	c.agent.JobMaster.MaxMessageSize = c.agent.MaxMessageSize
	c.agent.Gossip = c.proc.gossip.config(c.dataDir)
	return nil
}

// check refuses, before anything is started or served, every flag the replica cannot run
// with, naming the flag: the flag's own rules (jobMasterFlagRules), the packages' and the
// assembly's (agent.JobMasterConfig.Validate, fields named as the flags), the shared flags,
// then the paths.
func (c *jobMasterConfig) check() error {
	names := map[string]string{"Cluster.GRPCAddr": c.grpcFlag}
	for k, v := range jobMasterFlagNames {
		names[k] = v
	}
	if err := firstError(
		firstError(c.flagRules()...),
		setting.Named(c.agent.Validate(), names),
		c.proc.check(c.dataDir),
	); err != nil {
		return err
	}
	if err := firstError(writableDir("--data-dir", c.dataDir), writableDir("--checkpoint-dir", c.agent.CheckpointDir)); err != nil {
		return err
	}
	if c.tokenFile != "" && !c.proc.tls.files().Set() {
		return errors.New("--token-file needs --tls-ca, --tls-cert and --tls-key: tokens would travel in plaintext")
	}
	return nil
}

func runJobMaster(args []string) error {
	fs := flag.NewFlagSet("jobmaster", flag.ContinueOnError)
	usageFor(fs, "jmnode jobmaster --id ID --data-dir DIR [flags]",
		"Runs a JobMaster replica: a Raft voter with the replicated execution graphs. The Raft leader is\n"+
			"the active JobMaster; it reconciles with the TaskManagers before it accepts normal RPCs.")
	c := newJobMasterConfig(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if c.id == "" || c.dataDir == "" {
		fs.Usage()
		return errors.New("--id and --data-dir are required")
	}
	if err := c.build(); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	log, sec, err := c.proc.preamble(c.id, security.RoleJobMaster, "gRPC and Raft")
	if err != nil {
		return err
	}
	cfg := c.agent
	cfg.Logger, cfg.TLS = log, sec
	if c.tokenFile != "" {
		if cfg.Tokens, err = security.LoadTokens(c.tokenFile, log); err != nil {
			return fmt.Errorf("--token-file %s: %w", c.tokenFile, err)
		}
	}
	if err := c.proc.gossip.secure(cfg.Gossip, sec != nil); err != nil {
		return err
	}
	a, err := agent.StartJobMaster(cfg)
	if err != nil {
		return err
	}
	untilSignal(log)
	return a.Shutdown()
}

func parsePeer(s string) (cluster.Peer, error) {
	id, rest, ok := strings.Cut(s, "=")
	raftAddr, grpcAddr, _ := strings.Cut(rest, "@")
	if !ok || id == "" || raftAddr == "" {
		return cluster.Peer{}, fmt.Errorf("--peers: %q is not id=raftaddr@grpcaddr", s)
	}
	return cluster.Peer{ID: id, RaftAddr: raftAddr, GRPCAddr: grpcAddr}, nil
}
