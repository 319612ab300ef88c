package graph

import (
	"sort"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// SubtaskRef names one subtask of a job vertex.
type SubtaskRef struct {
	VertexID string
	Subtask  int32
}

// Region is a pipelined failover region: subtasks that must restart together. Members are in
// graph order (topological vertex order, then subtask).
type Region struct {
	ID      int
	Members []SubtaskRef
}

// Contains reports whether ref is a member of r.
func (r Region) Contains(ref SubtaskRef) bool {
	for _, m := range r.Members {
		if m == ref {
			return true
		}
	}
	return false
}

// subtaskSpace numbers every subtask of a job in graph order.
type subtaskSpace struct {
	jg     *pb.JobGraph
	idx    map[string]int // vertex id -> index in jg.Vertices
	order  []int          // topological order of jg.Vertices indexes
	offset []int          // per jg.Vertices index: node number of subtask 0
	total  int
}

func newSubtaskSpace(jg *pb.JobGraph) (*subtaskSpace, error) {
	idx, err := vertexIndex(jg)
	if err != nil {
		return nil, err
	}
	order, err := topoIndexes(jg, idx)
	if err != nil {
		return nil, err
	}
	s := &subtaskSpace{jg: jg, idx: idx, order: order, offset: make([]int, len(jg.Vertices))}
	for _, v := range order {
		s.offset[v] = s.total
		s.total += int(max(jg.Vertices[v].Parallelism, 0))
	}
	return s, nil
}

func (s *subtaskSpace) node(ref SubtaskRef) (int, bool) {
	v, ok := s.idx[ref.VertexID]
	if !ok || ref.Subtask < 0 || ref.Subtask >= s.jg.Vertices[v].Parallelism {
		return 0, false
	}
	return s.offset[v] + int(ref.Subtask), true
}

// refs returns every node's SubtaskRef in node order.
func (s *subtaskSpace) refs() []SubtaskRef {
	out := make([]SubtaskRef, 0, s.total)
	for _, v := range s.order {
		jv := s.jg.Vertices[v]
		for i := int32(0); i < jv.Parallelism; i++ {
			out = append(out, SubtaskRef{VertexID: jv.Id, Subtask: i})
		}
	}
	return out
}

// edgeLinks calls fn for every (producer node, consumer node) pair an edge connects.
func (s *subtaskSpace) edgeLinks(e *pb.JobEdge, fn func(p, c int)) {
	sv, tv := s.idx[e.Source], s.idx[e.Target]
	sp, tp := int(s.jg.Vertices[sv].Parallelism), int(s.jg.Vertices[tv].Parallelism)
	if e.Distribution == pb.Distribution_DISTRIBUTION_FORWARD {
		for i := 0; i < min(sp, tp); i++ {
			fn(s.offset[sv]+i, s.offset[tv]+i)
		}
		return
	}
	for i := 0; i < sp; i++ {
		for j := 0; j < tp; j++ {
			fn(s.offset[sv]+i, s.offset[tv]+j)
		}
	}
}

type unionFind []int

func (u unionFind) find(x int) int {
	for u[x] != x {
		u[x] = u[u[x]]
		x = u[x]
	}
	return x
}

func (u unionFind) union(a, b int) {
	ra, rb := u.find(a), u.find(b)
	if ra == rb {
		return
	}
	if ra < rb {
		u[rb] = ra
	} else {
		u[ra] = rb
	}
}

// FailoverRegions computes the pipelined failover regions of a job: subtasks joined by
// PIPELINED edges (FORWARD joins subtask i with i, ALL_TO_ALL joins every producer subtask with
// every consumer subtask) share a region; BLOCKING edges do not join. With the FULL failover
// strategy there is one region holding every subtask. Regions are numbered from 0 in the order
// of their first member.
func FailoverRegions(jg *pb.JobGraph) ([]Region, error) {
	s, err := newSubtaskSpace(jg)
	if err != nil {
		return nil, err
	}
	refs := s.refs()
	if jg.FailoverStrategy == pb.FailoverStrategy_FAILOVER_STRATEGY_FULL {
		if len(refs) == 0 {
			return nil, nil
		}
		return []Region{{ID: 0, Members: refs}}, nil
	}
	uf := make(unionFind, s.total)
	for i := range uf {
		uf[i] = i
	}
	for _, e := range jg.Edges {
		if e.ResultType == pb.ResultType_RESULT_TYPE_BLOCKING {
			continue
		}
		if e.Distribution != pb.Distribution_DISTRIBUTION_FORWARD {
			// Joining every producer with the first consumer and every consumer with the
			// first producer gives the same components as the full bipartite join.
			sv, tv := s.idx[e.Source], s.idx[e.Target]
			sp, tp := int(jg.Vertices[sv].Parallelism), int(jg.Vertices[tv].Parallelism)
			if sp > 0 && tp > 0 {
				for i := 0; i < sp; i++ {
					uf.union(s.offset[sv]+i, s.offset[tv])
				}
				for j := 0; j < tp; j++ {
					uf.union(s.offset[sv], s.offset[tv]+j)
				}
			}
			continue
		}
		s.edgeLinks(e, uf.union)
	}
	// Every node's region, then the regions' members in one array, each region's of its exact
	// length (the leader keeps a job's regions for its term: appending member by member kept
	// up to twice the room).
	regionOfRoot := map[int]int{}
	regionOf := make([]int, len(refs))
	var sizes []int
	for n := range refs {
		root := uf.find(n)
		id, ok := regionOfRoot[root]
		if !ok {
			id = len(sizes)
			regionOfRoot[root] = id
			sizes = append(sizes, 0)
		}
		regionOf[n] = id
		sizes[id]++
	}
	if len(sizes) == 0 {
		return nil, nil
	}
	regions := make([]Region, len(sizes))
	members := make([]SubtaskRef, len(refs))
	start := 0
	for id, size := range sizes {
		regions[id] = Region{ID: id, Members: members[start : start : start+size]}
		start += size
	}
	for n, ref := range refs {
		regions[regionOf[n]].Members = append(regions[regionOf[n]].Members, ref)
	}
	return regions, nil
}

// RegionOf returns the region holding ref.
func RegionOf(regions []Region, ref SubtaskRef) (Region, bool) {
	for _, r := range regions {
		if r.Contains(ref) {
			return r, true
		}
	}
	return Region{}, false
}

// RegionsToRestart returns the regions to restart when the given subtasks failed: the regions
// holding them, plus, transitively, every region that consumes a BLOCKING result produced in a
// restarted region (a restarted producer invalidates what it had written). Unknown refs are
// ignored. The result is ordered by region id.
func RegionsToRestart(jg *pb.JobGraph, regions []Region, failed []SubtaskRef) []Region {
	s, err := newSubtaskSpace(jg)
	if err != nil || len(regions) == 0 {
		return nil
	}
	regionOfNode := make([]int, s.total)
	for i := range regionOfNode {
		regionOfNode[i] = -1
	}
	byID := make(map[int]Region, len(regions))
	for _, r := range regions {
		byID[r.ID] = r
		for _, m := range r.Members {
			if n, ok := s.node(m); ok {
				regionOfNode[n] = r.ID
			}
		}
	}
	// Blocking consumers per producer node.
	blocking := make([][]int, s.total)
	for _, e := range jg.Edges {
		if e.ResultType == pb.ResultType_RESULT_TYPE_BLOCKING {
			s.edgeLinks(e, func(p, c int) { blocking[p] = append(blocking[p], c) })
		}
	}
	chosen := map[int]bool{}
	var queue []int
	pick := func(id int) {
		if id >= 0 && !chosen[id] {
			chosen[id] = true
			queue = append(queue, id)
		}
	}
	for _, f := range failed {
		if n, ok := s.node(f); ok {
			pick(regionOfNode[n])
		}
	}
	for len(queue) > 0 {
		r := byID[queue[0]]
		queue = queue[1:]
		for _, m := range r.Members {
			n, ok := s.node(m)
			if !ok {
				continue
			}
			for _, c := range blocking[n] {
				pick(regionOfNode[c])
			}
		}
	}
	ids := make([]int, 0, len(chosen))
	for id := range chosen {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	out := make([]Region, len(ids))
	for i, id := range ids {
		out[i] = byID[id]
	}
	return out
}
