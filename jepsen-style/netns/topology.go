// Package netns builds and tears down the network the fault-injection suite runs in: one Linux
// network namespace per node, all linked through a bridge that lives in a namespace of its own.
// The host's network namespace is never changed: every command is `ip -n NS ...` or
// `ip netns exec NS ...`, and veth pairs are created inside the bridge namespace and their peer
// end moved straight into the node namespace.
package netns

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Prefix starts the name of every namespace the suite creates; `jepsen clean` deletes every
// namespace carrying it.
const Prefix = "jmc-"

// Subnet is the documented address range of every run: 10.77.0.0/24. The bridge namespace has
// no address; node namespaces get fixed host numbers (see DefaultNodes).
const Subnet = "10.77.0.0/24"

// BridgeDevice is the bridge's name inside the bridge namespace; NodeDevice is the interface
// name of a node's veth end inside its own namespace.
const (
	BridgeDevice = "br0"
	NodeDevice   = "eth0"
)

// ErrBadRunID is returned for run ids that would make unsafe or overlong names.
var ErrBadRunID = errors.New("netns: run id must be 1-40 characters of [a-z0-9-]")

// Node is one namespace on the bridge.
type Node struct {
	Name string // short name: jm1, tm2, cl
	Host int    // last octet in 10.77.0.0/24
	// Spare marks a JobMaster namespace whose process is not part of the cluster at the
	// start (jm4 .14, ...): a scenario adds it to the Raft configuration later. JMs leaves it
	// out, Spares lists it, Namespaces and SetupCommands include it.
	Spare bool
}

// IP returns the node's address.
func (n Node) IP() string { return fmt.Sprintf("10.77.0.%d", n.Host) }

// DefaultTMs is the number of TaskManagers of a run unless its scenario asks for more;
// MaxTMs the most a topology has (hosts .21-.29).
const (
	DefaultTMs = 3
	MaxTMs     = 9
)

// DefaultNodes is the topology of most runs: three JobMasters (.11-.13), three TaskManagers
// (.21-.23) and the client namespace (.2).
func DefaultNodes() []Node { return NodesWith(DefaultTMs) }

// NodesWith is the topology with tms TaskManagers (tm1 .21, tm2 .22, ...), the three
// JobMasters and the client namespace.
func NodesWith(tms int) []Node {
	out := []Node{{Name: "jm1", Host: 11}, {Name: "jm2", Host: 12}, {Name: "jm3", Host: 13}}
	for i := 1; i <= tms; i++ {
		out = append(out, Node{Name: fmt.Sprintf("tm%d", i), Host: 20 + i})
	}
	return append(out, Node{Name: "cl", Host: 2})
}

// Topology names the namespaces of one run.
type Topology struct {
	RunID string
	Nodes []Node
}

// ErrBadTMCount is returned for a TaskManager count outside 1..MaxTMs.
var ErrBadTMCount = fmt.Errorf("netns: a topology has 1 to %d TaskManagers", MaxTMs)

// NewTopology validates the run id and returns the default topology for it.
func NewTopology(runID string) (*Topology, error) { return NewTopologyWith(runID, DefaultTMs) }

// NewTopologyWith validates the run id and returns the topology with tms TaskManagers.
func NewTopologyWith(runID string, tms int) (*Topology, error) {
	if err := ValidRunID(runID); err != nil {
		return nil, err
	}
	if tms < 1 || tms > MaxTMs {
		return nil, fmt.Errorf("%w (asked for %d)", ErrBadTMCount, tms)
	}
	return &Topology{RunID: runID, Nodes: NodesWith(tms)}, nil
}

// ValidRunID checks that a run id is safe inside namespace names and command lines.
func ValidRunID(runID string) error {
	if len(runID) == 0 || len(runID) > 40 {
		return ErrBadRunID
	}
	for _, r := range runID {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return ErrBadRunID
		}
	}
	return nil
}

// Marker is the string every process of the run carries in its command line (node directories
// are named after their namespace), used to find leftovers after a crash.
func (t *Topology) Marker() string { return Prefix + t.RunID + "-" }

// JMs names the topology's JobMasters, TMs its TaskManagers, in order.
func (t *Topology) JMs() []string { return t.named("jm") }

// TMs names the topology's TaskManagers, in order.
func (t *Topology) TMs() []string { return t.named("tm") }

func (t *Topology) named(prefix string) []string {
	var out []string
	for _, n := range t.Nodes {
		if strings.HasPrefix(n.Name, prefix) && !n.Spare {
			out = append(out, n.Name)
		}
	}
	return out
}

// MaxSpareJMs is the most spare JobMaster namespaces a topology has (hosts .14-.19).
const MaxSpareJMs = 6

// ErrBadSpareCount is returned for a spare JobMaster count outside 0..MaxSpareJMs.
var ErrBadSpareCount = fmt.Errorf("netns: a topology has 0 to %d spare JobMasters", MaxSpareJMs)

// AddSpareJMs adds n spare JobMaster namespaces, jm4 (.14), jm5 (.15), ...: namespaces on the
// bridge whose processes a scenario starts later, to join the running cluster. Call it before
// Setup.
func (t *Topology) AddSpareJMs(n int) error {
	if n < 0 || n > MaxSpareJMs || len(t.Spares())+n > MaxSpareJMs {
		return fmt.Errorf("%w (asked for %d more, have %d)", ErrBadSpareCount, n, len(t.Spares()))
	}
	first := len(t.JMs()) + len(t.Spares()) + 1
	for i := 0; i < n; i++ {
		num := first + i
		t.Nodes = append(t.Nodes, Node{Name: fmt.Sprintf("jm%d", num), Host: 10 + num, Spare: true})
	}
	return nil
}

// Spares names the topology's spare JobMasters, in order.
func (t *Topology) Spares() []string {
	var out []string
	for _, n := range t.Nodes {
		if n.Spare {
			out = append(out, n.Name)
		}
	}
	return out
}

// NS returns the namespace name of a node.
func (t *Topology) NS(node string) string { return t.Marker() + node }

// BridgeNS returns the name of the namespace holding the bridge.
func (t *Topology) BridgeNS() string { return t.Marker() + "br" }

// Node returns the node with the given name.
func (t *Topology) Node(name string) (Node, bool) {
	for _, n := range t.Nodes {
		if n.Name == name {
			return n, true
		}
	}
	return Node{}, false
}

// IP returns a node's address, or "" for an unknown node.
func (t *Topology) IP(name string) string {
	n, ok := t.Node(name)
	if !ok {
		return ""
	}
	return n.IP()
}

// Namespaces lists every namespace of the run, the bridge first.
func (t *Topology) Namespaces() []string {
	out := []string{t.BridgeNS()}
	for _, n := range t.Nodes {
		out = append(out, t.NS(n.Name))
	}
	return out
}

// vethName is the bridge-side name of a node's veth pair (at most 15 bytes).
func vethName(node string) string { return "v-" + node }

// SetupCommands returns, in order, the argument lists of the `ip` commands that build the run's
// network. Every one names a namespace (-n) so none touches the host's.
func (t *Topology) SetupCommands() [][]string {
	br := t.BridgeNS()
	var cmds [][]string
	for _, ns := range t.Namespaces() {
		cmds = append(cmds, []string{"netns", "add", ns})
	}
	cmds = append(cmds,
		[]string{"-n", br, "link", "set", "lo", "up"},
		[]string{"-n", br, "link", "add", BridgeDevice, "type", "bridge"},
		[]string{"-n", br, "link", "set", BridgeDevice, "up"},
	)
	for _, n := range t.Nodes {
		ns, v := t.NS(n.Name), vethName(n.Name)
		cmds = append(cmds,
			[]string{"-n", br, "link", "add", v, "type", "veth", "peer", "name", NodeDevice, "netns", ns},
			[]string{"-n", br, "link", "set", v, "master", BridgeDevice},
			[]string{"-n", br, "link", "set", v, "up"},
			[]string{"-n", ns, "link", "set", "lo", "up"},
			[]string{"-n", ns, "addr", "add", n.IP() + "/24", "dev", NodeDevice},
			[]string{"-n", ns, "link", "set", NodeDevice, "up"},
		)
	}
	return cmds
}

// RunNamespaces filters a namespace listing down to the names the suite owns, sorted.
// With runID "" every name with Prefix is returned, otherwise only that run's.
func RunNamespaces(listing []string, runID string) []string {
	want := Prefix
	if runID != "" {
		want = Prefix + runID + "-"
	}
	var out []string
	for _, name := range listing {
		if strings.HasPrefix(name, want) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}
