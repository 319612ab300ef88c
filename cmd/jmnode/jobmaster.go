package main

import (
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/jmcluster/jmcluster/cluster"
	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/jobmaster"
	"github.com/jmcluster/jmcluster/membership"
	"github.com/jmcluster/jmcluster/reconcile"
	"github.com/jmcluster/jmcluster/transport/pb"
	"github.com/jmcluster/jmcluster/transport/server"
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
	gossipAddr := fs.String("gossip-addr", "", "gossip bind address host:port (empty: gossip off)")
	gossipJoin := fs.String("gossip-join", "", "comma-separated gossip addresses to join")
	gossipKey := fs.String("gossip-key", "", "base64 AES key (16, 24 or 32 bytes) encrypting gossip")
	gossipProfile := fs.String("gossip-profile", "lan", "gossip timing profile: lan, local or test")
	expect := fs.Int("bootstrap-expect", 0, "bootstrap once this many JMs (including this one) are seen through --join")
	join := fs.String("join", "", "comma-separated gRPC addresses of other JMs (bootstrap discovery or joining a running cluster)")
	peers := fs.String("peers", "", "explicit initial cluster, id=raftaddr@grpcaddr,... (alternative to --bootstrap-expect)")
	reportDeadline := fs.Duration("report-deadline", 10*time.Second, "how long a new leader waits for TaskManager reports")
	hbTimeout := fs.Duration("heartbeat-timeout", 10*time.Second, "a TaskManager silent for this long is declared lost")
	fast := fs.Bool("fast-raft", false, "use fast Raft timings (loopback clusters, demos and tests)")
	logLevel := fs.String("log-level", "info", "log level: trace, debug, info, warn, error")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *id == "" || *dataDir == "" {
		fs.Usage()
		return errors.New("--id and --data-dir are required")
	}
	log := hclog.New(&hclog.LoggerOptions{Name: *id, Level: hclog.LevelFromString(*logLevel), Output: os.Stderr})
	if *grpcAdv == "" {
		*grpcAdv = *grpcAddr
	}
	if err := os.MkdirAll(*dataDir, 0o755); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}

	state := fsm.New(log)
	jm := jobmaster.New(jobmaster.Config{HeartbeatTimeout: *hbTimeout, Logger: log}, nil, state)
	ccfg := cluster.DefaultConfig()
	if *fast {
		ccfg = cluster.TestConfig()
	}
	ccfg.ID, ccfg.DataDir, ccfg.RaftBindAddr, ccfg.RaftAdvertiseAddr = *id, *dataDir, *raftAddr, *raftAdv
	ccfg.GRPCAddr, ccfg.BootstrapExpect, ccfg.Join, ccfg.Logger = *grpcAdv, *expect, splitList(*join), log
	for _, p := range splitList(*peers) {
		peer, err := parsePeer(p)
		if err != nil {
			return err
		}
		ccfg.Peers = append(ccfg.Peers, peer)
	}
	node, err := cluster.NewNode(ccfg, state, jm)
	if err != nil {
		return err
	}
	jm.SetRaft(node)
	rec := reconcile.New(reconcile.Config{ReportDeadline: *reportDeadline, Logger: log}, jm)
	jm.SetReconciler(rec)
	if os.Getenv("JMNODE_UNSAFE_EARLY_GATE") == "1" {
		jm.SetUnsafeEarlyGate(true)
	}

	var gossip *membership.Membership
	deps := server.Deps{Node: node, State: state, JM: jm}
	if *gossipAddr != "" {
		mcfg := membership.DefaultConfig()
		mcfg.BindAddr, mcfg.Join, mcfg.Logger, mcfg.Profile = *gossipAddr, splitList(*gossipJoin), log, *gossipProfile
		mcfg.Meta = membership.Meta{Role: membership.RoleJobMaster, ID: *id, GRPCAddr: *grpcAdv, Version: version}
		if *gossipKey != "" {
			if mcfg.SecretKey, err = base64.StdEncoding.DecodeString(*gossipKey); err != nil {
				return fmt.Errorf("--gossip-key: %w", err)
			}
		}
		if gossip, err = membership.New(mcfg); err != nil {
			return fmt.Errorf("gossip: %w", err)
		}
		deps.Members = func() []*pb.Member { return pbMembers(gossip.Members()) }
	}

	lis, err := net.Listen("tcp", *grpcAddr)
	if err != nil {
		return fmt.Errorf("grpc listen %s: %w", *grpcAddr, err)
	}
	gs, health := server.NewGRPCServer(deps, 0)
	go func() { _ = gs.Serve(lis) }()
	var hs *http.Server
	if *httpAddr != "" {
		hl, err := net.Listen("tcp", *httpAddr)
		if err != nil {
			return fmt.Errorf("http listen %s: %w", *httpAddr, err)
		}
		hs = &http.Server{Handler: server.NewHTTPHandler(deps), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = hs.Serve(hl) }()
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := node.Start(ctx); err != nil {
		return err
	}
	if gossip != nil {
		go feedRegistry(ctx, gossip, jm)
	}
	log.Info("jobmaster started", "grpc", *grpcAdv, "raft", node.RaftAddr(), "http", *httpAddr, "gossip", *gossipAddr)
	<-ctx.Done()

	// Shutdown order: stop taking requests, leave gossip, stop leader work, hand over
	// leadership and stop Raft (cluster.Node.Shutdown), then close the stores.
	log.Info("shutting down")
	health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	if hs != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = hs.Shutdown(sctx)
		cancel()
	}
	if gossip != nil {
		_ = gossip.Leave(2 * time.Second)
		_ = gossip.Shutdown()
	}
	jm.Shutdown()
	err = node.Shutdown()
	gs.Stop()
	return err
}

func parsePeer(s string) (cluster.Peer, error) {
	id, rest, ok := strings.Cut(s, "=")
	raftAddr, grpcAddr, _ := strings.Cut(rest, "@")
	if !ok || id == "" || raftAddr == "" {
		return cluster.Peer{}, fmt.Errorf("--peers: %q is not id=raftaddr@grpcaddr", s)
	}
	return cluster.Peer{ID: id, RaftAddr: raftAddr, GRPCAddr: grpcAddr}, nil
}

// feedRegistry keeps the leader's TaskManager registry in step with gossip (addresses, slots,
// alive/dead) and publishes this JM's leadership in its own gossip metadata.
func feedRegistry(ctx context.Context, g *membership.Membership, jm *jobmaster.JobMaster) {
	events, cancel := g.Subscribe(256)
	defer cancel()
	apply := func(m membership.Member) {
		if m.MetaErr != nil || m.Meta.Role != membership.RoleTaskManager {
			return
		}
		jm.Registry().Upsert(m.Meta.ID, m.Meta.GRPCAddr, m.Meta.DataAddr, m.Meta.Slots, false)
		jm.Registry().SetGossip(m.Meta.ID, m.State)
	}
	for _, m := range g.Members() {
		apply(m)
	}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-events:
			apply(ev.Member)
		case <-tick.C:
			epoch, leader := jm.Epoch(), jm.Active()
			if lm := g.LocalMeta(); epoch > lm.Epoch || lm.Leader != leader {
				_ = g.UpdateMeta(func(m *membership.Meta) {
					if epoch > m.Epoch {
						m.Epoch = epoch
					}
					m.Leader = leader
				})
			}
		}
	}
}

func pbMembers(ms []membership.Member) []*pb.Member {
	out := make([]*pb.Member, 0, len(ms))
	for _, m := range ms {
		pm := &pb.Member{Name: m.Name, Address: m.Addr, Role: string(m.Meta.Role), State: m.State, Meta: map[string]string{
			"id": m.Meta.ID, "grpc": m.Meta.GRPCAddr, "data": m.Meta.DataAddr,
			"slots": strconv.Itoa(int(m.Meta.Slots)), "epoch": strconv.FormatUint(m.Meta.Epoch, 10),
			"leader": strconv.FormatBool(m.Meta.Leader), "version": m.Meta.Version,
		}}
		out = append(out, pm)
	}
	return out
}
