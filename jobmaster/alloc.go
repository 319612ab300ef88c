package jobmaster

import (
	"container/heap"
	"fmt"
	"sort"
	"time"

	"github.com/jmcluster/jmcluster/internal/logsum"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// Slot allocation: slot usage is derived from the committed executions of every job (a slot
// is busy from the CreateAttempts commit until every execution committed in it is terminal),
// the candidates are the usable TMs of the registry. place is the pure part.

// slotsInUse returns, per TM, the slot indexes held by non-terminal executions of every job.
// A slot shared by several executions of one region counts once; a slot in use takes no
// further region (slot sharing stays inside one region of one job).
func (t *term) slotsInUse() map[string]map[int32]bool {
	used := map[string]map[int32]bool{}
	for _, id := range t.jm.state.JobIDs() {
		t.jm.state.WithJob(id, func(rec *pb.JobRecord) {
			forEachExecution(rec, func(ev *pb.ExecutionVertex) {
				e := ev.GetCurrent()
				if e == nil || isTerminal(e.State) || e.Slot == nil {
					return
				}
				if used[e.Slot.TmId] == nil {
					used[e.Slot.TmId] = map[int32]bool{}
				}
				used[e.Slot.TmId][e.Slot.Index] = true
			})
		})
	}
	return used
}

type placement struct {
	tm   TaskManager
	slot int32
}

// allocate places the tasks of a deployment on the placeable TMs' free slots: usable, and
// current with the pool (isolation.go). While a usable TM is still confirming a new pool
// version (one heartbeat, after a TM joined), the deployment waits rather than crowd the TMs
// that already have, up to one heartbeat timeout per TM and term; a TM that takes longer is
// left out.
func (t *term) allocate(tasks []deployTask) ([]placement, error) {
	now := time.Now()
	// The committed pool is read before t.mu is taken, never under it: code that holds the
	// state's read lock may take t.mu, and t.mu held while waiting for the read lock behind a
	// pending Apply deadlocks the leader (the three-way wait of docs/testing.md, "The 110 s
	// stall": Apply waits for a reader, the reader for t.mu, t.mu's holder for the read lock).
	usable := t.jm.tms.Usable(t.jm.cfg.HeartbeatTimeout)
	behindNow := make([]bool, len(usable))
	for i, tm := range usable {
		behindNow[i] = t.jm.poolBehind(tm.ID)
	}
	var behind []string
	t.mu.Lock()
	for i, tm := range usable {
		if !behindNow[i] {
			delete(t.behindSince, tm.ID)
			continue
		}
		since, ok := t.behindSince[tm.ID]
		if !ok {
			since = now
			t.behindSince[tm.ID] = now
		}
		if now.Sub(since) < t.jm.cfg.HeartbeatTimeout {
			behind = append(behind, tm.ID)
		}
	}
	t.mu.Unlock()
	if len(behind) > 0 {
		return nil, fmt.Errorf("%w: TaskManagers %v are confirming the new pool version", ErrNoSlots, logsum.List(behind))
	}
	return place(t.jm.Placeable(), t.slotsInUse(), tasks)
}

// place puts the tasks of a deployment (one or more failover regions, each region's tasks in
// graph order) on free slots, returning one placement per task, in the order of tasks.
//
// Slot sharing (Flink's default slot sharing group, narrowed to a region): the tasks of one
// region share slots, one subtask of each vertex per slot. The k-th task of a vertex in the
// region (graph order: by subtask) goes to the region's k-th slot, so a region needs as many
// slots as its widest vertex has subtasks in it, and the two ends of a FORWARD edge (subtask i
// of each vertex) always share a slot. A slot holds tasks of one region only.
//
// Regions are spread and kept whole: largest first (ties by region id), each goes to the TM
// with the most free slots (ties by the order of tms, which the registry sorts by id) when its
// slots fit there, on the lowest free indexes. A region that fits on no single TM is split:
// its slots, in order, fill the TMs with the most free slots, one TM after the other, so it
// spans as few TMs as it can and each TM holds a run of consecutive subtasks. With fewer free
// slots than the deployment needs it places none and returns ErrNoSlots: the deployment waits.
//
// Cost: O(tasks + TMs x slots + regions x log TMs).
func place(tms []TaskManager, used map[string]map[int32]bool, tasks []deployTask) ([]placement, error) {
	free := make([][]int32, len(tms))
	total := 0
	for i, tm := range tms {
		for s := int32(0); s < tm.Slots; s++ {
			if !used[tm.ID][s] {
				free[i] = append(free[i], s)
			}
		}
		total += len(free[i])
	}
	// The regions of the deployment, in order of first appearance, and each task's slot
	// within its region.
	type region struct {
		id    int
		tasks []int // indexes into tasks
		slots int
	}
	var regions []*region
	byID := map[int]*region{}
	group := make([]int, len(tasks))
	rank := map[string]int{} // vertex -> tasks of it seen so far, per region
	for i, task := range tasks {
		r := byID[task.region]
		if r == nil {
			r = &region{id: task.region}
			byID[task.region] = r
			regions = append(regions, r)
		}
		r.tasks = append(r.tasks, i)
	}
	need := 0
	for _, r := range regions {
		clear(rank)
		for _, i := range r.tasks {
			k := rank[tasks[i].vertexID]
			rank[tasks[i].vertexID] = k + 1
			group[i] = k
			r.slots = max(r.slots, k+1)
		}
		need += r.slots
	}
	if need > total {
		return nil, fmt.Errorf("%w: %d slots needed (%d tasks in %d regions, sharing slots), %d free on %d task managers",
			ErrNoSlots, need, len(tasks), len(regions), total, len(tms))
	}
	sort.SliceStable(regions, func(a, b int) bool { return regions[a].slots > regions[b].slots })
	h := &freeHeap{free: free}
	for i := range tms {
		if len(free[i]) > 0 {
			h.tms = append(h.tms, i)
		}
	}
	heap.Init(h)
	out := make([]placement, len(tasks))
	slotTM := []int{}
	slotIdx := []int32{}
	for _, r := range regions {
		// Choose the TMs for the region's slots.
		slotTM, slotIdx = slotTM[:0], slotIdx[:0]
		var taken []int
		for len(slotTM) < r.slots {
			tm := heap.Pop(h).(int)
			n := min(len(free[tm]), r.slots-len(slotTM))
			for _, s := range free[tm][:n] {
				slotTM = append(slotTM, tm)
				slotIdx = append(slotIdx, s)
			}
			free[tm] = free[tm][n:]
			taken = append(taken, tm)
		}
		for _, tm := range taken {
			if len(free[tm]) > 0 {
				heap.Push(h, tm)
			}
		}
		for _, i := range r.tasks {
			out[i] = placement{tm: tms[slotTM[group[i]]], slot: slotIdx[group[i]]}
		}
	}
	return out, nil
}

// freeHeap orders TM indexes by free slots, most first, then by index.
type freeHeap struct {
	tms  []int
	free [][]int32
}

func (h *freeHeap) Len() int { return len(h.tms) }
func (h *freeHeap) Less(a, b int) bool {
	fa, fb := len(h.free[h.tms[a]]), len(h.free[h.tms[b]])
	if fa != fb {
		return fa > fb
	}
	return h.tms[a] < h.tms[b]
}
func (h *freeHeap) Swap(a, b int) { h.tms[a], h.tms[b] = h.tms[b], h.tms[a] }
func (h *freeHeap) Push(x any)    { h.tms = append(h.tms, x.(int)) }
func (h *freeHeap) Pop() any {
	x := h.tms[len(h.tms)-1]
	h.tms = h.tms[:len(h.tms)-1]
	return x
}
