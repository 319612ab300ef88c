package jobmaster

import (
	"fmt"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// Slot allocation: slot usage is derived from the committed executions of every job (a slot
// is busy from the CreateAttempts commit until its execution is committed terminal), the
// candidates are the usable TMs of the registry. place is the pure part.

// slotsInUse returns, per TM, the slot indexes held by non-terminal executions of every job.
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

// allocate places n tasks on the usable TMs' free slots.
func (t *term) allocate(n int) ([]placement, error) {
	// A TM gets tasks only once it confirmed the current pool (isolation.go).
	return place(t.jm.Placeable(), t.slotsInUse(), n)
}

// place puts n tasks on free slots, spreading them across TMs: each goes to the TM with the
// most free slots (ties by the order of tms, which the registry sorts by id), on its lowest
// free slot index. With fewer than n free slots it places none and returns ErrNoSlots: the
// deployment waits.
func place(tms []TaskManager, used map[string]map[int32]bool, n int) ([]placement, error) {
	free := map[string][]int32{}
	for _, tm := range tms {
		for i := int32(0); i < tm.Slots; i++ {
			if !used[tm.ID][i] {
				free[tm.ID] = append(free[tm.ID], i)
			}
		}
	}
	total := 0
	for _, f := range free {
		total += len(f)
	}
	if total < n {
		return nil, fmt.Errorf("%w: %d needed, %d free on %d task managers", ErrNoSlots, n, total, len(tms))
	}
	out := make([]placement, 0, n)
	for len(out) < n {
		best := -1
		for i, tm := range tms {
			if len(free[tm.ID]) == 0 {
				continue
			}
			if best < 0 || len(free[tm.ID]) > len(free[tms[best].ID]) {
				best = i
			}
		}
		tm := tms[best]
		out = append(out, placement{tm: tm, slot: free[tm.ID][0]})
		free[tm.ID] = free[tm.ID][1:]
	}
	return out, nil
}
