package graph

import (
	"container/heap"
	"fmt"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// ResultID names the IntermediateResult an edge produces: "<source>-><target>".
func ResultID(source, target string) string {
	return source + "->" + target
}

// TopologicalOrder returns the vertex ids in topological order: Kahn's algorithm, ties broken
// by the order the vertices appear in jg.Vertices. It fails on a duplicate or unknown vertex
// id and on a cycle.
func TopologicalOrder(jg *pb.JobGraph) ([]string, error) {
	idx, err := vertexIndex(jg)
	if err != nil {
		return nil, err
	}
	order, err := topoIndexes(jg, idx)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(order))
	for i, v := range order {
		ids[i] = jg.Vertices[v].Id
	}
	return ids, nil
}

func vertexIndex(jg *pb.JobGraph) (map[string]int, error) {
	if jg == nil {
		return nil, fmt.Errorf("job graph is missing: %w", ErrInvalidJobGraph)
	}
	idx := make(map[string]int, len(jg.Vertices))
	for i, v := range jg.Vertices {
		if v == nil || v.Id == "" {
			return nil, fmt.Errorf("vertices[%d] has no id: %w", i, ErrInvalidJobGraph)
		}
		if _, dup := idx[v.Id]; dup {
			return nil, fmt.Errorf("duplicate vertex id %q: %w", v.Id, ErrInvalidJobGraph)
		}
		idx[v.Id] = i
	}
	for i, e := range jg.Edges {
		if _, ok := idx[e.GetSource()]; !ok {
			return nil, fmt.Errorf("edges[%d]: unknown source %q: %w", i, e.GetSource(), ErrInvalidJobGraph)
		}
		if _, ok := idx[e.GetTarget()]; !ok {
			return nil, fmt.Errorf("edges[%d]: unknown target %q: %w", i, e.GetTarget(), ErrInvalidJobGraph)
		}
	}
	return idx, nil
}

type intHeap []int

func (h intHeap) Len() int           { return len(h) }
func (h intHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h intHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *intHeap) Push(x any)        { *h = append(*h, x.(int)) }
func (h *intHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func topoIndexes(jg *pb.JobGraph, idx map[string]int) ([]int, error) {
	n := len(jg.Vertices)
	indeg := make([]int, n)
	out := make([][]int, n)
	for _, e := range jg.Edges {
		s, t := idx[e.Source], idx[e.Target]
		out[s] = append(out[s], t)
		indeg[t]++
	}
	ready := &intHeap{}
	for i := 0; i < n; i++ {
		if indeg[i] == 0 {
			heap.Push(ready, i)
		}
	}
	order := make([]int, 0, n)
	for ready.Len() > 0 {
		u := heap.Pop(ready).(int)
		order = append(order, u)
		for _, w := range out[u] {
			indeg[w]--
			if indeg[w] == 0 {
				heap.Push(ready, w)
			}
		}
	}
	if len(order) != n {
		return nil, fmt.Errorf("the graph has a cycle: %w", ErrInvalidJobGraph)
	}
	return order, nil
}

// BuildExecutionGraph expands a JobGraph into its ExecutionGraph: job vertices in topological
// order, one ExecutionVertex per subtask with no attempt yet, one IntermediateResult per edge
// (in edge order) with one partition per producer subtask. The consumer subtasks' input
// channels follow from the results and are not built (Inputs). Producer attempts and addresses stay empty until attempts exist
// (see RefreshProducers). The graph should have passed Validate; structural errors that make
// the expansion impossible are returned wrapping ErrInvalidJobGraph.
func BuildExecutionGraph(jg *pb.JobGraph) (*pb.ExecutionGraph, error) {
	idx, err := vertexIndex(jg)
	if err != nil {
		return nil, err
	}
	order, err := topoIndexes(jg, idx)
	if err != nil {
		return nil, err
	}
	eg := &pb.ExecutionGraph{JobId: jg.JobId}
	ejvs := make([]*pb.ExecutionJobVertex, len(jg.Vertices))
	for _, i := range order {
		jv := jg.Vertices[i]
		if jv.Parallelism < 1 {
			return nil, fmt.Errorf("vertex %q: parallelism %d < 1: %w", jv.Id, jv.Parallelism, ErrInvalidJobGraph)
		}
		ejv := &pb.ExecutionJobVertex{
			VertexId:    jv.Id,
			Parallelism: jv.Parallelism,
			Subtasks:    make([]*pb.ExecutionVertex, jv.Parallelism),
		}
		// A vertex's subtasks are allocated together (one object instead of one per subtask,
		// without each rounding up to its size class); they live and go with the job.
		evs := make([]pb.ExecutionVertex, jv.Parallelism)
		for s := range ejv.Subtasks {
			ev := &evs[s]
			ev.VertexId, ev.SubtaskIndex = jv.Id, int32(s)
			ejv.Subtasks[s] = ev
		}
		ejvs[i] = ejv
		eg.Vertices = append(eg.Vertices, ejv)
	}
	for _, e := range jg.Edges {
		prod, cons := ejvs[idx[e.Source]], ejvs[idx[e.Target]]
		forward := e.Distribution == pb.Distribution_DISTRIBUTION_FORWARD
		if forward && prod.Parallelism != cons.Parallelism {
			return nil, fmt.Errorf("FORWARD edge %s: parallelism %d != %d: %w",
				ResultID(e.Source, e.Target), prod.Parallelism, cons.Parallelism, ErrInvalidJobGraph)
		}
		rid := ResultID(e.Source, e.Target)
		r := &pb.IntermediateResult{
			ResultId:         rid,
			ProducerVertexId: e.Source,
			ConsumerVertexId: e.Target,
			ResultType:       e.ResultType,
			Distribution:     e.Distribution,
			Partitions:       make([]*pb.IntermediateResultPartition, prod.Parallelism),
		}
		subs := cons.Parallelism
		if forward {
			subs = 1
		}
		parts := make([]pb.IntermediateResultPartition, prod.Parallelism) // together, as the subtasks
		for p := range r.Partitions {
			part := &parts[p]
			part.PartitionIndex, part.NumSubpartitions = int32(p), subs
			r.Partitions[p] = part
		}
		// The consumers' input channels are not built: they follow from the result (Inputs).
		eg.Results = append(eg.Results, r)
	}
	return eg, nil
}
