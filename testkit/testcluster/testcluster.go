// Package testcluster runs a whole jmcluster in one test process: JobMaster replicas and
// TaskManagers assembled exactly as the jmnode binary assembles them (package agent), over real
// TCP on loopback, with bolt stores in temporary directories and real gossip. Tests wait with
// deadlines and print what they last saw; they never sleep.
package testcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/jmcluster/jmcluster/agent"
	"github.com/jmcluster/jmcluster/cluster"
	"github.com/jmcluster/jmcluster/internal/freeport"
	"github.com/jmcluster/jmcluster/jobmaster"
	"github.com/jmcluster/jmcluster/membership"
	"github.com/jmcluster/jmcluster/reconcile"
	"github.com/jmcluster/jmcluster/security"
	"github.com/jmcluster/jmcluster/taskmanager"
	"github.com/jmcluster/jmcluster/testkit/tlstest"
	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// Options shape a test cluster. Zero values mean the defaults.
type Options struct {
	JMs              int           // default 3
	TMs              int           // default 0
	Slots            int           // per TM, default 4
	ReportDeadline   time.Duration // default 3s
	HeartbeatTimeout time.Duration // default 3s
	// NoGossip turns gossip off; TMs then find the leader by asking the JMs.
	NoGossip bool
	// TM edits each TaskManager's config before it starts.
	TM func(*taskmanager.Config)
	// Raft edits each replica's Raft configuration (on every start and restart).
	Raft func(*cluster.Config)
	// JobMaster edits each replica's JobMaster configuration (on every start and restart).
	JobMaster func(*jobmaster.Config)
	// JM edits each replica's whole configuration (on every start and restart), after Raft.
	JM func(*agent.JobMasterConfig)
	// LogLevel of the cluster log (default debug).
	LogLevel hclog.Level
	// Checkpoints gives every JM and TM the same checkpoint storage root (CheckpointDir, under
	// the cluster's temporary directory).
	Checkpoints bool
	// TLS turns on mutual TLS everywhere: each JM gets a jobmaster certificate of this CA
	// named its id, each TM a taskmanager one, and Conn connects with an operator certificate.
	TLS *tlstest.CA
}

// Cluster is a running test cluster.
type Cluster struct {
	T    testing.TB
	Opts Options
	Dir  string
	// CheckpointDir is the shared checkpoint storage root ("" without Options.Checkpoints).
	CheckpointDir string
	JMs           []*JM
	TMs           []*TM
	Log           hclog.Logger

	logFile *os.File
	mu      sync.Mutex
	conns   map[string]*grpc.ClientConn
	certMu  sync.Mutex
	certs   map[string]*security.TLS // by node id, when Opts.TLS is set
}

// JM is one JobMaster replica; A is nil while it is stopped.
type JM struct {
	ID, DataDir, RaftAddr, GRPCAddr string
	A                               *agent.JobMaster
}

// TM is one TaskManager; A is nil while it is stopped.
type TM struct {
	ID, WorkDir string
	A           *agent.TaskManager
	EventLog    string
}

// New starts the JobMasters (explicit peers, fixed ports so that a restarted replica comes
// back at the same Raft address), waits for an established leader with an open gate, then
// starts the TaskManagers and waits until the leader knows them all. The ports are picked free
// and bound moments later; when another socket took one in between, the cluster is started
// again on other ports (up to three times).
func New(t testing.TB, opts Options) *Cluster {
	t.Helper()
	return retryBind(t, func(tb testing.TB) *Cluster { return start(tb, opts) })
}

func start(t testing.TB, opts Options) *Cluster {
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
	c := &Cluster{T: t, Opts: opts, Dir: t.TempDir(), conns: map[string]*grpc.ClientConn{}, certs: map[string]*security.TLS{}}
	f, err := createLog(t, c.Dir)
	if err != nil {
		t.Fatal(err)
	}
	c.logFile = f
	if opts.Checkpoints {
		c.CheckpointDir = filepath.Join(c.Dir, "checkpoints")
	}
	if opts.LogLevel == hclog.NoLevel {
		opts.LogLevel = hclog.Debug
	}
	c.Log = hclog.New(&hclog.LoggerOptions{Name: "test", Level: opts.LogLevel, Output: f})
	t.Cleanup(c.close)

	ports := FreePorts(t, 2*opts.JMs)
	for i := 0; i < opts.JMs; i++ {
		id := fmt.Sprintf("jm%d", i+1)
		c.JMs = append(c.JMs, &JM{ID: id, DataDir: filepath.Join(c.Dir, id), RaftAddr: ports[2*i], GRPCAddr: ports[2*i+1]})
	}
	for _, j := range c.JMs {
		c.StartJM(j)
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

// FreePorts returns n distinct free loopback addresses, below the kernel's ephemeral range
// (internal/freeport).
func FreePorts(t testing.TB, n int) []string {
	t.Helper()
	out, err := freeport.Addrs("127.0.0.1", n)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (c *Cluster) gossipSeeds() []string {
	var out []string
	for _, j := range c.JMs {
		if j.A != nil && j.A.Gossip != nil {
			out = append(out, j.A.Gossip.Addr())
		}
	}
	for _, tm := range c.TMs {
		if tm.A != nil && tm.A.Gossip != nil {
			out = append(out, tm.A.Gossip.Addr())
		}
	}
	return out
}

// StartJM starts (or restarts, from its data directory) one replica.
func (c *Cluster) StartJM(j *JM) {
	c.T.Helper()
	cc := cluster.TestConfig()
	// The Raft timings users run, not the fast ones: tests run under -race on a loaded two-core
	// machine, where a 100 ms leader lease is lost to a scheduling hiccup and every test would
	// see spurious elections (each a reconciliation) it did not ask for.
	d := cluster.DefaultConfig()
	cc.HeartbeatTimeout, cc.ElectionTimeout, cc.LeaderLeaseTimeout = d.HeartbeatTimeout, d.ElectionTimeout, d.LeaderLeaseTimeout
	cc.ID, cc.DataDir, cc.RaftBindAddr, cc.GRPCAddr = j.ID, j.DataDir, j.RaftAddr, j.GRPCAddr
	for _, p := range c.JMs {
		cc.Peers = append(cc.Peers, cluster.Peer{ID: p.ID, RaftAddr: p.RaftAddr, GRPCAddr: p.GRPCAddr})
	}
	if c.Opts.Raft != nil {
		c.Opts.Raft(&cc)
	}
	// TMs heartbeat every 200 ms: a TM's fence (half the heartbeat timeout) must outlast a
	// heartbeat interval plus the time a follower keeps naming a dead leader (half the Raft
	// heartbeat timeout), or an ordinary failover fences it. A pool query may take 600 ms: on a
	// loaded two-core machine 300 ms lost whole checks (every member "unreachable", and the TMs
	// fenced through a JobMaster outage they should have kept running through).
	jmc := jobmaster.Config{HeartbeatInterval: 200 * time.Millisecond, HeartbeatTimeout: c.Opts.HeartbeatTimeout, TickInterval: 50 * time.Millisecond, RetryAfter: 50 * time.Millisecond,
		PoolQueryInterval: 100 * time.Millisecond, PoolQueryTimeout: 600 * time.Millisecond}
	if c.Opts.JobMaster != nil {
		c.Opts.JobMaster(&jmc)
	}
	cfg := agent.JobMasterConfig{
		Cluster: cc, GRPCAddr: j.GRPCAddr, Logger: c.Log.Named(j.ID),
		JobMaster:     jmc,
		Reconcile:     reconcile.Config{ReportDeadline: c.Opts.ReportDeadline},
		CheckpointDir: c.CheckpointDir,
	}
	if !c.Opts.NoGossip {
		g := membership.TestConfig(membership.Meta{})
		g.Join = c.gossipSeeds()
		cfg.Gossip = &g
	}
	cfg.TLS = c.TLSOf(security.RoleJobMaster, j.ID)
	if c.Opts.JM != nil {
		c.Opts.JM(&cfg)
	}
	// A replica comes back at its fixed addresses; while it was down the kernel may have lent
	// one of its ports to another socket as an ephemeral source port. Such a socket is short
	// lived, so the bind is retried for a while.
	var a *agent.JobMaster
	var err error
	WaitFor(c.T, 15*time.Second, "the addresses of "+j.ID+" free to bind", func() (bool, string) {
		a, err = agent.StartJobMaster(cfg)
		if err != nil && !errors.Is(err, syscall.EADDRINUSE) {
			c.T.Fatalf("start %s: %v", j.ID, err)
		}
		return err == nil, fmt.Sprint(err)
	})
	j.A = a
}

// KillJM stops a replica abruptly (no leadership transfer, no gossip leave).
func (c *Cluster) KillJM(j *JM) {
	if j.A != nil {
		j.A.Kill()
		j.A = nil
	}
}

// AddTM starts a TaskManager.
func (c *Cluster) AddTM(id string) *TM {
	c.T.Helper()
	tm := &TM{ID: id, WorkDir: filepath.Join(c.Dir, id), EventLog: filepath.Join(c.Dir, id+"-events.jsonl")}
	c.TMs = append(c.TMs, tm)
	c.StartTM(tm)
	return tm
}

// StartTM (re)starts a TaskManager.
func (c *Cluster) StartTM(tm *TM) {
	c.T.Helper()
	if err := os.MkdirAll(tm.WorkDir, 0o755); err != nil {
		c.T.Fatal(err)
	}
	ev, err := os.OpenFile(tm.EventLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.T.Fatal(err)
	}
	c.T.Cleanup(func() { ev.Close() })
	cfg := taskmanager.DefaultConfig()
	cfg.ID, cfg.Slots, cfg.HeartbeatInterval = tm.ID, c.Opts.Slots, 200*time.Millisecond
	cfg.OutboxBackoffMax = 200 * time.Millisecond
	cfg.FenceTimeout = c.Opts.HeartbeatTimeout / 2 // shorter than the leader's heartbeat timeout
	cfg.EventLog = ev
	cfg.WorkDir = tm.WorkDir
	cfg.CheckpointDir = c.CheckpointDir
	for _, j := range c.JMs {
		cfg.JobMasters = append(cfg.JobMasters, j.GRPCAddr)
	}
	cfg.TLS = c.TLSOf(security.RoleTaskManager, tm.ID)
	if c.Opts.TM != nil {
		c.Opts.TM(&cfg)
	}
	acfg := agent.TaskManagerConfig{TM: cfg, Logger: c.Log.Named(tm.ID)}
	if !c.Opts.NoGossip {
		g := membership.TestConfig(membership.Meta{})
		g.Join = c.gossipSeeds()
		acfg.Gossip = &g
	}
	a, err := agent.StartTaskManager(acfg)
	if err != nil {
		c.T.Fatalf("start %s: %v", tm.ID, err)
	}
	tm.A = a
}

// KillTM stops a TaskManager abruptly.
func (c *Cluster) KillTM(tm *TM) {
	if tm.A != nil {
		tm.A.Kill()
		tm.A = nil
	}
}

// Live returns the running replicas.
func (c *Cluster) Live() []*JM {
	var out []*JM
	for _, j := range c.JMs {
		if j.A != nil {
			out = append(out, j)
		}
	}
	return out
}

// Leader waits for an established leader whose gate is open and returns it.
func (c *Cluster) Leader() *JM {
	c.T.Helper()
	var got *JM
	WaitFor(c.T, 20*time.Second, "an established leader with an open gate", func() (bool, string) {
		var seen []string
		for _, j := range c.Live() {
			seen = append(seen, fmt.Sprintf("%s:%s/epoch %d/active %v/reconciling %v", j.ID, j.A.Node.State(), j.A.JM.Epoch(), j.A.JM.Active(), j.A.JM.Reconciling()))
			if j.A.JM.Active() && !j.A.JM.Reconciling() {
				got = j
				return true, ""
			}
		}
		return false, strings.Join(seen, ", ")
	})
	return got
}

// Follower returns a live replica that is not the leader.
func (c *Cluster) Follower() *JM {
	c.T.Helper()
	l := c.Leader()
	for _, j := range c.Live() {
		if j != l {
			return j
		}
	}
	c.T.Fatal("no live follower")
	return nil
}

// WaitTMs waits until the leader has n TaskManagers it may place tasks on (registered and
// current with the pool).
func (c *Cluster) WaitTMs(n int) {
	c.T.Helper()
	WaitFor(c.T, 20*time.Second, fmt.Sprintf("%d task managers registered with the leader and current with the pool", n), func() (bool, string) {
		l := c.Leader()
		u := l.A.JM.Placeable()
		return len(u) >= n, fmt.Sprintf("%d placeable: %+v; pool %v", len(u), u, l.A.State.Pool())
	})
}

// Conn returns a cached client connection to addr. It has no send limit of its own (gRPC's
// client default), so that tests can show the servers refuse oversized messages.
func (c *Cluster) Conn(addr string) *grpc.ClientConn {
	c.mu.Lock()
	defer c.mu.Unlock()
	cc := c.conns[addr]
	if cc == nil {
		var err error
		creds := grpc.WithTransportCredentials(insecure.NewCredentials())
		if sec := c.TLSOf(security.RoleOperator, "test-operator"); sec != nil {
			creds = transport.DialCredentials(sec)
		}
		cc, err = grpc.NewClient(addr, creds)
		if err != nil {
			c.T.Fatal(err)
		}
		c.conns[addr] = cc
	}
	return cc
}

// TLSOf is the certificate of the node (or client) named name with role r, made on first use
// and kept for restarts; nil without Opts.TLS.
func (c *Cluster) TLSOf(r security.Role, name string) *security.TLS {
	if c.Opts.TLS == nil {
		return nil
	}
	c.certMu.Lock()
	defer c.certMu.Unlock()
	if s := c.certs[name]; s != nil {
		return s
	}
	s := c.Opts.TLS.TLS(c.T, r, name)
	c.certs[name] = s
	return s
}

// Client returns a ClientService client for a replica.
func (c *Cluster) Client(j *JM) pb.ClientServiceClient {
	return pb.NewClientServiceClient(c.Conn(j.GRPCAddr))
}

// Submit submits a job through a follower (the write is forwarded) and returns its id.
func (c *Cluster) Submit(jg *pb.JobGraph) string {
	c.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.Client(c.Follower()).SubmitJob(ctx, &pb.SubmitJobRequest{JobGraph: jg})
	if err != nil {
		c.T.Fatalf("submit %s: %v", jg.Name, err)
	}
	return resp.JobId
}

// Job reads a job from the leader's committed state.
func (c *Cluster) Job(id string) *pb.JobRecord {
	c.T.Helper()
	rec, ok := c.Leader().A.State.Job(id)
	if !ok {
		c.T.Fatalf("job %s unknown to the leader", id)
	}
	return rec
}

// WaitJob waits until cond holds for the job as any live replica's state shows it, and returns
// that record.
func (c *Cluster) WaitJob(id, what string, timeout time.Duration, cond func(*pb.JobRecord) bool) *pb.JobRecord {
	c.T.Helper()
	var got *pb.JobRecord
	WaitFor(c.T, timeout, what, func() (bool, string) {
		last := "job not found"
		for _, j := range c.Live() {
			rec, ok := j.A.State.Job(id)
			if !ok {
				continue
			}
			if cond(rec) {
				got = rec
				return true, ""
			}
			last = j.ID + ": " + Describe(rec)
		}
		return false, last
	})
	return got
}

// WaitFor polls cond until it holds or the timeout passes; the failure shows what cond last
// reported.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		ok, seen := cond()
		if ok {
			return
		}
		last = seen
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last seen: %s", timeout, what, last)
		}
		<-time.After(20 * time.Millisecond)
	}
}
