package main

import (
	"github.com/jmcluster/jmcluster/security"

	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jmcluster/jmcluster/agent"
	"github.com/jmcluster/jmcluster/cluster"
	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/internal/setting"
	"github.com/jmcluster/jmcluster/jmserver"
	"github.com/jmcluster/jmcluster/jobmaster"
	"github.com/jmcluster/jmcluster/reconcile"
	"github.com/jmcluster/jmcluster/transport"
)

func runJobMaster(args []string) error {
	fs := flag.NewFlagSet("jobmaster", flag.ContinueOnError)
	usageFor(fs, "jmnode jobmaster --id ID --data-dir DIR [flags]",
		"Runs a JobMaster replica: a Raft voter with the replicated execution graphs. The Raft leader is\n"+
			"the active JobMaster; it reconciles with the TaskManagers before it accepts normal RPCs.")
	id := fs.String("id", "", "node id, unique in the cluster (required)")
	dataDir := fs.String("data-dir", "", "directory for the Raft log, stable store and snapshots (required)")
	raftAddr := fs.String("raft-addr", "127.0.0.1:7000", "Raft bind address")
	raftAdv := fs.String("raft-advertise", "", "Raft address other nodes dial (default: --raft-addr)")
	grpcAddr := fs.String("grpc-addr", "127.0.0.1:7100", "gRPC listen address (clients, operators, TaskManagers)")
	grpcAdv := fs.String("grpc-advertise", "", "gRPC address other nodes dial (default: --grpc-addr)")
	httpAddr := fs.String("http-addr", "127.0.0.1:7200", "HTTP address for /metrics, /healthz, /readyz, /api/v1 and the web UI (empty: off)")
	maxMsg := fs.Int("max-message-size", transport.DefaultMaxMessageSize, "bound in bytes on every gRPC message this JobMaster receives or sends (its server, its connections to JobMasters and TaskManagers)")
	writeRate := fs.Float64("client-write-rate", jmserver.DefaultWriteRate, "SubmitJob and CancelJob calls per second each client (by IP address) may make on this JobMaster; negative: no limit")
	writeBurst := fs.Int("client-write-burst", jmserver.DefaultWriteBurst, "SubmitJob and CancelJob calls a client may make at once on this JobMaster")
	gf := newGossipFlags(fs, "<data-dir>/gossip.keyring")
	expect := fs.Int("bootstrap-expect", 0, "bootstrap once this many JMs (including this one) are seen through --join")
	join := fs.String("join", "", "comma-separated gRPC addresses of other JMs (bootstrap discovery or joining a running cluster)")
	peers := fs.String("peers", "", "explicit initial cluster, id=raftaddr@grpcaddr,... (alternative to --bootstrap-expect)")
	reportDeadline := fs.Duration("report-deadline", 10*time.Second, "how long a new leader waits for TaskManager reports")
	hbTimeout := fs.Duration("heartbeat-timeout", 10*time.Second, "a TaskManager silent for this long is declared lost; also the least delay before a silent TaskManager's tasks are redeployed (it must exceed what --fence-timeout and the pool query timings need)")
	fenceTimeout := fs.Duration("fence-timeout", 0, "a TaskManager without leader contact this long asks its pool whether the JobMasters are down and stops its tasks unless a majority says so (0: 5s, or less if --heartbeat-timeout needs it)")
	poolInterval := fs.Duration("pool-query-interval", 0, "how often a TaskManager past its fence timeout asks its pool (0: 500ms, or --heartbeat-timeout/20 if shorter)")
	poolTimeout := fs.Duration("pool-query-timeout", 0, "how long one pool question may take (0: 1s, or --heartbeat-timeout/10 if shorter)")
	tmHeartbeat := fs.Duration("tm-heartbeat-interval", time.Second, "the interval TaskManagers are told to heartbeat at")
	tmGrace := fs.Duration("tm-leader-grace", 5*time.Minute, "how long TaskManagers keep their tasks through a JobMaster outage (their pool confirming it)")
	deadRefusals := fs.Int("dead-refusals", jobmaster.DefaultDeadRefusals, "a TaskManager whose gRPC port refuses this many of the leader's probe connections in a row (spanning --dead-refusal-window) is proven dead and lost at once (at least 1)")
	deadWindow := fs.Duration("dead-refusal-window", jobmaster.DefaultDeadRefusalWindow, "the least time the refused probe connections that prove a TaskManager dead must span (above 0)")
	defSize := graph.DefaultSizeLimits()
	ceiling := graph.CeilingSizeLimits()
	maxExecutions := fs.Int64(graph.LimitExecutions, defSize.MaxExecutions,
		fmt.Sprintf("refuse a job of more executions (sum of the parallelisms); at most %d", ceiling.MaxExecutions))
	maxChannels := fs.Int64(graph.LimitInputChannels, defSize.MaxInputChannels,
		fmt.Sprintf("refuse a job of more input channels (FORWARD: one per consumer subtask, ALL_TO_ALL: producer x consumer parallelism); at most %d", ceiling.MaxInputChannels))
	maxGraphBytes := fs.Int64(graph.LimitGraphBytes, defSize.MaxGraphBytes,
		fmt.Sprintf("refuse a job whose execution graph, deployed, is estimated larger (bytes); at most %d", ceiling.MaxGraphBytes))
	retainJobs := fs.Int("retain-jobs", jobmaster.DefaultRetainJobs, "terminal jobs (FINISHED, CANCELED, FAILED) kept; the oldest beyond it are removed (at least 1)")
	checkpointDir := fs.String("checkpoint-dir", "", "checkpoint storage root: the shared directory every JobMaster and every TaskManager that may restore a task's state must reach (one host: a local directory; across hosts: a shared file system; docs/checkpoints.md). Empty: checkpointed jobs are refused")
	retainAge := fs.Duration("retain-job-age", jobmaster.DefaultRetainJobAge, "a terminal job is removed this long after it ended")
	fast := fs.Bool("fast-raft", false, "use fast Raft timings (loopback clusters, demos and tests)")
	logLevel := fs.String("log-level", "info", "log level: trace, debug, info, warn, error")
	logFormat := fs.String("log-format", "text", "log format: text, or json (one JSON object per line, for log shippers)")
	pprofAddr := fs.String("pprof-addr", "", "serve net/http/pprof on this address (empty: off; for profiling only)")
	tf := newTLSFlags(fs, "this JobMaster's jobmaster")
	tokenFile := fs.String("token-file", "", "file of bearer tokens the gRPC server and HTTP accept besides certificates, a line each: NAME ROLE SECRET (role operator or reader); needs --tls-*; read again when it changes")
	slotTimeout := fs.Duration("slot-timeout", jobmaster.DefaultSlotTimeout, "a job whose deployment has waited this long for free slots fails (FAILED, not restarted) with a cause naming the slots needed and free; negative: wait forever")
	cleanupDead := fs.Duration("cleanup-dead-servers", 0, "the leader removes a JobMaster gossip has reported dead or left for this long from the Raft configuration, one at a time (0: off, the default: removing a voter is an operator's decision)")
	minQuorum := fs.Int("min-quorum", 3, "dead-server cleanup never leaves fewer voters than this")
	metricsAuth := fs.Bool("http-metrics-auth", false, "with TLS or --token-file, /metrics too needs a token or client certificate (/healthz and /readyz stay open)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *id == "" || *dataDir == "" {
		fs.Usage()
		return errors.New("--id and --data-dir are required")
	}
	sizeLimits := graph.SizeLimits{MaxExecutions: *maxExecutions, MaxInputChannels: *maxChannels, MaxGraphBytes: *maxGraphBytes}
	ccfg := cluster.DefaultConfig()
	if *fast {
		ccfg = cluster.TestConfig()
	}
	// The advertised gRPC address: --grpc-advertise, or the bound --grpc-addr.
	grpcFlag := "--grpc-advertise"
	if *grpcAdv == "" {
		*grpcAdv, grpcFlag = *grpcAddr, "--grpc-addr"
	}
	ccfg.ID, ccfg.DataDir, ccfg.RaftBindAddr, ccfg.RaftAdvertiseAddr = *id, *dataDir, *raftAddr, *raftAdv
	ccfg.GRPCAddr, ccfg.BootstrapExpect, ccfg.Join = *grpcAdv, *expect, splitList(*join)
	for _, p := range splitList(*peers) {
		peer, err := parsePeer(p)
		if err != nil {
			return err
		}
		ccfg.Peers = append(ccfg.Peers, peer)
	}
	cfg := agent.JobMasterConfig{
		CheckpointDir: *checkpointDir,
		Cluster:       ccfg, GRPCAddr: *grpcAddr, HTTPAddr: *httpAddr,
		JobMaster: jobmaster.Config{HeartbeatTimeout: *hbTimeout, DeadRefusals: *deadRefusals, DeadRefusalWindow: *deadWindow, SizeLimits: sizeLimits, RetainJobs: *retainJobs, RetainJobAge: *retainAge,
			FenceTimeout: *fenceTimeout, PoolQueryInterval: *poolInterval, PoolQueryTimeout: *poolTimeout, TMLeaderGrace: *tmGrace, HeartbeatInterval: *tmHeartbeat,
			SlotTimeout: *slotTimeout, MaxMessageSize: *maxMsg},
		Reconcile:      reconcile.Config{ReportDeadline: *reportDeadline},
		MaxMessageSize: *maxMsg,
	}
	ceil := graph.CeilingSizeLimits()
	clusterNames := map[string]string{"GRPCAddr": grpcFlag}
	for k, v := range jobMasterClusterFlags {
		clusterNames[k] = v
	}
	// Every check before anything is started or served: the flag's own rules, then the
	// packages' (their fields named as the flags), then the paths.
	if err := firstError(
		positive("--report-deadline", *reportDeadline),
		positive("--heartbeat-timeout", *hbTimeout),
		heartbeatInterval("--tm-heartbeat-interval", *tmHeartbeat),
		positive("--tm-leader-grace", *tmGrace),
		positive("--dead-refusal-window", *deadWindow),
		positive("--retain-job-age", *retainAge),
		atLeast("--dead-refusals", int64(*deadRefusals), 1),
		atLeast("--retain-jobs", int64(*retainJobs), 1),
		atLeast("--bootstrap-expect", int64(*expect), 0),
		between("--"+graph.LimitExecutions, *maxExecutions, 1, ceil.MaxExecutions),
		between("--"+graph.LimitInputChannels, *maxChannels, 1, ceil.MaxInputChannels),
		between("--"+graph.LimitGraphBytes, *maxGraphBytes, 1, ceil.MaxGraphBytes),
		messageSize(*maxMsg),
		clientWriteRate(*writeRate),
		atLeast("--client-write-burst", int64(*writeBurst), 1),
		atLeast("--min-quorum", int64(*minQuorum), 1),
		slotTimeoutFlag(*slotTimeout),
		cleanupFlag(*cleanupDead, *gf.addr != ""),
		optionalAddr("--http-addr", *httpAddr),
		optionalAddr("--pprof-addr", *pprofAddr),
		setting.Named(cfg.Cluster.Validate(), clusterNames),
		setting.HostPort(nil, "--grpc-addr", *grpcAddr, 1),
		setting.Named(cfg.JobMaster.Validate(), jobMasterFlags),
		setting.Named(cfg.Reconcile.Validate(), reconcileFlags),
		gf.check(*dataDir),
		logFlags(*logLevel, *logFormat),
	); err != nil {
		return err
	}
	if err := firstError(writableDir("--data-dir", *dataDir), writableDir("--checkpoint-dir", *checkpointDir)); err != nil {
		return err
	}
	if *tokenFile != "" && !tf.files().Set() {
		return errors.New("--token-file needs --tls-ca, --tls-cert and --tls-key: tokens would travel in plaintext")
	}
	log, err := newLogger(*id, *logLevel, *logFormat)
	if err != nil {
		return err
	}
	if err := setFailpoints(log); err != nil {
		return err
	}
	sec, err := tf.load(log, security.RoleJobMaster)
	if err != nil {
		return err
	}
	if sec == nil {
		warnPlaintext(log, "gRPC and Raft")
	}
	cfg.Logger = log
	cfg.CleanupDeadServers, cfg.MinQuorum = *cleanupDead, *minQuorum
	cfg.TLS, cfg.MetricsAuth = sec, *metricsAuth
	if *tokenFile != "" {
		if sec == nil {
			return errors.New("--token-file needs --tls-ca, --tls-cert and --tls-key: tokens would travel in plaintext")
		}
		if cfg.Tokens, err = security.LoadTokens(*tokenFile, log); err != nil {
			return fmt.Errorf("--token-file %s: %w", *tokenFile, err)
		}
	}
	cfg.WriteLimit = jmserver.WriteLimit{Rate: *writeRate, Burst: *writeBurst}
	if cfg.Gossip, err = gf.config(*dataDir, sec != nil); err != nil {
		return err
	}
	if err := servePprof(*pprofAddr, log); err != nil {
		return err
	}
	a, err := agent.StartJobMaster(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	log.Info("shutting down")
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
