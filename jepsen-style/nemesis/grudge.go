package nemesis

import (
	"fmt"
	"sort"
)

// Grudge maps a node to the nodes whose packets it drops. A symmetric cut lists both directions.
type Grudge map[string][]string

// Chain is the iptables chain, inside every node namespace, that holds the nemesis's rules.
// It is hooked into INPUT once; healing flushes it.
const Chain = "JMC"

// add records that a drops packets from b and b from a.
func (g Grudge) cut(a, b string) {
	if a == b {
		return
	}
	g[a] = appendUnique(g[a], b)
	g[b] = appendUnique(g[b], a)
}

func appendUnique(list []string, v string) []string {
	for _, x := range list {
		if x == v {
			return list
		}
	}
	list = append(list, v)
	sort.Strings(list)
	return list
}

// Isolate cuts node from every other node in all.
func Isolate(node string, all []string) Grudge {
	g := Grudge{}
	for _, n := range all {
		g.cut(node, n)
	}
	return g
}

// Partition cuts every link between nodes of different groups. Nodes in no group keep all links.
func Partition(groups ...[]string) Grudge {
	g := Grudge{}
	for i, gi := range groups {
		for _, gj := range groups[i+1:] {
			for _, a := range gi {
				for _, b := range gj {
					g.cut(a, b)
				}
			}
		}
	}
	return g
}

// BridgeOf cuts a from c; b keeps links to both.
func BridgeOf(a, b, c string) Grudge {
	_ = b
	g := Grudge{}
	g.cut(a, c)
	return g
}

// Ring builds a majorities ring over nodes in the given order: every node keeps links to the
// nodes nearest it on the ring (and, for an even count, the one opposite) so that it sees a
// majority, and no two nodes see the same majority. Every other link is cut.
func Ring(nodes []string) Grudge {
	n := len(nodes)
	maj := n/2 + 1
	k := (maj - 1) / 2
	opposite := n%2 == 0 && 2*k+2 >= maj && 2*k+1 < maj
	if 2*k+1+boolInt(opposite) < maj {
		k++
		opposite = false
	}
	g := Grudge{}
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			d := j - i
			if n-d < d {
				d = n - d
			}
			if d <= k || (opposite && d == n/2) {
				continue
			}
			g.cut(nodes[i], nodes[j])
		}
	}
	return g
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Visible reports whether, under g, a accepts packets from b.
func (g Grudge) Visible(a, b string) bool {
	for _, x := range g[a] {
		if x == b {
			return false
		}
	}
	return true
}

// Rules turns a grudge into iptables argument lists per node: `-A JMC -s IP/32 -j DROP` for
// every node it drops. Nodes and sources are sorted, so the output is deterministic.
func Rules(g Grudge, ipOf func(string) string) (map[string][][]string, error) {
	out := map[string][][]string{}
	nodes := make([]string, 0, len(g))
	for n := range g {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	for _, n := range nodes {
		from := append([]string(nil), g[n]...)
		sort.Strings(from)
		for _, src := range from {
			ip := ipOf(src)
			if ip == "" {
				return nil, fmt.Errorf("nemesis: no address for node %q", src)
			}
			out[n] = append(out[n], []string{"-w", "-A", Chain, "-s", ip + "/32", "-j", "DROP"})
		}
	}
	return out, nil
}

// PrepareArgs are the iptables argument lists that create the chain and hook it into INPUT.
func PrepareArgs() [][]string {
	return [][]string{{"-w", "-N", Chain}, {"-w", "-I", "INPUT", "-j", Chain}}
}

// HealArgs flushes the chain.
func HealArgs() []string { return []string{"-w", "-F", Chain} }

// NetemArgs returns the tc arguments that install n on dev.
func NetemArgs(dev string, n Netem) []string {
	args := []string{"qdisc", "replace", "dev", dev, "root", "netem"}
	if n.DelayMs > 0 {
		args = append(args, "delay", fmt.Sprintf("%dms", n.DelayMs))
		if n.JitterMs > 0 {
			args = append(args, fmt.Sprintf("%dms", n.JitterMs))
		}
	}
	if n.LossPct > 0 {
		args = append(args, "loss", fmt.Sprintf("%d%%", n.LossPct))
	}
	return args
}

// NetemClearArgs removes any root qdisc from dev.
func NetemClearArgs(dev string) []string { return []string{"qdisc", "del", "dev", dev, "root"} }
