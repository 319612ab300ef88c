package proccluster

import (
	"fmt"
	"strings"
)

// AddJoiner adds (does not start) a JobMaster slot described by n (its addresses, directories,
// flags, environment and Wrap, as New takes them) that joins the running cluster rather than
// bootstrapping: --join and --gossip-join name the JobMasters already in c, running or not, and
// no --bootstrap-expect is given, so it asks the leader to add it as a voter (the flags a user
// gives a new JobMaster). AddJobMaster is the same on free loopback ports.
func (c *Cluster) AddJoiner(n Node) (*Proc, error) {
	if n.Name == "" || c.Proc(n.Name) != nil {
		return nil, fmt.Errorf("proccluster: node name %q empty or repeated", n.Name)
	}
	if n.Role != JobMaster {
		return nil, fmt.Errorf("proccluster: node %s: a joiner is a JobMaster, not %q", n.Name, n.Role)
	}
	var join, gossip []string
	for _, p := range c.JMs {
		join, gossip = append(join, p.Addrs.GRPC), append(gossip, p.Addrs.Gossip)
	}
	a := n.Addrs
	args := []string{"jobmaster", "--id", n.Name, "--data-dir", n.DataDir,
		"--raft-addr", a.Raft, "--grpc-addr", a.GRPC, "--http-addr", a.HTTP,
		"--gossip-addr", a.Gossip, "--gossip-join", strings.Join(gossip, ","), "--join", strings.Join(join, ",")}
	p := &Proc{Node: n, bin: c.Bin, args: append(args, n.Flags...)}
	if n.Bin != "" {
		p.bin = n.Bin
	}
	c.JMs = append(c.JMs, p)
	return p, nil
}
