package jepsen

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/jmcluster/jmcluster/internal/proccluster"
	"github.com/jmcluster/jmcluster/jepsen-style/checker"
	"github.com/jmcluster/jmcluster/jepsen-style/netns"
)

// Ports every node listens on, on its own address.
const (
	PortRaft   = 7000
	PortGRPC   = 7100
	PortHTTP   = 7200
	PortGossip = 7300
	PortTMGRPC = 7400
	PortTMData = 7500
)

// Errors of the cluster: the harness's own.
var (
	ErrUnknownNode = proccluster.ErrUnknownNode
	ErrStuck       = proccluster.ErrStuck
)

// Cluster is the set of jmnode processes of a run (internal/proccluster, the harness the demo
// and cmd/jmnode's process tests use too), each started inside its namespace through `ip netns
// exec`, which execs jmnode so the pid is jmnode's own. It is the nemesis's Target.
type Cluster struct {
	topo  *netns.Topology
	procs *proccluster.Cluster
}

// NodeDir is a node's directory; it is named after the node's namespace so every command line
// of the run carries the run's marker.
func NodeDir(runDir string, topo *netns.Topology, node string) string {
	return filepath.Join(runDir, topo.NS(node))
}

// NewCluster prepares (does not start) three JMs and three TMs.
func NewCluster(topo *netns.Topology, jmnode, runDir string, env []string, reportDeadline time.Duration) (*Cluster, error) {
	var nodes []proccluster.Node
	for _, n := range append(JMs(), TMs()...) {
		dir := NodeDir(runDir, topo, n)
		work := filepath.Join(dir, "work")
		if err := os.MkdirAll(work, 0o755); err != nil {
			return nil, err
		}
		ip := topo.IP(n)
		addr := func(port int) string { return fmt.Sprintf("%s:%d", ip, port) }
		node := proccluster.Node{Name: n, Dir: work, Env: env, LogPath: filepath.Join(runDir, n+".log"),
			Wrap: []string{"ip", "netns", "exec", topo.NS(n)}}
		if strings.HasPrefix(n, "jm") {
			node.Role, node.DataDir = proccluster.JobMaster, filepath.Join(dir, "data")
			node.Addrs = proccluster.Addrs{Raft: addr(PortRaft), GRPC: addr(PortGRPC), HTTP: addr(PortHTTP), Gossip: addr(PortGossip)}
			// Every terminal job is kept for the run: the no-lost-submissions and linearizable
			// checkers read each acknowledged job back at the end, and the default retention
			// (100 terminal jobs) removed hundreds of them in a busy run, which they counted lost.
			node.Flags = []string{"--report-deadline", reportDeadline.String(), "--fence-timeout", (reportDeadline / 2).String(),
				"--retain-jobs", "1000000", "--retain-job-age", "24h"}
		} else {
			node.Role, node.Slots = proccluster.TaskManager, 6
			node.Addrs = proccluster.Addrs{GRPC: addr(PortTMGRPC), Data: addr(PortTMData), Gossip: addr(PortGossip)}
			node.WorkDir, node.EventLog = work, EventLogPath(runDir, topo, n)
			// Below the JMs' report deadline and heartbeat timeout (10 s), and well above a
			// Raft election (followers keep naming a vanished leader until they notice it).
			node.Flags = []string{"--fence-timeout", (reportDeadline / 2).String()}
		}
		nodes = append(nodes, node)
	}
	procs, err := proccluster.New(jmnode, nodes)
	if err != nil {
		return nil, err
	}
	return &Cluster{topo: topo, procs: procs}, nil
}

// EventLogPath is where a TM writes its task event log.
func EventLogPath(runDir string, topo *netns.Topology, tm string) string {
	return filepath.Join(NodeDir(runDir, topo, tm), "events.jsonl")
}

// JMs names the JobMasters; TMs the TaskManagers; ClientNode the client namespace.
func JMs() []string { return []string{"jm1", "jm2", "jm3"} }

// TMs names the TaskManagers.
func TMs() []string { return []string{"tm1", "tm2", "tm3"} }

// ClientNode is the node the clients run from.
const ClientNode = "cl"

// Start starts every process, JMs first.
func (c *Cluster) Start() error { return c.procs.Start() }

func (c *Cluster) proc(node string) (*proccluster.Proc, error) { return c.procs.Get(node) }

// Kill sends SIGKILL and waits for the process to exit.
func (c *Cluster) Kill(node string) error {
	p, err := c.proc(node)
	if err != nil {
		return err
	}
	return p.Kill(10 * time.Second)
}

// Signal sends sig to a node's process (SIGSTOP and SIGCONT are tracked).
func (c *Cluster) Signal(node string, sig syscall.Signal) error {
	p, err := c.proc(node)
	if err != nil {
		return err
	}
	return p.Signal(sig)
}

// Revive resumes a paused process and restarts a dead one.
func (c *Cluster) Revive(_ context.Context, node string) error {
	p, err := c.proc(node)
	if err != nil {
		return err
	}
	return p.Revive()
}

// Exec runs a command inside a node's namespace.
func (c *Cluster) Exec(ctx context.Context, node, name string, args ...string) (string, error) {
	if _, ok := c.topo.Node(node); !ok {
		return "", fmt.Errorf("%w: %q", ErrUnknownNode, node)
	}
	return netns.Exec(ctx, c.topo.NS(node), name, args...)
}

// IP returns a node's address.
func (c *Cluster) IP(node string) string { return c.topo.IP(node) }

// Stop ends every process: SIGCONT, SIGTERM, then SIGKILL after grace.
func (c *Cluster) Stop(grace time.Duration) { c.procs.Stop(grace) }

// Lifetimes returns every process lifetime per node.
func (c *Cluster) Lifetimes() map[string][]checker.Window {
	out := map[string][]checker.Window{}
	for _, p := range c.procs.Procs() {
		var ws []checker.Window
		for _, l := range p.Lifetimes() {
			ws = append(ws, checker.Window{Start: l.Start, End: l.End})
		}
		out[p.Name] = ws
	}
	return out
}

// Down lists nodes whose process is not running, sorted.
func (c *Cluster) Down() []string {
	out := c.procs.Down()
	sort.Strings(out)
	return out
}
