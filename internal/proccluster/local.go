package proccluster

import (
	"fmt"
	"path/filepath"

	"github.com/jmcluster/jmcluster/internal/freeport"
)

// LocalOptions shape a loopback cluster.
type LocalOptions struct {
	JMs, TMs int // default 3 and 3
	Slots    int // per TaskManager; 0 leaves jmnode's default
	JMFlags  []string
	TMFlags  []string
}

// Local describes a cluster on free loopback ports under dir: jmN keeps its data in dir/jmN,
// tmN works in dir/tmN and writes its event log to dir/tmN-events.jsonl, and every process
// logs to dir/NAME.log.
func Local(dir string, o LocalOptions) ([]Node, error) {
	if o.JMs <= 0 {
		o.JMs = 3
	}
	if o.TMs <= 0 {
		o.TMs = 3
	}
	ports, err := FreePorts(4*o.JMs + 3*o.TMs)
	if err != nil {
		return nil, err
	}
	next := func() string { p := ports[0]; ports = ports[1:]; return p }
	var nodes []Node
	for i := 1; i <= o.JMs; i++ {
		name := fmt.Sprintf("jm%d", i)
		nodes = append(nodes, Node{Name: name, Role: JobMaster,
			Addrs:   Addrs{Raft: next(), GRPC: next(), HTTP: next(), Gossip: next()},
			DataDir: filepath.Join(dir, name), LogPath: filepath.Join(dir, name+".log"), Flags: o.JMFlags})
	}
	for i := 1; i <= o.TMs; i++ {
		name := fmt.Sprintf("tm%d", i)
		nodes = append(nodes, Node{Name: name, Role: TaskManager,
			Addrs:   Addrs{GRPC: next(), Data: next(), Gossip: next()},
			WorkDir: filepath.Join(dir, name), EventLog: filepath.Join(dir, name+"-events.jsonl"),
			LogPath: filepath.Join(dir, name+".log"), Slots: o.Slots, Flags: o.TMFlags})
	}
	return nodes, nil
}

// FreePorts returns n distinct free loopback addresses, below the kernel's ephemeral range
// (internal/freeport): free when chosen, and no outgoing connection takes one as its source
// port before the process started soon after binds it.
func FreePorts(n int) ([]string, error) { return freeport.Addrs("127.0.0.1", n) }
