package main

import (
	"errors"
	"flag"
	"os"

	"github.com/jmcluster/jmcluster/agent"
	"github.com/jmcluster/jmcluster/internal/setting"
	"github.com/jmcluster/jmcluster/security"
	"github.com/jmcluster/jmcluster/taskmanager"
)

// taskManagerConfig is what `jmnode taskmanager` runs with: the agent's configuration, whose
// fields most flags set directly, and the flags that build the rest (build).
type taskManagerConfig struct {
	agent         agent.TaskManagerConfig
	proc          processFlags
	jms, eventLog string
}

// newTaskManagerConfig registers the flags of `jmnode taskmanager` on fs, each into the field it
// sets; every other field keeps taskmanager.DefaultConfig's value.
func newTaskManagerConfig(fs *flag.FlagSet) *taskManagerConfig {
	c := &taskManagerConfig{agent: agent.TaskManagerConfig{TM: taskmanager.DefaultConfig()}}
	tm, def := &c.agent.TM, taskmanager.DefaultConfig()
	fs.StringVar(&tm.ID, "id", "", "TaskManager id, unique in the cluster (required)")
	fs.IntVar(&tm.Slots, "slots", def.Slots, "task slots offered")
	fs.StringVar(&tm.GRPCAddr, "grpc-addr", "127.0.0.1:7400", "TaskManagerService listen address")
	fs.StringVar(&c.agent.HTTPAddr, "http-addr", "", "serve /metrics (Prometheus) and /healthz on this address (empty: off)")
	fs.StringVar(&tm.DataAddr, "data-addr", "127.0.0.1:7500", "DataService (record exchange) listen address")
	fs.StringVar(&tm.AdvertiseGRPC, "grpc-advertise", "", "TaskManagerService address others dial (default: bound address)")
	fs.StringVar(&tm.AdvertiseData, "data-advertise", "", "DataService address others dial (default: bound address)")
	fs.IntVar(&tm.MaxMessageSize, "max-message-size", def.MaxMessageSize, "bound in bytes on every gRPC message this TaskManager receives or sends (both servers, its connections to JobMasters and TaskManagers)")
	fs.IntVar(&tm.MaxRecordSize, "max-record-size", def.MaxRecordSize, "bound in bytes on a record's key and value: a task that emits a larger record fails, naming the limit (0: 1 MiB, or a quarter of --max-message-size when that is less; at most that quarter)")
	fs.StringVar(&c.jms, "jm", "", "comma-separated JobMaster gRPC addresses (asked for the leader when gossip does not know it)")
	c.proc.register(fs, "this TaskManager's taskmanager", "<work-dir>/gossip.keyring when --work-dir is set, else none")
	fs.StringVar(&tm.WorkDir, "work-dir", "", "working directory: relative sink paths are written here")
	fs.StringVar(&tm.ArtifactCacheDir, "artifact-cache-dir", "", "where the artifacts (WebAssembly modules) this TaskManager fetched are kept, a file per sha256, so a restart does not fetch them again (empty: .artifacts under --work-dir)")
	fs.Int64Var(&tm.ArtifactCacheBytes, "artifact-cache-bytes", taskmanager.DefaultArtifactCacheBytes, "bound in bytes on the artifacts kept in memory (the most recently used)")
	fs.StringVar(&tm.SecretsDir, "secrets-dir", "", "directory of the credentials connectors name, a file per credential (a password, a token, a NATS .creds file; docs/connectors.md#credentials); read when a task starts, never logged. Empty: a task whose connector names a credential fails")
	fs.StringVar(&tm.CheckpointDir, "checkpoint-dir", "", "checkpoint storage root: the shared directory every JobMaster and every TaskManager that may restore a task's state must reach (one host: a local directory; across hosts: a shared file system; docs/checkpoints.md). Empty: tasks of checkpointed jobs are refused")
	fs.StringVar(&c.eventLog, "event-log", "", "append task start/stop events as JSON lines to this file")
	fs.DurationVar(&tm.LeaderGrace, "leader-grace", def.LeaderGrace, "cancel every task after no leader was reachable for this long")
	fs.DurationVar(&tm.FenceTimeout, "fence-timeout", def.FenceTimeout, "until a leader sends its own: cancel every task when no leader was reached this long while a JobMaster names a live leader, or unless the TM's pool confirms a JobMaster outage (0 turns it off)")
	fs.DurationVar(&tm.RetainTerminal, "retain-terminal", def.RetainTerminal, "keep terminal task states for reports this long (or until acknowledged)")
	fs.DurationVar(&tm.HeartbeatInterval, "heartbeat-interval", def.HeartbeatInterval, "heartbeat interval (the leader may override it)")
	return c
}

// build completes the agent's configuration from the parsed flags: the JobMasters to ask and
// the gossip membership's (its key comes with TLS, at start).
func (c *taskManagerConfig) build() {
	c.agent.TM.JobMasters = splitList(c.jms)
	c.agent.Gossip = c.proc.gossip.config(c.agent.TM.WorkDir)
}

// check refuses, before anything is started or served, every flag the TaskManager cannot run
// with, naming the flag: the flag's own rules, the packages' (agent.TaskManagerConfig.Validate,
// fields named as the flags), the shared flags, a way to find the JobMasters, then the paths.
func (c *taskManagerConfig) check() error {
	if err := firstError(
		firstError(c.flagRules()...),
		setting.Named(c.agent.Validate(), taskManagerFlagNames),
		c.proc.check(c.agent.TM.WorkDir),
	); err != nil {
		return err
	}
	if c.agent.Gossip == nil && len(c.agent.TM.JobMasters) == 0 {
		return errors.New("--jm or --gossip-addr with --gossip-join is needed to find the JobMasters")
	}
	return firstError(writableDir("--work-dir", c.agent.TM.WorkDir), writableDir("--checkpoint-dir", c.agent.TM.CheckpointDir),
		writableDir("--artifact-cache-dir", c.agent.TM.ArtifactCacheDir), secretsDir(c.agent.TM.SecretsDir), eventLogFile(c.eventLog))
}

func runTaskManager(args []string) error {
	fs := flag.NewFlagSet("taskmanager", flag.ContinueOnError)
	usageFor(fs, "jmnode taskmanager --id ID [flags]",
		"Runs a TaskManager: offers slots, runs tasks, exchanges records with other TaskManagers and\n"+
			"reports to the leading JobMaster. Tasks keep running while no leader is reachable (--leader-grace).")
	c := newTaskManagerConfig(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if c.agent.TM.ID == "" {
		fs.Usage()
		return errors.New("--id is required")
	}
	c.build()
	if err := c.check(); err != nil {
		return err
	}
	log, sec, err := c.proc.preamble(c.agent.TM.ID, security.RoleTaskManager, "gRPC and data plane")
	if err != nil {
		return err
	}
	cfg := c.agent
	cfg.Logger, cfg.TM.TLS = log, sec
	if c.eventLog != "" {
		f, err := os.OpenFile(c.eventLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return flagError("--event-log", c.eventLog, "must be a file this process can append to (%v)", pathReason(err))
		}
		defer f.Close()
		cfg.TM.EventLog = f
	}
	if err := c.proc.gossip.secure(cfg.Gossip, sec != nil); err != nil {
		return err
	}
	a, err := agent.StartTaskManager(cfg)
	if err != nil {
		return err
	}
	log.Info("taskmanager started", "grpc", a.TM.GRPCAddr(), "data", a.TM.DataAddr())
	untilSignal(log)
	a.Shutdown()
	return nil
}
