package main

import (
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/jmcluster/jmcluster/membership"
	"github.com/jmcluster/jmcluster/taskmanager"
)

func runTaskManager(args []string) error {
	fs := flag.NewFlagSet("taskmanager", flag.ContinueOnError)
	usageFor(fs, "jmnode taskmanager --id ID [flags]",
		"Runs a TaskManager: offers slots, runs tasks, exchanges records with other TaskManagers and\n"+
			"reports to the leading JobMaster. Tasks keep running while no leader is reachable (--leader-grace).")
	def := taskmanager.DefaultConfig()
	id := fs.String("id", "", "TaskManager id, unique in the cluster (required)")
	slots := fs.Int("slots", def.Slots, "task slots offered")
	grpcAddr := fs.String("grpc-addr", "127.0.0.1:7400", "TaskManagerService listen address")
	dataAddr := fs.String("data-addr", "127.0.0.1:7500", "DataService (record exchange) listen address")
	grpcAdv := fs.String("grpc-advertise", "", "TaskManagerService address others dial (default: bound address)")
	dataAdv := fs.String("data-advertise", "", "DataService address others dial (default: bound address)")
	jms := fs.String("jm", "", "comma-separated JobMaster gRPC addresses (asked for the leader when gossip does not know it)")
	gossipAddr := fs.String("gossip-addr", "", "gossip bind address host:port (empty: gossip off)")
	gossipJoin := fs.String("gossip-join", "", "comma-separated gossip addresses to join")
	gossipKey := fs.String("gossip-key", "", "base64 AES key (16, 24 or 32 bytes) encrypting gossip")
	gossipProfile := fs.String("gossip-profile", "lan", "gossip timing profile: lan, local or test")
	workDir := fs.String("work-dir", "", "working directory: relative sink paths are written here")
	eventLog := fs.String("event-log", "", "append task start/stop events as JSON lines to this file")
	grace := fs.Duration("leader-grace", def.LeaderGrace, "cancel every task after no leader was reachable for this long")
	retain := fs.Duration("retain-terminal", def.RetainTerminal, "keep terminal task states for reports this long (or until acknowledged)")
	hb := fs.Duration("heartbeat-interval", def.HeartbeatInterval, "heartbeat interval (the leader may override it)")
	logLevel := fs.String("log-level", "info", "log level: trace, debug, info, warn, error")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *id == "" {
		fs.Usage()
		return errors.New("--id is required")
	}
	log := hclog.New(&hclog.LoggerOptions{Name: *id, Level: hclog.LevelFromString(*logLevel), Output: os.Stderr})
	if *workDir != "" {
		if err := os.MkdirAll(*workDir, 0o755); err != nil {
			return fmt.Errorf("work dir: %w", err)
		}
		if err := os.Chdir(*workDir); err != nil {
			return fmt.Errorf("work dir: %w", err)
		}
	}
	cfg := def
	cfg.ID, cfg.Slots, cfg.GRPCAddr, cfg.DataAddr = *id, *slots, *grpcAddr, *dataAddr
	cfg.AdvertiseGRPC, cfg.AdvertiseData = *grpcAdv, *dataAdv
	cfg.JobMasters, cfg.LeaderGrace, cfg.RetainTerminal, cfg.HeartbeatInterval = splitList(*jms), *grace, *retain, *hb
	cfg.Logger = log
	if *eventLog != "" {
		f, err := os.OpenFile(*eventLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("event log: %w", err)
		}
		defer f.Close()
		cfg.EventLog = f
	}
	var gossip *membership.Membership
	if *gossipAddr != "" {
		mcfg := membership.DefaultConfig()
		mcfg.BindAddr, mcfg.Join, mcfg.Logger, mcfg.Profile = *gossipAddr, splitList(*gossipJoin), log, *gossipProfile
		if *gossipKey != "" {
			key, err := base64.StdEncoding.DecodeString(*gossipKey)
			if err != nil {
				return fmt.Errorf("--gossip-key: %w", err)
			}
			mcfg.SecretKey = key
		}
		// The metadata needs the bound addresses, so gossip starts after the TM binds.
		defer func() {
			if gossip != nil {
				_ = gossip.Leave(2 * time.Second)
				_ = gossip.Shutdown()
			}
		}()
		cfg.LeaderResolver = func(ctx context.Context) (string, error) {
			if gossip == nil {
				return "", errors.New("gossip not started")
			}
			var best membership.Member
			for _, m := range gossip.JobMasters() {
				if m.Meta.Leader && m.Meta.Epoch >= best.Meta.Epoch {
					best = m
				}
			}
			if best.Meta.GRPCAddr == "" {
				return "", errors.New("no leader in gossip metadata")
			}
			return best.Meta.GRPCAddr, nil
		}
		tm, err := taskmanager.New(cfg)
		if err != nil {
			return err
		}
		mcfg.Meta = membership.Meta{Role: membership.RoleTaskManager, ID: *id, GRPCAddr: tm.GRPCAddr(), DataAddr: tm.DataAddr(), Slots: int32(*slots), Version: version}
		if gossip, err = membership.New(mcfg); err != nil {
			tm.Kill()
			return fmt.Errorf("gossip: %w", err)
		}
		return serveTaskManager(tm, log)
	}
	if len(cfg.JobMasters) == 0 {
		return errors.New("--jm or --gossip-join is needed to find the JobMasters")
	}
	tm, err := taskmanager.New(cfg)
	if err != nil {
		return err
	}
	return serveTaskManager(tm, log)
}

func serveTaskManager(tm *taskmanager.TaskManager, log hclog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := tm.Start(ctx); err != nil {
		return err
	}
	log.Info("taskmanager started", "grpc", tm.GRPCAddr(), "data", tm.DataAddr())
	<-ctx.Done()
	log.Info("shutting down")
	tm.Stop()
	return nil
}

