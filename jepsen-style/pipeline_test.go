package jepsen

import (
	"strings"
	"testing"

	"github.com/jmcluster/jmcluster/jepsen-style/nemesis"
	"github.com/jmcluster/jmcluster/jepsen-style/netns"
)

// TestNoGrudgeCutsThePipelineServers: the servers' address is none of a node's, and the
// iptables rules of the widest grudges (every node cut from every other) never name it, so no
// partition reaches NATS or PostgreSQL.
func TestNoGrudgeCutsThePipelineServers(t *testing.T) {
	topo, err := netns.NewTopologyWith("t", netns.MaxTMs)
	if err != nil {
		t.Fatal(err)
	}
	var all []string
	for _, n := range topo.Nodes {
		if n.IP() == PipelineIP {
			t.Fatalf("node %s has the pipeline servers' address %s", n.Name, PipelineIP)
		}
		all = append(all, n.Name)
	}
	for _, n := range all {
		rules, err := nemesis.Rules(nemesis.Isolate(n, all), topo.IP)
		if err != nil {
			t.Fatal(err)
		}
		if len(rules) == 0 {
			t.Fatalf("isolating %s made no rule", n)
		}
		for node, lists := range rules {
			for _, args := range lists {
				if strings.Contains(strings.Join(args, " "), PipelineIP+"/") {
					t.Errorf("isolating %s: %s's rule %v names the pipeline servers", n, node, args)
				}
			}
		}
	}
}

// TestPipelineJob: the job graph parses, names the servers, the module and the dead-letter
// sink, and its vertices are the ones the docs list.
func TestPipelineJob(t *testing.T) {
	jg, err := pipelineJob("00000000000000000000000000000003", "nats://10.77.0.3:4222", "postgres://pipeline@10.77.0.3:5432/pipeline?sslmode=disable", strings.Repeat("ab", 32))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, v := range jg.Vertices {
		ids = append(ids, v.Id)
		if v.Parallelism != PipelineParallelism {
			t.Errorf("vertex %s: parallelism %d, want %d", v.Id, v.Parallelism, PipelineParallelism)
		}
	}
	if got := strings.Join(ids, " "); got != "clicks by-user windows number table out" {
		t.Errorf("vertices %q", got)
	}
	if jg.Vertices[0].Operator.GetNatsSource().GetUrl() != "nats://10.77.0.3:4222" || jg.Vertices[3].Operator.GetWasm().GetArtifact() != strings.Repeat("ab", 32) ||
		jg.Vertices[2].Operator.GetWindow().GetSizeMs() != PipelineWindow.Milliseconds() || jg.GetCheckpointConfig().GetIntervalMs() != 1000 ||
		jg.GetDeadLetters().GetOperator().GetFileSink() == nil {
		t.Errorf("job %v", jg)
	}
}
