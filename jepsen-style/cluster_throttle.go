package jepsen

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jmcluster/jmcluster/jepsen-style/checker"
	"github.com/jmcluster/jmcluster/jepsen-style/netns"
)

// The nemesis's Throttler (nemesis/throttle.go): a node's process in a CPU cgroup of its own,
// named after the node's namespace (jmc-<run>-<node>), so `jepsen clean` finds it after a
// crash (netns.CleanCgroups).

// Throttle moves the node's process into its cgroup with a quota of quotaUs of CPU per
// netns.CgroupPeriodUs.
func (c *Cluster) Throttle(node string, quotaUs int) error {
	if _, ok := c.topo.Node(node); !ok {
		return fmt.Errorf("%w: %q", ErrUnknownNode, node)
	}
	cg, err := netns.DetectCgroups()
	if err != nil {
		return err
	}
	p, err := c.proc(node)
	if err != nil {
		return err
	}
	return cg.Throttle(c.topo.NS(node), p.Pid(), quotaUs)
}

// Unthrottle moves the node's process back to the root cgroup and removes its cgroup (nothing
// when it has none).
func (c *Cluster) Unthrottle(node string) error {
	if _, ok := c.topo.Node(node); !ok {
		return fmt.Errorf("%w: %q", ErrUnknownNode, node)
	}
	cg, err := netns.DetectCgroups()
	if err != nil {
		return nil
	}
	return cg.Release(c.topo.NS(node))
}

// The starvation meter's log lines (jobmaster/starvation.go, logStarved and the rest: keep the
// two in step; the suite imports no production package to share them).
var starveTexts = []struct{ text, kind string }{
	{"this leader has been starved of CPU too long; handing leadership over", checker.StarveHandOver},
	{"this leader's term ended while it was starved", checker.StarveTermEnded},
	{"this leader is no longer starved", checker.StarveRecovered},
	{"this leader is starved of CPU", checker.StarveBegins},
}

// starveMarks reads the starvation meter's lines from every JM's log (<run>/<jm>.log), for the
// starved-leader-hands-over checker.
func starveMarks(runDir string, jms []string) []checker.StarveMark {
	var out []checker.StarveMark
	for _, jm := range jms {
		b, err := os.ReadFile(filepath.Join(runDir, jm+".log"))
		if err != nil {
			continue
		}
		out = append(out, parseStarveMarks(jm, string(b))...)
	}
	return out
}

// parseStarveMarks finds the meter's lines in one JM's log (hclog's text format: the time
// first).
func parseStarveMarks(node, log string) []checker.StarveMark {
	var out []checker.StarveMark
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, "starved") {
			continue
		}
		for _, t := range starveTexts {
			if !strings.Contains(line, t.text) {
				continue
			}
			stamp, _, _ := strings.Cut(line, " ")
			at, err := time.Parse(time.RFC3339Nano, stamp)
			if err == nil {
				out = append(out, checker.StarveMark{Node: node, Time: at, Kind: t.kind})
			}
			break
		}
	}
	return out
}
