package checker

import (
	"fmt"
	"sort"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// Regions maps "vertex/subtask" to a pipelined failover region number: subtasks joined by a
// pipelined edge (FORWARD: subtask i to subtask i; ALL_TO_ALL: all to all) share a region.
func Regions(g *pb.JobGraph) map[string]int {
	parent := map[string]string{}
	var find func(string) string
	find = func(x string) string {
		if parent[x] == x {
			return x
		}
		parent[x] = find(parent[x])
		return parent[x]
	}
	union := func(a, b string) {
		ra, rb := find(a), find(b)
		if ra < rb {
			parent[rb] = ra
		} else if rb < ra {
			parent[ra] = rb
		}
	}
	par := map[string]int32{}
	var order []string
	for _, v := range g.GetVertices() {
		par[v.GetId()] = v.GetParallelism()
		for i := int32(0); i < v.GetParallelism(); i++ {
			k := taskKey(v.GetId(), i)
			parent[k] = k
			order = append(order, k)
		}
	}
	for _, e := range g.GetEdges() {
		if e.GetResultType() == pb.ResultType_RESULT_TYPE_BLOCKING {
			continue
		}
		src, dst := e.GetSource(), e.GetTarget()
		for i := int32(0); i < par[src]; i++ {
			for j := int32(0); j < par[dst]; j++ {
				if e.GetDistribution() == pb.Distribution_DISTRIBUTION_FORWARD && i != j {
					continue
				}
				union(taskKey(src, i), taskKey(dst, j))
			}
		}
	}
	roots := map[string]int{}
	out := map[string]int{}
	sort.Strings(order)
	for _, k := range order {
		r := find(k)
		if _, ok := roots[r]; !ok {
			roots[r] = len(roots)
		}
		out[k] = roots[r]
	}
	return out
}

func taskKey(vertex string, subtask int32) string { return fmt.Sprintf("%s/%d", vertex, subtask) }

// RestartInput is what the restart checker needs about the streaming job.
type RestartInput struct {
	JobID  string
	Graph  *pb.JobGraph
	Events []TaskEvent
	// JMOnly: every fault of the run touched only JMs.
	JMOnly bool
	// AffectedTMs: TMs some fault touched (killed, paused, slowed or with a link cut).
	AffectedTMs []string
	// FinalRestarts is the job record's restart counter after heal; -1 when unknown.
	FinalRestarts int
}

// Restarts checks that the streaming job restarted no task when faults touched only JMs, and
// otherwise restarted only tasks of failover regions that had a task on an affected TM. A
// restart is an attempt number above 0 or a second start of the same execution vertex.
func Restarts(in RestartInput) Result {
	r := newResult("restarts")
	regions := Regions(in.Graph)
	affected := map[string]bool{}
	for _, tm := range in.AffectedTMs {
		affected[tm] = true
	}
	starts := map[string][]TaskEvent{}
	affectedRegion := map[int]bool{}
	for _, ev := range in.Events {
		if ev.Job != in.JobID || ev.Event != "start" {
			continue
		}
		k := taskKey(ev.Vertex, ev.Subtask)
		starts[k] = append(starts[k], ev)
		if affected[ev.TM] {
			affectedRegion[regions[k]] = true
		}
	}
	r.Counts["tasks"] = len(starts)
	for _, k := range sortedStrings(starts) {
		list := starts[k]
		sort.SliceStable(list, func(i, j int) bool { return list[i].TS.Before(list[j].TS) })
		restarted := len(list) > 1
		for _, ev := range list {
			if ev.AttemptNumber > 0 {
				restarted = true
			}
		}
		if !restarted {
			continue
		}
		r.Counts["restarted-tasks"]++
		last := list[len(list)-1]
		switch {
		case in.JMOnly:
			r.problem("%s restarted (%d starts, last attempt #%d on %s) although faults touched only JMs", k, len(list), last.AttemptNumber, last.TM)
		case !affectedRegion[regions[k]]:
			r.Counts["outside-affected-regions"]++
			r.problem("%s (region %d) restarted (last attempt #%d on %s) but no fault touched a TM of its region", k, regions[k], last.AttemptNumber, last.TM)
		}
	}
	if in.JMOnly && in.FinalRestarts > 0 {
		r.problem("job record counts %d restarts although faults touched only JMs", in.FinalRestarts)
	}
	if len(starts) == 0 {
		r.problem("no start event of job %s in any TM event log", in.JobID)
	}
	r.Counts["affected-regions"] = len(affectedRegion)
	scope := "faults touched TMs " + fmt.Sprint(in.AffectedTMs)
	if in.JMOnly {
		scope = "faults touched only JMs"
	}
	r.Summary = fmt.Sprintf("%s: %d of %d tasks restarted", scope, r.Counts["restarted-tasks"], r.Counts["tasks"])
	return *r
}
