package main

import (
	"flag"
	"io"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/agent"
	"github.com/jmcluster/jmcluster/cluster"
)

// parsedJobMaster is `jmnode jobmaster args` parsed and built, not checked.
func parsedJobMaster(t *testing.T, args ...string) (*jobMasterConfig, *flag.FlagSet) {
	t.Helper()
	fs := flag.NewFlagSet("jobmaster", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c := newJobMasterConfig(fs)
	if err := parseFlags(fs, args); err != nil {
		t.Fatal(err)
	}
	if err := c.build(); err != nil {
		t.Fatal(err)
	}
	return c, fs
}

// TestJobMasterFlagsMakeOneConfig: the flags of `jmnode jobmaster` land in the fields of one
// agent.JobMasterConfig: the Raft node's (with --fast-raft's timings and the advertised gRPC
// address), the JobMaster's, the reconciliation's, the message size every part shares, and
// gossip's with the keyring in the data directory.
func TestJobMasterFlagsMakeOneConfig(t *testing.T) {
	dir := t.TempDir()
	c, _ := parsedJobMaster(t, "--id", "jm1", "--data-dir", dir, "--grpc-addr", "127.0.0.1:7101", "--fast-raft",
		"--peers", "jm1=127.0.0.1:7001@127.0.0.1:7101,jm2=127.0.0.1:7002@127.0.0.1:7102",
		"--heartbeat-timeout", "20s", "--report-deadline", "3s", "--max-message-size", "8388608",
		"--gossip-addr", "127.0.0.1:7301", "--gossip-join", "127.0.0.1:7302,127.0.0.1:7303", "--cleanup-dead-servers", "1m")
	a := c.agent
	fast := cluster.TestConfig()
	switch {
	case a.Cluster.ID != "jm1" || a.Cluster.DataDir != dir || a.Cluster.GRPCAddr != "127.0.0.1:7101" || c.grpcFlag != "--grpc-addr":
		t.Fatalf("cluster %+v, advertised by %s", a.Cluster, c.grpcFlag)
	case a.Cluster.ElectionTimeout != fast.ElectionTimeout || len(a.Cluster.Peers) != 2 || a.Cluster.Peers[1].GRPCAddr != "127.0.0.1:7102":
		t.Fatalf("cluster timings or peers: %+v", a.Cluster)
	case a.JobMaster.HeartbeatTimeout != 20*time.Second || a.Reconcile.ReportDeadline != 3*time.Second:
		t.Fatalf("jobmaster %+v, reconcile %+v", a.JobMaster, a.Reconcile)
	case a.MaxMessageSize != 8<<20 || a.JobMaster.MaxMessageSize != 8<<20:
		t.Fatalf("message size %d, jobmaster's %d", a.MaxMessageSize, a.JobMaster.MaxMessageSize)
	case a.Gossip == nil || len(a.Gossip.Join) != 2 || a.Gossip.KeyringFile != filepath.Join(dir, "gossip.keyring"):
		t.Fatalf("gossip %+v", a.Gossip)
	case a.CleanupDeadServers != time.Minute || a.MinQuorum != 3:
		t.Fatalf("cleanup %v, min quorum %d", a.CleanupDeadServers, a.MinQuorum)
	}
	if err := c.check(); err != nil {
		t.Fatalf("check: %v", err)
	}
	c, _ = parsedJobMaster(t, "--id", "jm1", "--data-dir", dir, "--grpc-advertise", "10.0.0.1:7100")
	if c.agent.Cluster.GRPCAddr != "10.0.0.1:7100" || c.grpcFlag != "--grpc-advertise" || c.agent.Gossip != nil {
		t.Fatalf("advertised %q by %s, gossip %+v", c.agent.Cluster.GRPCAddr, c.grpcFlag, c.agent.Gossip)
	}
}

// TestTaskManagerFlagsMakeOneConfig: the flags of `jmnode taskmanager` land in one
// agent.TaskManagerConfig, every field no flag sets at taskmanager.DefaultConfig's value.
func TestTaskManagerFlagsMakeOneConfig(t *testing.T) {
	dir := t.TempDir()
	fs := flag.NewFlagSet("taskmanager", flag.ContinueOnError)
	c := newTaskManagerConfig(fs)
	if err := parseFlags(fs, []string{"--id", "tm1", "--slots", "8", "--jm", "127.0.0.1:7100,127.0.0.1:7101", "--work-dir", dir,
		"--fence-timeout", "0s", "--gossip-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}); err != nil {
		t.Fatal(err)
	}
	c.build()
	tm := c.agent.TM
	switch {
	case tm.ID != "tm1" || tm.Slots != 8 || len(tm.JobMasters) != 2 || tm.WorkDir != dir || tm.FenceTimeout != 0:
		t.Fatalf("taskmanager %+v", tm)
	case tm.RPCTimeout != 5*time.Second || tm.ReportChunkSize != 1000 || c.agent.HTTPAddr != "127.0.0.1:0":
		t.Fatalf("defaults lost: %+v", c.agent)
	case c.agent.Gossip == nil || c.agent.Gossip.KeyringFile != filepath.Join(dir, "gossip.keyring"):
		t.Fatalf("gossip %+v", c.agent.Gossip)
	}
	if err := c.check(); err != nil {
		t.Fatalf("check: %v", err)
	}
}

// TestCheckNamesTheFlag: a refusal of the packages' or the assembly's rules names the flag,
// not the Go field, and keeps the rule's text.
func TestCheckNamesTheFlag(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cleanup-dead-servers", "1m"}, "--cleanup-dead-servers 1m0s: needs gossip (--gossip-addr)"},
		{[]string{"--fence-timeout", "-1s"}, "--fence-timeout -1s: must not be negative"},
		{[]string{"--grpc-advertise", "127.0.0.1:70000"}, `--grpc-advertise "127.0.0.1:70000": must be host:port`},
		{[]string{"--gossip-addr", "127.0.0.1:0", "--gossip-profile", "wan"}, `--gossip-profile "wan": must be lan, local or test`},
		{[]string{"--gossip-key", validGossipKey}, `--gossip-key "(hidden)": needs --gossip-addr`},
		{[]string{"--http-addr", "nowhere"}, `--http-addr "nowhere": must be host:port`},
	} {
		c, _ := parsedJobMaster(t, append([]string{"--id", "jm1", "--data-dir", dir}, tc.args...)...)
		if err := c.check(); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want %q...", tc.args, err, tc.want)
		}
	}
}

// TestFlagNamesAreConfigFields: every field the flag-name maps rename is a field of the agent's
// configuration, and every flag they name is a flag of the process.
func TestFlagNamesAreConfigFields(t *testing.T) {
	for _, p := range []struct {
		names map[string]string
		cfg   any
		fs    func(*flag.FlagSet)
	}{
		{jobMasterFlagNames, agent.JobMasterConfig{}, func(fs *flag.FlagSet) { newJobMasterConfig(fs) }},
		{taskManagerFlagNames, agent.TaskManagerConfig{}, func(fs *flag.FlagSet) { newTaskManagerConfig(fs) }},
	} {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		p.fs(fs)
		for field, name := range p.names {
			typ := reflect.TypeOf(p.cfg)
			for _, part := range strings.Split(field, ".") {
				if typ.Kind() == reflect.Pointer {
					typ = typ.Elem()
				}
				f, ok := typ.FieldByName(part)
				if !ok {
					t.Fatalf("%T has no field %s (named %s)", p.cfg, field, name)
				}
				typ = f.Type
			}
			if fs.Lookup(strings.TrimPrefix(name, "--")) == nil {
				t.Errorf("%s is renamed to %s, which is no flag", field, name)
			}
		}
	}
}

// TestMaxRecordSizeFlag: --max-record-size sets the TaskManager's maximum record size, and one
// over a quarter of --max-message-size is refused naming the flag.
func TestMaxRecordSizeFlag(t *testing.T) {
	for _, tc := range []struct {
		size, want string
	}{{"65536", ""}, {"2000000", "--max-record-size 2000000: must be at most a quarter of MaxMessageSize"}} {
		fs := flag.NewFlagSet("taskmanager", flag.ContinueOnError)
		c := newTaskManagerConfig(fs)
		if err := parseFlags(fs, []string{"--id", "tm1", "--jm", "127.0.0.1:7100", "--work-dir", t.TempDir(), "--max-record-size", tc.size}); err != nil {
			t.Fatal(err)
		}
		c.build()
		err := c.check()
		switch {
		case tc.want == "" && (err != nil || c.agent.TM.MaxRecordSize != 65536):
			t.Fatalf("--max-record-size %s: %v, MaxRecordSize %d", tc.size, err, c.agent.TM.MaxRecordSize)
		case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)):
			t.Fatalf("--max-record-size %s: %v, want %q...", tc.size, err, tc.want)
		}
	}
}
