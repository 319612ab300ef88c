// Package proccluster runs jmnode JobMasters and TaskManagers as real processes: `jmnode
// demo`, the process tests of cmd/jmnode and the fault suite (jepsen-style) share it. A Proc
// is one process slot with the same command line each time it is (re)started; one goroutine
// per start calls Wait and closes the lifetime's channel, which is the only way anything here
// learns that a process exited (nobody reads exec.Cmd.ProcessState).
package proccluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Role of a node.
type Role string

// The two process commands of jmnode.
const (
	JobMaster   Role = "jobmaster"
	TaskManager Role = "taskmanager"
)

// Errors of the harness.
var (
	ErrUnknownNode = errors.New("proccluster: unknown node")
	ErrNotRunning  = errors.New("proccluster: process is not running")
	ErrRunning     = errors.New("proccluster: process is already running")
	ErrStuck       = errors.New("proccluster: process did not exit")
)

// Addrs are a node's listen addresses (host:port). A JobMaster listens on Raft, GRPC, HTTP and
// Gossip; a TaskManager on GRPC, Data and Gossip.
type Addrs struct {
	Raft, GRPC, HTTP, Gossip, Data string
}

// Node describes one process slot.
type Node struct {
	Name  string
	Role  Role
	Addrs Addrs
	// DataDir is a JobMaster's --data-dir (Raft log, snapshots).
	DataDir string
	// WorkDir is a TaskManager's --work-dir and EventLog its --event-log.
	WorkDir, EventLog string
	// Slots of a TaskManager (--slots; 0 leaves jmnode's default).
	Slots int
	// LogPath receives the process's stdout and stderr, appended across restarts.
	LogPath string
	// Dir is the process's working directory (created when missing); empty inherits ours.
	Dir string
	// Flags are added to the generated command line.
	Flags []string
	// Env is added to our environment.
	Env []string
	// Wrap is a command prefix: jmnode runs as Wrap... BIN ARGS (e.g. ip netns exec NS).
	Wrap []string
	// Bin, when set, is the jmnode binary of this node instead of the cluster's (a
	// mixed-version cluster).
	Bin string
}

// Lifetime is one run of a process: from its start to its exit (zero while it runs).
type Lifetime struct {
	Start, End time.Time
}

// Proc is one jmnode process slot.
type Proc struct {
	Node
	bin  string
	args []string

	mu        sync.Mutex
	cmd       *exec.Cmd
	done      chan struct{} // closed when the current run has been waited for
	paused    bool
	lifetimes []Lifetime
}

// Cluster is a set of process slots: the JobMasters and the TaskManagers, in the order given.
type Cluster struct {
	Bin string
	JMs []*Proc
	TMs []*Proc
}

// New prepares (does not start) a cluster of nodes running bin. Every JobMaster gets the other
// JobMasters as --join and --gossip-join and bootstraps once it sees all of them; every
// TaskManager gets every JobMaster as --jm and --gossip-join.
func New(bin string, nodes []Node) (*Cluster, error) {
	c := &Cluster{Bin: bin}
	var jms []Node
	seen := map[string]bool{}
	for _, n := range nodes {
		if n.Name == "" || seen[n.Name] {
			return nil, fmt.Errorf("proccluster: node name %q empty or repeated", n.Name)
		}
		seen[n.Name] = true
		if n.Role == JobMaster {
			jms = append(jms, n)
		}
	}
	others := func(except string, addr func(Addrs) string) string {
		var out []string
		for _, j := range jms {
			if j.Name != except {
				out = append(out, addr(j.Addrs))
			}
		}
		return strings.Join(out, ",")
	}
	grpcOf := func(a Addrs) string { return a.GRPC }
	gossipOf := func(a Addrs) string { return a.Gossip }
	for _, n := range nodes {
		a := n.Addrs
		var args []string
		switch n.Role {
		case JobMaster:
			args = []string{"jobmaster", "--id", n.Name, "--data-dir", n.DataDir,
				"--raft-addr", a.Raft, "--grpc-addr", a.GRPC, "--http-addr", a.HTTP,
				"--gossip-addr", a.Gossip, "--gossip-join", others(n.Name, gossipOf),
				"--bootstrap-expect", fmt.Sprint(len(jms)), "--join", others(n.Name, grpcOf)}
		case TaskManager:
			args = []string{"taskmanager", "--id", n.Name, "--grpc-addr", a.GRPC, "--data-addr", a.Data,
				"--gossip-addr", a.Gossip, "--gossip-join", others("", gossipOf),
				"--jm", others("", grpcOf), "--work-dir", n.WorkDir, "--event-log", n.EventLog}
			if n.Slots > 0 {
				args = append(args, "--slots", fmt.Sprint(n.Slots))
			}
		default:
			return nil, fmt.Errorf("proccluster: node %s: role %q", n.Name, n.Role)
		}
		p := &Proc{Node: n, bin: bin, args: append(args, n.Flags...)}
		if n.Bin != "" {
			p.bin = n.Bin
		}
		if n.Role == JobMaster {
			c.JMs = append(c.JMs, p)
		} else {
			c.TMs = append(c.TMs, p)
		}
	}
	return c, nil
}

// AddJobMaster adds (does not start) a JobMaster slot that joins the running cluster instead
// of bootstrapping: --join and --gossip-join name the JobMasters already in c (running or
// not), and it asks the leader to add it as a voter. dir holds its data, under dir/NAME, and
// its log, dir/NAME.log; flags are added to its command line.
func (c *Cluster) AddJobMaster(name, dir string, flags ...string) (*Proc, error) {
	if c.Proc(name) != nil {
		return nil, fmt.Errorf("proccluster: node name %q repeated", name)
	}
	ports, err := FreePorts(4)
	if err != nil {
		return nil, err
	}
	var join, gossip []string
	for _, p := range c.JMs {
		join, gossip = append(join, p.Addrs.GRPC), append(gossip, p.Addrs.Gossip)
	}
	n := Node{Name: name, Role: JobMaster,
		Addrs:   Addrs{Raft: ports[0], GRPC: ports[1], HTTP: ports[2], Gossip: ports[3]},
		DataDir: filepath.Join(dir, name), LogPath: filepath.Join(dir, name+".log"), Flags: flags}
	args := []string{"jobmaster", "--id", n.Name, "--data-dir", n.DataDir,
		"--raft-addr", n.Addrs.Raft, "--grpc-addr", n.Addrs.GRPC, "--http-addr", n.Addrs.HTTP,
		"--gossip-addr", n.Addrs.Gossip, "--gossip-join", strings.Join(gossip, ","), "--join", strings.Join(join, ",")}
	p := &Proc{Node: n, bin: c.Bin, args: append(args, flags...)}
	c.JMs = append(c.JMs, p)
	return p, nil
}

// Procs lists every process slot, JobMasters first.
func (c *Cluster) Procs() []*Proc {
	return append(append([]*Proc(nil), c.JMs...), c.TMs...)
}

// Proc returns the slot named name, or nil.
func (c *Cluster) Proc(name string) *Proc {
	for _, p := range c.Procs() {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Get returns the slot named name, or ErrUnknownNode.
func (c *Cluster) Get(name string) (*Proc, error) {
	if p := c.Proc(name); p != nil {
		return p, nil
	}
	return nil, fmt.Errorf("%w: %q", ErrUnknownNode, name)
}

// JoinAddrs are the JobMasters' gRPC addresses, comma-separated (what a client dials).
func (c *Cluster) JoinAddrs() string {
	var out []string
	for _, p := range c.JMs {
		out = append(out, p.Addrs.GRPC)
	}
	return strings.Join(out, ",")
}

// Start starts every process that is not running, JobMasters first.
func (c *Cluster) Start() error {
	for _, p := range c.Procs() {
		if p.Running() {
			continue
		}
		if err := p.Start(); err != nil {
			return err
		}
	}
	return nil
}

// Stop ends every running process at once (SIGCONT, SIGTERM, SIGKILL after grace) and waits
// for all of them.
func (c *Cluster) Stop(grace time.Duration) {
	var wg sync.WaitGroup
	for _, p := range c.Procs() {
		wg.Add(1)
		go func() { defer wg.Done(); p.Stop(grace) }()
	}
	wg.Wait()
}

// Down lists the slots whose process is not running, in the cluster's order.
func (c *Cluster) Down() []string {
	var out []string
	for _, p := range c.Procs() {
		if !p.Running() {
			out = append(out, p.Name)
		}
	}
	return out
}

// Args is the command line after the binary.
func (p *Proc) Args() []string { return append([]string(nil), p.args...) }

// Start starts the process (ErrRunning if it runs). Its output is appended to LogPath after a
// line "=== TIME start NAME".
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.runningLocked() {
		return fmt.Errorf("%w: %s", ErrRunning, p.Name)
	}
	for _, d := range []string{p.Dir, filepath.Dir(p.LogPath)} {
		if d != "" && d != "." {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
	}
	logf, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "=== %s start %s\n", time.Now().Format(time.RFC3339Nano), p.Name)
	argv := append(append(append([]string(nil), p.Wrap...), p.bin), p.args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = p.Dir
	if len(p.Env) > 0 {
		cmd.Env = append(os.Environ(), p.Env...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("proccluster: start %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.paused = cmd, done, false
	p.lifetimes = append(p.lifetimes, Lifetime{Start: time.Now()})
	idx := len(p.lifetimes) - 1
	// The one goroutine that waits for this run.
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

func (p *Proc) runningLocked() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// current returns the running process and its exit channel.
func (p *Proc) current() (*os.Process, chan struct{}, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.runningLocked() {
		return nil, nil, false
	}
	return p.cmd.Process, p.done, true
}

// Running reports whether the process was started and has not exited (a paused one runs).
func (p *Proc) Running() bool {
	_, _, ok := p.current()
	return ok
}

// Pid of the last run (0 if never started).
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Exited is closed when the current (or last) run has exited; nil if never started.
func (p *Proc) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// Paused reports whether the process was stopped with SIGSTOP and not continued since.
func (p *Proc) Paused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused && p.runningLocked()
}

// Signal sends sig to the running process; SIGSTOP and SIGCONT are tracked (Paused).
func (p *Proc) Signal(sig syscall.Signal) error {
	proc, _, ok := p.current()
	if !ok {
		return fmt.Errorf("%w: %s (signal %s)", ErrNotRunning, p.Name, sig)
	}
	if err := proc.Signal(sig); err != nil {
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

// Kill sends SIGKILL and waits up to limit for the exit (a process not running is left alone).
func (p *Proc) Kill(limit time.Duration) error {
	proc, done, ok := p.current()
	if !ok {
		return nil
	}
	_ = proc.Signal(syscall.SIGKILL)
	select {
	case <-done:
		return nil
	case <-time.After(limit):
		return fmt.Errorf("%w: %s after SIGKILL", ErrStuck, p.Name)
	}
}

// Stop ends the process: SIGCONT (a paused process could not act on SIGTERM), SIGTERM, and
// SIGKILL when it has not exited after grace; it returns once the process has exited.
func (p *Proc) Stop(grace time.Duration) {
	proc, done, ok := p.current()
	if !ok {
		return
	}
	_ = proc.Signal(syscall.SIGCONT)
	_ = proc.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		_ = proc.Signal(syscall.SIGKILL)
		<-done
	}
}

// SetBin makes the next Start run bin (a rolling upgrade: stop the process, set the new
// build, start it on the same data).
func (p *Proc) SetBin(bin string) {
	p.mu.Lock()
	p.bin = bin
	p.mu.Unlock()
}

// Revive makes the process run again: SIGCONT when paused, a restart with the same command
// line (and so the same data) when not running; a running process is left alone.
func (p *Proc) Revive() error {
	if p.Running() {
		if p.Paused() {
			return p.Signal(syscall.SIGCONT)
		}
		return nil
	}
	return p.Start()
}

// Lifetimes lists every run so far, oldest first.
func (p *Proc) Lifetimes() []Lifetime {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Lifetime(nil), p.lifetimes...)
}

// LogTail returns the last n lines of the process's log.
func (p *Proc) LogTail(n int) string {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
