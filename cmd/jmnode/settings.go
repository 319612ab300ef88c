package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/internal/setting"
	"github.com/jmcluster/jmcluster/jobmaster"
	"github.com/jmcluster/jmcluster/membership"
	"github.com/jmcluster/jmcluster/transport"
)

// Both process commands check every flag before they serve anything: the rules only a flag
// has (flagRules: a zero that the library reads as "the default" is refused where the flag's
// own default is not zero; the message size range; the heartbeat floor; the job size
// ceilings), then the packages' and the assembly's (agent's Config.Validate: the library's
// rule, its field renamed to the flag by the maps below), then the shared flags and the paths
// that must be writable. Every refusal names the flag, the value and the allowed range or form.

// The fields of agent.JobMasterConfig (within their section) -> the flag of `jmnode jobmaster`
// that sets them. Cluster.GRPCAddr is the advertised address: --grpc-advertise, or --grpc-addr
// without it (jobMasterConfig.grpcFlag).
var jobMasterFlagNames = map[string]string{
	"Cluster.ID": "--id", "Cluster.DataDir": "--data-dir", "Cluster.RaftBindAddr": "--raft-addr",
	"Cluster.RaftAdvertiseAddr": "--raft-advertise", "Cluster.BootstrapExpect": "--bootstrap-expect",
	"Cluster.Join": "--join", "Cluster.Peers": "--peers",
	"GRPCAddr": "--grpc-addr", "HTTPAddr": "--http-addr", "MaxMessageSize": "--max-message-size",
	"CleanupDeadServers": "--cleanup-dead-servers", "MinQuorum": "--min-quorum",
	"JobMaster.HeartbeatInterval": "--tm-heartbeat-interval", "JobMaster.HeartbeatTimeout": "--heartbeat-timeout",
	"JobMaster.FenceTimeout": "--fence-timeout", "JobMaster.PoolQueryInterval": "--pool-query-interval",
	"JobMaster.PoolQueryTimeout": "--pool-query-timeout", "JobMaster.TMLeaderGrace": "--tm-leader-grace",
	"JobMaster.DeadRefusals": "--dead-refusals", "JobMaster.DeadRefusalWindow": "--dead-refusal-window",
	"JobMaster.RetainJobs": "--retain-jobs", "JobMaster.RetainJobAge": "--retain-job-age",
	"JobMaster.MaxMessageSize": "--max-message-size", "JobMaster.SlotTimeout": "--slot-timeout",
	"JobMaster.ArtifactMaxBytes": "--artifact-max-bytes", "JobMaster.ArtifactMaxTotalBytes": "--artifact-max-total-bytes",
	"JobMaster.ArtifactMaxCount": "--artifact-max-count",
	"Reconcile.ReportDeadline":   "--report-deadline",
	"Gossip.BindAddr":            "--gossip-addr", "Gossip.Join": "--gossip-join", "Gossip.Profile": "--gossip-profile",
}

// The fields of agent.TaskManagerConfig -> the flag of `jmnode taskmanager` that sets them.
var taskManagerFlagNames = map[string]string{
	"TM.ID": "--id", "TM.Slots": "--slots", "TM.GRPCAddr": "--grpc-addr", "TM.DataAddr": "--data-addr",
	"TM.AdvertiseGRPC": "--grpc-advertise", "TM.AdvertiseData": "--data-advertise", "TM.JobMasters": "--jm",
	"TM.HeartbeatInterval": "--heartbeat-interval", "TM.LeaderGrace": "--leader-grace",
	"TM.FenceTimeout": "--fence-timeout", "TM.RetainTerminal": "--retain-terminal", "TM.MaxMessageSize": "--max-message-size",
	"TM.MaxRecordSize": "--max-record-size", "TM.ArtifactCacheDir": "--artifact-cache-dir", "TM.ArtifactCacheBytes": "--artifact-cache-bytes",
	"HTTPAddr":        "--http-addr",
	"Gossip.BindAddr": "--gossip-addr", "Gossip.Join": "--gossip-join", "Gossip.Profile": "--gossip-profile",
}

// flagRules are the rules of `jmnode jobmaster`'s flags that the library does not have: a
// zero it reads as its default, the heartbeat floor, the job size ceilings (the library
// lowers a value above one), the message size range, the client write limit, the listen
// address others dial.
func (c *jobMasterConfig) flagRules() []error {
	a, jm := &c.agent, &c.agent.JobMaster
	ceil := graph.CeilingSizeLimits()
	return []error{
		positive("--report-deadline", a.Reconcile.ReportDeadline),
		positive("--heartbeat-timeout", jm.HeartbeatTimeout),
		heartbeatInterval("--tm-heartbeat-interval", jm.HeartbeatInterval),
		positive("--tm-leader-grace", jm.TMLeaderGrace),
		positive("--dead-refusal-window", jm.DeadRefusalWindow),
		positive("--retain-job-age", jm.RetainJobAge),
		atLeast("--dead-refusals", int64(jm.DeadRefusals), 1),
		atLeast("--retain-jobs", int64(jm.RetainJobs), 1),
		atLeast("--bootstrap-expect", int64(c.expect), 0),
		between("--"+graph.LimitExecutions, jm.SizeLimits.MaxExecutions, 1, ceil.MaxExecutions),
		between("--"+graph.LimitInputChannels, jm.SizeLimits.MaxInputChannels, 1, ceil.MaxInputChannels),
		between("--"+graph.LimitGraphBytes, jm.SizeLimits.MaxGraphBytes, 1, ceil.MaxGraphBytes),
		between("--artifact-max-bytes", jm.ArtifactMaxBytes, 1, fsm.ArtifactCeilingBytes),
		between("--artifact-max-total-bytes", jm.ArtifactMaxTotalBytes, 1, fsm.ArtifactCeilingTotalBytes),
		between("--artifact-max-count", int64(jm.ArtifactMaxCount), 1, fsm.ArtifactCeilingCount),
		messageSize(a.MaxMessageSize),
		clientWriteRate(a.WriteLimit.Rate),
		atLeast("--client-write-burst", int64(a.WriteLimit.Burst), 1),
		atLeast("--min-quorum", int64(a.MinQuorum), 1),
		slotTimeoutFlag(jm.SlotTimeout),
		setting.HostPort(nil, "--grpc-addr", a.GRPCAddr, 1),
		between("--raft-snapshot-threshold", c.snapThreshold, 1, 1<<40),
		durationBetween("--raft-snapshot-interval", c.snapInterval, 100*time.Millisecond, 8760*time.Hour),
	}
}

// durationBetween refuses a duration flag outside [lo, hi].
func durationBetween(flag string, d, lo, hi time.Duration) error {
	if d < lo || d > hi {
		return flagError(flag, d, "must be in [%s, %s]", lo, hi)
	}
	return nil
}

// flagRules are the rules of `jmnode taskmanager`'s flags that the library does not have: a
// zero it reads as its default, the heartbeat floor, the message size range.
func (c *taskManagerConfig) flagRules() []error {
	tm := &c.agent.TM
	return []error{
		between("--slots", int64(tm.Slots), transport.MinSlots, transport.MaxSlots),
		heartbeatInterval("--heartbeat-interval", tm.HeartbeatInterval),
		positive("--leader-grace", tm.LeaderGrace),
		positive("--retain-terminal", tm.RetainTerminal),
		messageSize(tm.MaxMessageSize),
		atLeast("--artifact-cache-bytes", tm.ArtifactCacheBytes, 1),
	}
}

// flagError is a refusal of a flag's value.
func flagError(flag string, v any, rule string, args ...any) error {
	return &setting.Error{Field: flag, Value: setting.Format(v), Rule: fmt.Sprintf(rule, args...)}
}

// firstError returns the first non-nil error.
func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// positive refuses a duration flag that is not above 0 (its zero would silently mean the
// library's default, not what was asked).
func positive(flag string, d time.Duration) error {
	if d <= 0 {
		return flagError(flag, d, "must be above 0")
	}
	return nil
}

// between refuses an integer flag outside [lo, hi].
func between(flag string, v, lo, hi int64) error {
	if v < lo || v > hi {
		return flagError(flag, v, "must be in [%d, %d]", lo, hi)
	}
	return nil
}

// atLeast refuses an integer flag below lo.
func atLeast(flag string, v, lo int64) error {
	if v < lo {
		return flagError(flag, v, "must be at least %d", lo)
	}
	return nil
}

// messageSize checks --max-message-size against the processes' range.
func messageSize(v int) error {
	return between(transport.MaxMessageSizeFlag, int64(v), transport.MinMaxMessageSize, transport.MaxMaxMessageSize)
}

// optionalAddr checks a listen address flag that may be empty (off).
func optionalAddr(flag, addr string) error {
	if addr == "" {
		return nil
	}
	return setting.HostPort(nil, flag, addr, 0)
}

// clientWriteRate checks --client-write-rate: a number, negative for no limit, never 0 (no write
// after the first burst, ever) or NaN.
func clientWriteRate(v float64) error {
	if math.IsNaN(v) || v == 0 {
		return flagError("--client-write-rate", v, "must be above 0 (writes per second), or negative for no limit")
	}
	return nil
}

// writableDir checks that the directory a flag names exists or can be created, and that a
// file can be written in it: the process would otherwise fail later, after it joined the
// cluster (or, for a checkpoint directory, at the first checkpoint).
func writableDir(flag, dir string) error {
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return flagError(flag, dir, "must be a directory this process can create and write (%v)", pathReason(err))
	}
	f, err := os.CreateTemp(dir, ".jmnode-write-check-*")
	if err != nil {
		return flagError(flag, dir, "must be a directory this process can write (%v)", pathReason(err))
	}
	name := f.Name()
	f.Close()
	_ = os.Remove(name)
	return nil
}

// secretsDir checks --secrets-dir: a directory this process can list, that other users cannot
// (like ssh with a private key: credentials readable by anyone on the host are refused
// before a task reads them).
func secretsDir(dir string) error {
	if dir == "" {
		return nil
	}
	st, err := os.Stat(dir)
	switch {
	case err != nil:
		return flagError("--secrets-dir", dir, "must be a directory of credentials (%v)", pathReason(err))
	case !st.IsDir():
		return flagError("--secrets-dir", dir, "must be a directory of credentials, not a file")
	case st.Mode().Perm()&0o007 != 0:
		return flagError("--secrets-dir", dir, "is open to other users (mode %04o): chmod o-rwx it", st.Mode().Perm())
	}
	if _, err := os.ReadDir(dir); err != nil {
		return flagError("--secrets-dir", dir, "must be a directory this process can read (%v)", pathReason(err))
	}
	return nil
}

// keyringFile checks --gossip-keyring: its directory must exist (the keyring is written there
// at start and by every rotation), and a keyring already there must load.
func keyringFile(path string) error {
	if path == "" {
		return nil
	}
	dir := filepath.Dir(path)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		reason := "not a directory"
		if err != nil {
			reason = pathReason(err)
		}
		return flagError("--gossip-keyring", path, "must be a file in an existing directory (%s: %s)", dir, reason)
	}
	if _, _, err := membership.LoadKeyringFile(path); err != nil {
		return flagError("--gossip-keyring", path, "must be a keyring jmnode wrote (%v)", err)
	}
	return nil
}

// pathReason is the reason of a path error without the path repeated.
func pathReason(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Op + ": " + pe.Err.Error()
	}
	return err.Error()
}

// slotTimeoutFlag checks --slot-timeout: above 0, or negative (wait forever).
func slotTimeoutFlag(d time.Duration) error {
	if d == 0 {
		return flagError("--slot-timeout", d, "must be above 0, or negative to wait forever")
	}
	return nil
}

// logFlags checks --log-level and --log-format.
func logFlags(level, format string) error {
	_, err := newLogger("check", level, format)
	return err
}

// eventLogFile checks --event-log: a file this process can append to (its directory must
// exist; the file is created when missing).
func eventLogFile(path string) error {
	if path == "" {
		return nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return flagError("--event-log", path, "must be a file this process can append to (%v)", pathReason(err))
	}
	return f.Close()
}

// heartbeatInterval checks a heartbeat interval flag against jobmaster.MinHeartbeatInterval.
func heartbeatInterval(flag string, d time.Duration) error {
	if d < jobmaster.MinHeartbeatInterval {
		return flagError(flag, d, "must be at least %v: the leader takes a pause of its own longer than one interval for a stall and stops answering TaskManagers until a quorum confirms it", jobmaster.MinHeartbeatInterval)
	}
	return nil
}
