package nemesis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
)

// Target is the cluster the nemesis acts on. Node names are those of the View.
type Target interface {
	// Kill sends SIGKILL to the node's process and waits for it to exit.
	Kill(node string) error
	// Signal sends sig to the node's process.
	Signal(node string, sig syscall.Signal) error
	// Revive makes the node's process run again: SIGCONT when stopped, a restart with the same
	// flags and data when it is not running. A running node is left alone.
	Revive(ctx context.Context, node string) error
	// Exec runs a command inside the node's network namespace.
	Exec(ctx context.Context, node, name string, args ...string) (string, error)
}

// FailpointSetter is implemented by targets that can change a running JM's failpoints (a slow
// disk): extra is added to the run's own failpoints; "" returns to them.
type FailpointSetter interface {
	SetFailpoints(node, extra string) error
}

// DiskFiller is implemented by targets whose JMs keep their data on a disk of their own that can
// be filled (FillDisk) and freed again (FreeDisk).
type DiskFiller interface {
	FillDisk(node string) error
	FreeDisk(node string) error
}

// LeaderTransferer is implemented by targets whose leader can be asked to hand leadership over.
type LeaderTransferer interface {
	TransferLeadership(ctx context.Context, node string) error
}

// ErrUnsupportedFault: the target lacks what a fault kind needs.
var ErrUnsupportedFault = errors.New("nemesis: the target cannot inject this fault")

// Executor applies and heals resolved faults on a Target.
type Executor struct {
	T   Target
	Dev string // interface inside node namespaces (eth0)
	// NetemAvailable makes delay and loss a tc netem qdisc on Dev. When false (the suite's
	// choice, the same on every kernel, with or without sch_netem) they are made in user space:
	// DelayChain sends the packets arriving from the node to netdelay queues that hold or drop
	// them (netem on the node's egress, held at its receivers).
	NetemAvailable bool
	// NetNS names a node's network namespace; the user-space queues are opened inside them.
	NetNS func(node string) string
	// Logf, when set, receives each queue's counters when its fault is healed.
	Logf func(format string, args ...any)

	mu     sync.Mutex
	nodes  []string // every node Prepare set up: the receivers of a delayed node's packets
	queues []*held  // the user-space queues of the delay or loss faults that are on
}

// Prepare creates the nemesis chains (Chain, DelayChain) in every node namespace.
func (e *Executor) Prepare(ctx context.Context, nodes []string) error {
	e.nodes = append([]string(nil), nodes...)
	for _, n := range nodes {
		for _, args := range append(PrepareArgs(), DelayPrepareArgs(e.Dev)...) {
			if _, err := e.T.Exec(ctx, n, "iptables", args...); err != nil {
				return err
			}
		}
	}
	return nil
}

// Apply starts a resolved fault.
func (e *Executor) Apply(ctx context.Context, a Action) error {
	for _, n := range a.Kill {
		if err := e.T.Kill(n); err != nil {
			return err
		}
	}
	for _, n := range a.Pause {
		if err := e.T.Signal(n, syscall.SIGSTOP); err != nil {
			return err
		}
	}
	if err := e.applyGrudge(ctx, a.Grudge); err != nil {
		return err
	}
	for _, n := range sortedNetem(a.Netem) {
		if err := e.applyNetem(ctx, n, a.Netem[n], a.Fault.Pick); err != nil {
			return err
		}
	}
	if len(a.Failpoints) > 0 {
		fs, ok := e.T.(FailpointSetter)
		if !ok {
			return fmt.Errorf("%w: failpoints", ErrUnsupportedFault)
		}
		for _, n := range sortedKeysOf(a.Failpoints) {
			if err := fs.SetFailpoints(n, a.Failpoints[n]); err != nil {
				return err
			}
		}
	}
	if a.Transfer != "" {
		lt, ok := e.T.(LeaderTransferer)
		if !ok {
			return fmt.Errorf("%w: transfer leadership", ErrUnsupportedFault)
		}
		// A transfer the leader could not make (it lost leadership meanwhile, the target was
		// not up to date in time) is a fault that did not happen, not a failed run.
		if err := lt.TransferLeadership(ctx, a.Transfer); err != nil && e.Logf != nil {
			e.Logf("transfer-leader: %s did not hand leadership over: %v", a.Transfer, err)
		}
	}
	if err := e.applyThrottle(a); err != nil {
		return err
	}
	if len(a.FillDisk) > 0 {
		df, ok := e.T.(DiskFiller)
		if !ok {
			return fmt.Errorf("%w: fill a disk", ErrUnsupportedFault)
		}
		for _, n := range a.FillDisk {
			if err := df.FillDisk(n); err != nil {
				return err
			}
		}
	}
	if err := e.applyCorrupt(ctx, a); err != nil {
		return err
	}
	if err := e.corruptCheckpoint(ctx, a); err != nil { // corruptckpt.go
		return err
	}
	if err := e.applyMembership(ctx, a); err != nil {
		return err
	}
	return nil
}

// AddressBook is implemented by targets that know node addresses (needed for grudges).
type AddressBook interface{ IP(node string) string }

func (e *Executor) applyGrudge(ctx context.Context, g Grudge) error {
	if len(g) == 0 {
		return nil
	}
	book, ok := e.T.(AddressBook)
	if !ok {
		return errors.New("nemesis: target has no addresses for a partition")
	}
	rules, err := Rules(g, book.IP)
	if err != nil {
		return err
	}
	for _, n := range sortedRules(rules) {
		for _, args := range rules[n] {
			if _, err := e.T.Exec(ctx, n, "iptables", args...); err != nil {
				return err
			}
		}
	}
	return nil
}

func (e *Executor) applyNetem(ctx context.Context, node string, n Netem, pick int64) error {
	if e.NetemAvailable {
		_, err := e.T.Exec(ctx, node, "tc", NetemArgs(e.Dev, n)...)
		return err
	}
	return e.applyQueued(ctx, node, n, pick)
}

// Heal ends one fault: flushes the chain and clears netem on the nodes it touched, resumes
// paused processes and restarts killed ones.
func (e *Executor) Heal(ctx context.Context, a Action) error {
	var errs []error
	errs = append(errs, e.healStore(ctx, a, true))
	for _, n := range a.Nodes() {
		errs = append(errs, e.clearNet(ctx, n))
	}
	if fs, ok := e.T.(FailpointSetter); ok {
		for _, n := range sortedKeysOf(a.Failpoints) {
			errs = append(errs, fs.SetFailpoints(n, ""))
		}
	}
	if df, ok := e.T.(DiskFiller); ok {
		for _, n := range a.FillDisk {
			errs = append(errs, df.FreeDisk(n))
		}
	}
	errs = append(errs, e.healThrottle(sortedKeysOf(a.Throttle)))
	// A JM whose disk filled may have ended itself (a failed write of its term is fatal to
	// hashicorp/raft): it is restarted like a killed one.
	for _, n := range append(append(append([]string(nil), a.Pause...), a.Kill...), a.FillDisk...) {
		errs = append(errs, e.T.Revive(ctx, n))
	}
	errs = append(errs, e.healStore(ctx, a, false))
	errs = append(errs, e.healMembership(ctx, a))
	return errors.Join(errs...)
}

// HealAll clears every network fault and revives every cluster node.
func (e *Executor) HealAll(ctx context.Context, netNodes, processNodes []string) error {
	var errs []error
	for _, n := range netNodes {
		errs = append(errs, e.clearNet(ctx, n))
	}
	fs, _ := e.T.(FailpointSetter)
	df, _ := e.T.(DiskFiller)
	for _, n := range processNodes {
		if fs != nil {
			errs = append(errs, fs.SetFailpoints(n, ""))
		}
		if df != nil {
			errs = append(errs, df.FreeDisk(n))
		}
	}
	errs = append(errs, e.healThrottle(processNodes))
	for _, n := range processNodes {
		errs = append(errs, e.T.Revive(ctx, n))
	}
	return errors.Join(errs...)
}

func (e *Executor) clearNet(ctx context.Context, node string) error {
	_, err := e.T.Exec(ctx, node, "iptables", HealArgs()...)
	err = errors.Join(err, e.clearQueued(ctx, node))
	if !e.NetemAvailable {
		return err
	}
	if out, terr := e.T.Exec(ctx, node, "tc", NetemClearArgs(e.Dev)...); terr != nil && !noQdisc(out, terr) {
		err = errors.Join(err, terr)
	}
	return err
}

// noQdisc recognises tc's complaint when there is no root qdisc to delete.
func noQdisc(out string, err error) bool {
	s := out + err.Error()
	return strings.Contains(s, "Cannot delete qdisc with handle of zero") ||
		strings.Contains(s, "No such file or directory") || strings.Contains(s, "Invalid handle")
}

// ProbeNetem reports whether tc netem works, by installing and removing it on node. The suite
// does not need it: without sch_netem delay and loss are made in user space.
func ProbeNetem(ctx context.Context, t Target, node, dev string) bool {
	if _, err := t.Exec(ctx, node, "tc", NetemArgs(dev, Netem{DelayMs: 1})...); err != nil {
		return false
	}
	_, _ = t.Exec(ctx, node, "tc", NetemClearArgs(dev)...)
	return true
}

func sortedNetem(m map[string]Netem) []string {
	set := map[string]bool{}
	for k := range m {
		set[k] = true
	}
	return sortedKeys(set)
}

func sortedRules(m map[string][][]string) []string {
	set := map[string]bool{}
	for k := range m {
		set[k] = true
	}
	return sortedKeys(set)
}

func sortedKeysOf[V any](m map[string]V) []string {
	set := map[string]bool{}
	for k := range m {
		set[k] = true
	}
	return sortedKeys(set)
}
