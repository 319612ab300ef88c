package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/jmcluster/jmcluster/internal/setting"
	"github.com/jmcluster/jmcluster/jobmaster"
	"github.com/jmcluster/jmcluster/membership"
	"github.com/jmcluster/jmcluster/transport"
)

// Both process commands check every flag before they serve anything: the rules of the
// packages' Config.Validate (the library's rule, its field renamed to the flag by the maps
// below), then the rules only a flag has (a zero that the library reads as "the default" is
// refused where the flag's own default is not zero; the message size floor; paths that must
// be writable). Every refusal names the flag, the value and the allowed range or form.

// Config fields of each package -> the flag of `jmnode jobmaster` that sets them.
var (
	jobMasterClusterFlags = map[string]string{
		"ID": "--id", "DataDir": "--data-dir", "RaftBindAddr": "--raft-addr", "RaftAdvertiseAddr": "--raft-advertise",
		"BootstrapExpect": "--bootstrap-expect", "Join": "--join", "Peers": "--peers",
		// GRPCAddr is the advertised address: --grpc-advertise, or --grpc-addr without it (grpcFlag).
	}
	jobMasterFlags = map[string]string{
		"HeartbeatInterval": "--tm-heartbeat-interval", "HeartbeatTimeout": "--heartbeat-timeout",
		"FenceTimeout": "--fence-timeout", "PoolQueryInterval": "--pool-query-interval",
		"PoolQueryTimeout": "--pool-query-timeout", "TMLeaderGrace": "--tm-leader-grace",
		"DeadRefusals": "--dead-refusals", "DeadRefusalWindow": "--dead-refusal-window",
		"RetainJobs": "--retain-jobs", "RetainJobAge": "--retain-job-age", "MaxMessageSize": "--max-message-size",
		"SlotTimeout": "--slot-timeout",
	}
	reconcileFlags  = map[string]string{"ReportDeadline": "--report-deadline"}
	gossipFlagNames = map[string]string{
		"BindAddr": "--gossip-addr", "Join": "--gossip-join", "Profile": "--gossip-profile",
	}
	taskManagerFlags = map[string]string{
		"ID": "--id", "Slots": "--slots", "GRPCAddr": "--grpc-addr", "DataAddr": "--data-addr",
		"AdvertiseGRPC": "--grpc-advertise", "AdvertiseData": "--data-advertise", "JobMasters": "--jm",
		"HeartbeatInterval": "--heartbeat-interval", "LeaderGrace": "--leader-grace",
		"FenceTimeout": "--fence-timeout", "RetainTerminal": "--retain-terminal", "MaxMessageSize": "--max-message-size",
	}
)

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

// cleanupFlag checks --cleanup-dead-servers: 0 (off) or positive, and then gossip must be on.
func cleanupFlag(d time.Duration, gossip bool) error {
	switch {
	case d < 0:
		return flagError("--cleanup-dead-servers", d, "must be 0 (off) or above 0")
	case d > 0 && !gossip:
		return flagError("--cleanup-dead-servers", d, "needs gossip (--gossip-addr): dead servers are found through it")
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
