package main

import (
	"github.com/jmcluster/jmcluster/security"

	"context"
	"errors"
	"flag"
	"os"
	"os/signal"
	"syscall"

	"github.com/jmcluster/jmcluster/agent"
	"github.com/jmcluster/jmcluster/internal/setting"
	"github.com/jmcluster/jmcluster/taskmanager"
	"github.com/jmcluster/jmcluster/transport"
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
	httpAddr := fs.String("http-addr", "", "serve /metrics (Prometheus) and /healthz on this address (empty: off)")
	dataAddr := fs.String("data-addr", "127.0.0.1:7500", "DataService (record exchange) listen address")
	grpcAdv := fs.String("grpc-advertise", "", "TaskManagerService address others dial (default: bound address)")
	dataAdv := fs.String("data-advertise", "", "DataService address others dial (default: bound address)")
	maxMsg := fs.Int("max-message-size", def.MaxMessageSize, "bound in bytes on every gRPC message this TaskManager receives or sends (both servers, its connections to JobMasters and TaskManagers)")
	jms := fs.String("jm", "", "comma-separated JobMaster gRPC addresses (asked for the leader when gossip does not know it)")
	gf := newGossipFlags(fs, "<work-dir>/gossip.keyring when --work-dir is set, else none")
	workDir := fs.String("work-dir", "", "working directory: relative sink paths are written here")
	checkpointDir := fs.String("checkpoint-dir", "", "checkpoint storage root: the shared directory every JobMaster and every TaskManager that may restore a task's state must reach (one host: a local directory; across hosts: a shared file system; docs/checkpoints.md). Empty: tasks of checkpointed jobs are refused")
	eventLog := fs.String("event-log", "", "append task start/stop events as JSON lines to this file")
	grace := fs.Duration("leader-grace", def.LeaderGrace, "cancel every task after no leader was reachable for this long")
	fence := fs.Duration("fence-timeout", def.FenceTimeout, "until a leader sends its own: cancel every task when no leader was reached this long while a JobMaster names a live leader, or unless the TM's pool confirms a JobMaster outage (0 turns it off)")
	retain := fs.Duration("retain-terminal", def.RetainTerminal, "keep terminal task states for reports this long (or until acknowledged)")
	hb := fs.Duration("heartbeat-interval", def.HeartbeatInterval, "heartbeat interval (the leader may override it)")
	logLevel := fs.String("log-level", "info", "log level: trace, debug, info, warn, error")
	logFormat := fs.String("log-format", "text", "log format: text, or json (one JSON object per line, for log shippers)")
	pprofAddr := fs.String("pprof-addr", "", "serve net/http/pprof on this address (empty: off; for profiling only)")
	tf := newTLSFlags(fs, "this TaskManager's taskmanager")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *id == "" {
		fs.Usage()
		return errors.New("--id is required")
	}
	cfg := def
	cfg.ID, cfg.Slots, cfg.GRPCAddr, cfg.DataAddr = *id, *slots, *grpcAddr, *dataAddr
	cfg.AdvertiseGRPC, cfg.AdvertiseData = *grpcAdv, *dataAdv
	cfg.JobMasters, cfg.LeaderGrace, cfg.RetainTerminal, cfg.HeartbeatInterval = splitList(*jms), *grace, *retain, *hb
	cfg.WorkDir, cfg.CheckpointDir = *workDir, *checkpointDir
	cfg.FenceTimeout = *fence
	cfg.MaxMessageSize = *maxMsg
	// Every check before anything is started or served: the flag's own rules (a zero the
	// library would read as its default), the package's (its fields named as the flags), then
	// the paths.
	check := cfg
	if err := firstError(
		between("--slots", int64(*slots), transport.MinSlots, transport.MaxSlots),
		heartbeatInterval("--heartbeat-interval", *hb),
		positive("--leader-grace", *grace),
		positive("--retain-terminal", *retain),
		messageSize(*maxMsg),
		optionalAddr("--http-addr", *httpAddr),
		optionalAddr("--pprof-addr", *pprofAddr),
		setting.Named(check.Validate(), taskManagerFlags),
		gf.check(*workDir),
		logFlags(*logLevel, *logFormat),
	); err != nil {
		return err
	}
	if *gf.addr == "" && len(cfg.JobMasters) == 0 {
		return errors.New("--jm or --gossip-addr with --gossip-join is needed to find the JobMasters")
	}
	if err := firstError(writableDir("--work-dir", *workDir), writableDir("--checkpoint-dir", *checkpointDir), eventLogFile(*eventLog)); err != nil {
		return err
	}
	log, err := newLogger(*id, *logLevel, *logFormat)
	if err != nil {
		return err
	}
	if err := setFailpoints(log); err != nil {
		return err
	}
	sec, err := tf.load(log, security.RoleTaskManager)
	if err != nil {
		return err
	}
	if sec == nil {
		warnPlaintext(log, "gRPC and data plane")
	}
	cfg.Logger, cfg.TLS = log, sec
	if *eventLog != "" {
		f, err := os.OpenFile(*eventLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return flagError("--event-log", *eventLog, "must be a file this process can append to (%v)", pathReason(err))
		}
		defer f.Close()
		cfg.EventLog = f
	}
	acfg := agent.TaskManagerConfig{TM: cfg, Logger: log, HTTPAddr: *httpAddr}
	if acfg.Gossip, err = gf.config(*workDir, sec != nil); err != nil {
		return err
	}
	if err := servePprof(*pprofAddr, log); err != nil {
		return err
	}
	a, err := agent.StartTaskManager(acfg)
	if err != nil {
		return err
	}
	log.Info("taskmanager started", "grpc", a.TM.GRPCAddr(), "data", a.TM.DataAddr())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	log.Info("shutting down")
	a.Shutdown()
	return nil
}
