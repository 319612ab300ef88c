package testcluster

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"github.com/jmcluster/jmcluster/agent"
	"github.com/jmcluster/jmcluster/cluster"
	"github.com/jmcluster/jmcluster/jobmaster"
	"github.com/jmcluster/jmcluster/membership"
	"github.com/jmcluster/jmcluster/reconcile"
)

// NewTuned is New with the JobMasters' Raft configuration edited by tune before each starts,
// for tests whose entries are large (the fast test timings assume small ones). Replicas it
// starts must be restarted with StartJMTuned.
func NewTuned(t testing.TB, opts Options, tune func(*cluster.Config)) *Cluster {
	t.Helper()
	if opts.JMs == 0 {
		opts.JMs = 3
	}
	if opts.Slots == 0 {
		opts.Slots = 4
	}
	if opts.ReportDeadline == 0 {
		opts.ReportDeadline = 3 * time.Second
	}
	if opts.HeartbeatTimeout == 0 {
		opts.HeartbeatTimeout = 3 * time.Second
	}
	c := &Cluster{T: t, Opts: opts, Dir: t.TempDir(), conns: map[string]*grpc.ClientConn{}}
	f, err := os.Create(filepath.Join(c.Dir, "cluster.log"))
	if err != nil {
		t.Fatal(err)
	}
	c.logFile = f
	c.Log = hclog.New(&hclog.LoggerOptions{Name: "test", Level: hclog.Info, Output: f})
	t.Cleanup(c.close)
	ports := FreePorts(t, 2*opts.JMs)
	for i := 0; i < opts.JMs; i++ {
		id := fmt.Sprintf("jm%d", i+1)
		c.JMs = append(c.JMs, &JM{ID: id, DataDir: filepath.Join(c.Dir, id), RaftAddr: ports[2*i], GRPCAddr: ports[2*i+1]})
	}
	for _, j := range c.JMs {
		c.StartJMTuned(j, tune)
	}
	c.Leader()
	for i := 0; i < opts.TMs; i++ {
		c.AddTM(fmt.Sprintf("tm%d", i+1))
	}
	if opts.TMs > 0 {
		c.WaitTMs(opts.TMs)
	}
	return c
}

// StartJMTuned is StartJM with the Raft configuration edited by tune.
func (c *Cluster) StartJMTuned(j *JM, tune func(*cluster.Config)) {
	c.T.Helper()
	cc := cluster.TestConfig()
	cc.ID, cc.DataDir, cc.RaftBindAddr, cc.GRPCAddr = j.ID, j.DataDir, j.RaftAddr, j.GRPCAddr
	for _, p := range c.JMs {
		cc.Peers = append(cc.Peers, cluster.Peer{ID: p.ID, RaftAddr: p.RaftAddr, GRPCAddr: p.GRPCAddr})
	}
	if tune != nil {
		tune(&cc)
	}
	cfg := agent.JobMasterConfig{
		Cluster: cc, GRPCAddr: j.GRPCAddr, Logger: c.Log.Named(j.ID),
		JobMaster: jobmaster.Config{HeartbeatTimeout: c.Opts.HeartbeatTimeout, TickInterval: 50 * time.Millisecond, RetryAfter: 50 * time.Millisecond},
		Reconcile: reconcile.Config{ReportDeadline: c.Opts.ReportDeadline},
	}
	if !c.Opts.NoGossip {
		g := membership.TestConfig(membership.Meta{})
		g.Join = c.gossipSeeds()
		cfg.Gossip = &g
	}
	a, err := agent.StartJobMaster(cfg)
	if err != nil {
		c.T.Fatalf("start %s: %v", j.ID, err)
	}
	j.A = a
}
