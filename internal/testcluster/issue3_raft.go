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
	"github.com/jmcluster/jmcluster/transport/pb"
)

// SlowLease edits a replica's Raft timings so that a leader which lost its quorum keeps
// believing it leads for a full second before it steps down: long enough for a test to make
// it try (and fail) a commit in that window without racing the lease.
func SlowLease(c *cluster.Config) {
	c.HeartbeatTimeout = time.Second
	c.ElectionTimeout = time.Second
	c.LeaderLeaseTimeout = time.Second
}

// NewWithRaft is New with every replica's Raft configuration edited by edit (also when a
// replica is restarted with StartJMWithRaft). Like NewRetrying, it starts again on other ports
// when a picked port was taken.
func NewWithRaft(t testing.TB, opts Options, edit func(*cluster.Config)) *Cluster {
	t.Helper()
	return retryBind(t, func(tb testing.TB) *Cluster { return newWithRaft(tb, opts, edit) })
}

func newWithRaft(t testing.TB, opts Options, edit func(*cluster.Config)) *Cluster {
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
	c.Log = hclog.New(&hclog.LoggerOptions{Name: "test", Level: hclog.Debug, Output: f})
	t.Cleanup(c.close)
	ports := FreePorts(t, 2*opts.JMs)
	for i := 0; i < opts.JMs; i++ {
		id := fmt.Sprintf("jm%d", i+1)
		c.JMs = append(c.JMs, &JM{ID: id, DataDir: filepath.Join(c.Dir, id), RaftAddr: ports[2*i], GRPCAddr: ports[2*i+1]})
	}
	for _, j := range c.JMs {
		c.StartJMWithRaft(j, edit)
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

// StartJMWithRaft is StartJM with the replica's Raft configuration edited by edit.
func (c *Cluster) StartJMWithRaft(j *JM, edit func(*cluster.Config)) {
	c.T.Helper()
	cc := cluster.TestConfig()
	cc.ID, cc.DataDir, cc.RaftBindAddr, cc.GRPCAddr = j.ID, j.DataDir, j.RaftAddr, j.GRPCAddr
	for _, p := range c.JMs {
		cc.Peers = append(cc.Peers, cluster.Peer{ID: p.ID, RaftAddr: p.RaftAddr, GRPCAddr: p.GRPCAddr})
	}
	if edit != nil {
		edit(&cc)
	}
	cfg := agent.JobMasterConfig{
		Cluster: cc, GRPCAddr: j.GRPCAddr, Logger: c.Log.Named(j.ID),
		JobMaster:       jobmaster.Config{HeartbeatTimeout: c.Opts.HeartbeatTimeout, TickInterval: 50 * time.Millisecond, RetryAfter: 50 * time.Millisecond},
		Reconcile:       reconcile.Config{ReportDeadline: c.Opts.ReportDeadline},
		UnsafeEarlyGate: c.Opts.UnsafeEarlyGate,
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

// Executions lists every ExecutionVertex of a job in graph order.
func Executions(rec *pb.JobRecord) []*pb.ExecutionVertex {
	var out []*pb.ExecutionVertex
	for _, v := range rec.GetExecutionGraph().GetVertices() {
		out = append(out, v.Subtasks...)
	}
	return out
}
