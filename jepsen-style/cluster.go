package jepsen

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jmcluster/jmcluster/internal/failpoint"
	"github.com/jmcluster/jmcluster/internal/proccluster"
	"github.com/jmcluster/jmcluster/jepsen-style/checker"
	"github.com/jmcluster/jmcluster/jepsen-style/netns"
	"github.com/jmcluster/jmcluster/security"
)

// Ports every node listens on, on its own address.
const (
	PortRaft   = 7000
	PortGRPC   = 7100
	PortHTTP   = 7200
	PortGossip = 7300
	PortTMGRPC = 7400
	PortTMData = 7500
	// PortPprof is every JM's net/http/pprof (--pprof-addr): the stall watch's goroutine dumps.
	PortPprof = 7600
)

// TMHeartbeatInterval is the interval the JMs tell TaskManagers to heartbeat at: jmnode's
// default --tm-heartbeat-interval, which the harness keeps (restart-detected's bound is half of it).
const TMHeartbeatInterval = time.Second

// Errors of the cluster: the harness's own.
var (
	ErrUnknownNode = proccluster.ErrUnknownNode
	ErrStuck       = proccluster.ErrStuck
)

// Cluster is the set of jmnode processes of a run (internal/proccluster, the harness the demo
// and cmd/jmnode's process tests use too), each started inside its namespace through `ip netns
// exec`, which execs jmnode so the pid is jmnode's own. It is the nemesis's Target.
type Cluster struct {
	topo   *netns.Topology
	procs  *proccluster.Cluster
	runDir string
	// failpoints is the run's own setting, which a node's failpoints file adds to.
	failpoints string
	mounts     map[string]string // JM -> its data disk (tmpfs), when the scenario needs one
	creds      *credentials      // TLS mode's files; nil: plaintext
	jmnode     string            // the binary, for operator commands
	memb       *membershipState  // the membership change's record (cluster_membership.go); nil in other scenarios
}

// ClusterOptions are the choices a scenario makes about the processes.
type ClusterOptions struct {
	// Failpoints is the run's JMNODE_FAILPOINTS ("" for a correct build).
	Failpoints string
	// DataDisk mounts a tmpfs of DataDiskSize as every JM's data directory, so a fault can
	// fill it (disk-full).
	DataDisk bool
	// TLS runs every process with mutual TLS and encrypted gossip, with credentials the
	// harness makes in <run>/tls (tls.go).
	TLS bool
	// JMFlags are extra flags of every JM (a scenario's: Scenario.storeFlags).
	JMFlags []string
}

// DataDiskSize is the size of a JM's tmpfs data disk: far more than a run writes, so it fills
// only when a fault fills it.
const DataDiskSize = "256m"

// failpointsFile is where a node's JMNODE_FAILPOINTS_FILE lives.
func failpointsFile(runDir string, topo *netns.Topology, node string) string {
	return filepath.Join(NodeDir(runDir, topo, node), "failpoints")
}

// NodeDir is a node's directory; it is named after the node's namespace so every command line
// of the run carries the run's marker.
func NodeDir(runDir string, topo *netns.Topology, node string) string {
	return filepath.Join(runDir, topo.NS(node))
}

// NewCluster prepares (does not start) the topology's JMs and TMs.
// With opts.DataDisk the JMs' data disks are mounted here already: Close unmounts them.
func NewCluster(topo *netns.Topology, jmnode, runDir string, opts ClusterOptions, reportDeadline time.Duration) (*Cluster, error) {
	var nodes []proccluster.Node
	c := &Cluster{topo: topo, runDir: runDir, failpoints: opts.Failpoints, mounts: map[string]string{}, jmnode: jmnode}
	if opts.TLS {
		var err error
		if c.creds, err = makeCredentials(runDir, topo); err != nil {
			return nil, err
		}
	}
	// One checkpoint storage root for every JM and TM (one host): a region restarted on
	// another TM restores the state its first TM wrote.
	checkpoints := CheckpointDir(runDir)
	if err := os.MkdirAll(checkpoints, 0o755); err != nil {
		return nil, err
	}
	for _, n := range append(topo.JMs(), topo.TMs()...) {
		dir := NodeDir(runDir, topo, n)
		work := filepath.Join(dir, "work")
		if err := os.MkdirAll(work, 0o755); err != nil {
			c.Close()
			return nil, err
		}
		if opts.DataDisk && strings.HasPrefix(n, "jm") {
			data := filepath.Join(dir, "data")
			if err := mountDataDisk(data); err != nil {
				c.Close()
				return nil, err
			}
			c.mounts[n] = data
		}
		env := []string{"JMNODE_FAILPOINTS_FILE=" + failpointsFile(runDir, topo, n)}
		if opts.Failpoints != "" {
			env = append(env, failpoint.EnvVar+"="+opts.Failpoints)
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
				"--retain-jobs", "1000000", "--retain-job-age", "24h", "--checkpoint-dir", checkpoints,
				"--pprof-addr", addr(PortPprof)}
			node.Flags = append(node.Flags, opts.JMFlags...)
		} else {
			node.Role, node.Slots = proccluster.TaskManager, 6
			node.Addrs = proccluster.Addrs{GRPC: addr(PortTMGRPC), Data: addr(PortTMData), Gossip: addr(PortGossip)}
			node.WorkDir, node.EventLog = work, EventLogPath(runDir, topo, n)
			// Below the JMs' report deadline and heartbeat timeout (10 s), and well above a
			// Raft election (followers keep naming a vanished leader until they notice it).
			node.Flags = []string{"--fence-timeout", (reportDeadline / 2).String(), "--checkpoint-dir", checkpoints}
		}
		if c.creds != nil {
			role := security.RoleTaskManager
			if node.Role == proccluster.JobMaster {
				role = security.RoleJobMaster
			}
			node.Flags = append(node.Flags, c.creds.flags(role, n)...)
		}
		nodes = append(nodes, node)
	}
	procs, err := proccluster.New(jmnode, nodes)
	if err != nil {
		c.Close()
		return nil, err
	}
	c.procs = procs
	return c, nil
}

// TransferLeadership asks node (the leader) to hand leadership over, with the operator CLI run
// inside the node's namespace (the operator certificate in TLS mode).
func (c *Cluster) TransferLeadership(ctx context.Context, node string) error {
	args := []string{"raft", "transfer-leadership", "--addr", fmt.Sprintf("%s:%d", c.topo.IP(node), PortGRPC), "--timeout", "5s"}
	if c.creds != nil {
		f := c.creds.files(security.RoleOperator, ClientCertName)
		args = append(args, "--tls-ca", f.CA, "--tls-cert", f.Cert, "--tls-key", f.Key)
	}
	bin, err := filepath.Abs(c.jmnode)
	if err != nil {
		return err
	}
	out, err := c.Exec(ctx, node, bin, args...)
	if err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(out))
	}
	return nil
}

// ClientTLS is the clients' operator TLS in TLS mode, nil in plaintext.
func (c *Cluster) ClientTLS() (*security.TLS, error) {
	if c.creds == nil {
		return nil, nil
	}
	return c.creds.client()
}

func mountDataDisk(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+DataDiskSize+",mode=0755"); err != nil {
		return fmt.Errorf("jepsen: mount a tmpfs data disk on %s: %w", dir, err)
	}
	return nil
}

// Close unmounts the JMs' data disks (after Stop: no process may still write to them).
func (c *Cluster) Close() {
	for _, dir := range c.mounts {
		_ = syscall.Unmount(dir, syscall.MNT_DETACH)
	}
	c.mounts = map[string]string{}
}

// SetFailpoints gives a running node the run's failpoints plus extra ("" for the run's own);
// the node reads its failpoints file within 100 ms.
func (c *Cluster) SetFailpoints(node, extra string) error {
	if _, ok := c.topo.Node(node); !ok {
		return fmt.Errorf("%w: %q", ErrUnknownNode, node)
	}
	path := failpointsFile(c.runDir, c.topo, node)
	if extra == "" {
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			return err
		}
		return nil
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(extra+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// fillerName is the file that fills a JM's data disk.
const fillerName = "disk-full.filler"

// FillDisk writes a file into a JM's data disk until the disk has no byte left.
func (c *Cluster) FillDisk(node string) error {
	dir, ok := c.mounts[node]
	if !ok {
		return fmt.Errorf("jepsen: %s has no data disk of its own to fill (the scenario mounts none)", node)
	}
	f, err := os.OpenFile(filepath.Join(dir, fillerName), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, size := range []int{1 << 20, 4 << 10, 1} {
		buf := make([]byte, size)
		for {
			if _, err := f.Write(buf); err != nil {
				if errors.Is(err, syscall.ENOSPC) {
					break
				}
				return err
			}
		}
	}
	return nil
}

// FreeDisk removes the filler from a JM's data disk (nothing when it has none).
func (c *Cluster) FreeDisk(node string) error {
	dir, ok := c.mounts[node]
	if !ok {
		return nil
	}
	if err := os.Remove(filepath.Join(dir, fillerName)); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

// CheckpointDir is the run's checkpoint storage root, shared by every JM and TM.
func CheckpointDir(runDir string) string { return filepath.Join(runDir, "checkpoints") }

// EventLogPath is where a TM writes its task event log.
func EventLogPath(runDir string, topo *netns.Topology, tm string) string {
	return filepath.Join(NodeDir(runDir, topo, tm), "events.jsonl")
}

// JMs names the JobMasters of every run.
func JMs() []string { return []string{"jm1", "jm2", "jm3"} }

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

// Stop ends every process: SIGCONT, SIGTERM, then SIGKILL after grace. The TMs stop first,
// together, while a leader still takes their last reports; stopped beside the JMs, a TM waits
// its whole shutdown timeout to deliver its tasks' CANCELED states to a leader that is gone
// (SIGKILL at grace: five seconds of every run).
func (c *Cluster) Stop(grace time.Duration) {
	stopAll := func(names []string) {
		var wg sync.WaitGroup
		for _, name := range names {
			if p := c.procs.Proc(name); p != nil {
				wg.Go(func() { p.Stop(grace) })
			}
		}
		wg.Wait()
	}
	stopAll(c.topo.TMs())
	c.procs.Stop(grace)
}

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
