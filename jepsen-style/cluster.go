package jepsen

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

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

// Errors of the cluster.
var (
	ErrUnknownNode = errors.New("jepsen: unknown node")
	ErrStuck       = errors.New("jepsen: process did not exit")
)

// proc is one jmnode process slot: the same flags each time it is (re)started.
type proc struct {
	node, ns string
	args     []string
	env      []string
	dir      string // working directory (the TM's work dir)
	logPath  string

	mu        sync.Mutex
	cmd       *exec.Cmd
	done      chan struct{}
	paused    bool
	lifetimes []checker.Window
}

// Cluster is the set of jmnode processes of a run, started inside their namespaces. It is the
// nemesis's Target.
type Cluster struct {
	topo   *netns.Topology
	jmnode string
	procs  map[string]*proc
	order  []string
}

// NodeDir is a node's directory; it is named after the node's namespace so every command line
// of the run carries the run's marker.
func NodeDir(runDir string, topo *netns.Topology, node string) string {
	return filepath.Join(runDir, topo.NS(node))
}

// NewCluster prepares (does not start) three JMs and three TMs.
func NewCluster(topo *netns.Topology, jmnode, runDir string, env []string, reportDeadline time.Duration) (*Cluster, error) {
	c := &Cluster{topo: topo, jmnode: jmnode, procs: map[string]*proc{}}
	jms, tms := JMs(), TMs()
	join := func(port int, nodes []string, except string) string {
		var out []string
		for _, n := range nodes {
			if n != except {
				out = append(out, fmt.Sprintf("%s:%d", topo.IP(n), port))
			}
		}
		return strings.Join(out, ",")
	}
	for _, n := range append(append([]string(nil), jms...), tms...) {
		dir := NodeDir(runDir, topo, n)
		work := filepath.Join(dir, "work")
		if err := os.MkdirAll(work, 0o755); err != nil {
			return nil, err
		}
		ip := topo.IP(n)
		addr := func(port int) string { return fmt.Sprintf("%s:%d", ip, port) }
		var args []string
		if strings.HasPrefix(n, "jm") {
			args = []string{"jobmaster", "--id", n, "--data-dir", filepath.Join(dir, "data"),
				"--raft-addr", addr(PortRaft), "--grpc-addr", addr(PortGRPC), "--http-addr", addr(PortHTTP),
				"--gossip-addr", addr(PortGossip), "--gossip-join", join(PortGossip, jms, n),
				"--bootstrap-expect", "3", "--join", join(PortGRPC, jms, n),
				"--report-deadline", reportDeadline.String()}
		} else {
			args = []string{"taskmanager", "--id", n, "--slots", "6",
				"--grpc-addr", addr(PortTMGRPC), "--data-addr", addr(PortTMData),
				"--gossip-addr", addr(PortGossip), "--gossip-join", join(PortGossip, jms, ""),
				"--jm", join(PortGRPC, jms, ""), "--work-dir", work, "--event-log", EventLogPath(runDir, topo, n),
				// Below the JMs' report deadline and heartbeat timeout (10 s), and well above a
				// Raft election (followers keep naming a vanished leader until they notice it).
				"--fence-timeout", (reportDeadline / 2).String()}
		}
		c.procs[n] = &proc{node: n, ns: topo.NS(n), args: args, env: env, dir: work,
			logPath: filepath.Join(runDir, n+".log")}
		c.order = append(c.order, n)
	}
	return c, nil
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
func (c *Cluster) Start() error {
	for _, n := range c.order {
		if err := c.start(c.procs[n]); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) start(p *proc) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "=== %s start %s\n", time.Now().Format(time.RFC3339Nano), p.node)
	// `ip netns exec` enters the namespace and execs jmnode, so the pid is jmnode's own.
	cmd := exec.Command("ip", append([]string{"netns", "exec", p.ns, c.jmnode}, p.args...)...)
	cmd.Dir = p.dir
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("jepsen: start %s: %w", p.node, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.paused = cmd, done, false
	p.lifetimes = append(p.lifetimes, checker.Window{Start: time.Now()})
	idx := len(p.lifetimes) - 1
	go func() {
		_ = cmd.Wait()
		logf.Close()
		p.mu.Lock()
		p.lifetimes[idx].End = time.Now()
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

func (c *Cluster) proc(node string) (*proc, error) {
	p, ok := c.procs[node]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownNode, node)
	}
	return p, nil
}

func (p *proc) running() (*exec.Cmd, chan struct{}, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return nil, nil, false
	}
	select {
	case <-p.done:
		return nil, nil, false
	default:
		return p.cmd, p.done, true
	}
}

// Kill sends SIGKILL and waits for the process to exit.
func (c *Cluster) Kill(node string) error {
	p, err := c.proc(node)
	if err != nil {
		return err
	}
	cmd, done, ok := p.running()
	if !ok {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%w: %s after SIGKILL", ErrStuck, node)
	}
}

// Signal sends sig to a node's process (SIGSTOP and SIGCONT are tracked).
func (c *Cluster) Signal(node string, sig syscall.Signal) error {
	p, err := c.proc(node)
	if err != nil {
		return err
	}
	cmd, _, ok := p.running()
	if !ok {
		return fmt.Errorf("jepsen: signal %s: %s is not running", sig, node)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		return err
	}
	p.mu.Lock()
	switch sig {
	case syscall.SIGSTOP:
		p.paused = true
	case syscall.SIGCONT:
		p.paused = false
	}
	p.mu.Unlock()
	return nil
}

// Revive resumes a paused process and restarts a dead one.
func (c *Cluster) Revive(_ context.Context, node string) error {
	p, err := c.proc(node)
	if err != nil {
		return err
	}
	if _, _, ok := p.running(); ok {
		p.mu.Lock()
		paused := p.paused
		p.mu.Unlock()
		if paused {
			return c.Signal(node, syscall.SIGCONT)
		}
		return nil
	}
	return c.start(p)
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
func (c *Cluster) Stop(grace time.Duration) {
	var wg sync.WaitGroup
	for _, n := range c.order {
		p := c.procs[n]
		cmd, done, ok := p.running()
		if !ok {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = cmd.Process.Signal(syscall.SIGCONT)
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(grace):
				_ = cmd.Process.Signal(syscall.SIGKILL)
				<-done
			}
		}()
	}
	wg.Wait()
}

// Lifetimes returns every process lifetime per node.
func (c *Cluster) Lifetimes() map[string][]checker.Window {
	out := map[string][]checker.Window{}
	for n, p := range c.procs {
		p.mu.Lock()
		out[n] = append([]checker.Window(nil), p.lifetimes...)
		p.mu.Unlock()
	}
	return out
}

// Down lists nodes whose process is not running, sorted.
func (c *Cluster) Down() []string {
	var out []string
	for n, p := range c.procs {
		if _, _, ok := p.running(); !ok {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}
