package nemesis

import (
	"context"
	"fmt"
	"math/rand"
	"sort"
	"time"
)

// MembershipChangeLength is how long a membership-change keeps its JM cut off: room for an
// election on the majority side (the cut JM may be the leader), the removal, and the new JM's
// start and join, with the cut still on afterwards.
const MembershipChangeLength = 30 * time.Second

// RemovedWatch is how long after the cut heals the removed JM runs on as it was (it knows no
// leader, stands for election and is refused) before the nemesis restarts it with its old
// flags and data.
const RemovedWatch = 8 * time.Second

// removedWatch is RemovedWatch; the unit tests shorten it.
var removedWatch = RemovedWatch

// SpareJM is the JobMaster a membership change adds: the topology's spare namespace (netns
// AddSpareJMs), whose process is not started with the cluster.
const SpareJM = "jm4"

// MembershipChanger is implemented by targets that can change the Raft configuration the way an
// operator does.
type MembershipChanger interface {
	// ChangeMembership removes remove from the Raft configuration through the JMs of via (the
	// majority side: `jmnode raft remove` against them) and starts add, a new JM with the join
	// flags a user gives one, returning once add is a voter.
	ChangeMembership(ctx context.Context, via []string, remove, add string) error
	// RestartRemoved kills the removed JM with SIGKILL and starts it again with its old flags
	// and data; healedAt is when its cut was healed.
	RestartRemoved(ctx context.Context, removed string, healedAt time.Time) error
}

// resolveMembership picks the JM to cut off and remove (any JM, the leader included) and cuts it
// from every other JM and from the JM to be added; TMs and clients still reach it.
func resolveMembership(a Action, rng *rand.Rand, v View) (Action, error) {
	if len(v.JMs) < 3 {
		return a, fmt.Errorf("nemesis: a membership change needs three JMs, have %d", len(v.JMs))
	}
	jms := append([]string(nil), v.JMs...)
	sort.Strings(jms)
	victim := jms[rng.Intn(len(jms))]
	var rest []string
	for _, n := range jms {
		if n != victim {
			rest = append(rest, n)
		}
	}
	a.Grudge = Partition([]string{victim}, append(rest, SpareJM))
	a.Remove, a.Add = victim, SpareJM
	return a, nil
}

// majority lists the JMs on the far side of a membership change's cut, without the one added.
func (a Action) majority() []string {
	var out []string
	for _, n := range a.Grudge[a.Remove] {
		if n != a.Add {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// applyMembership removes and adds, once the cut is on.
func (e *Executor) applyMembership(ctx context.Context, a Action) error {
	if a.Remove == "" {
		return nil
	}
	mc, ok := e.T.(MembershipChanger)
	if !ok {
		return fmt.Errorf("%w: membership change", ErrUnsupportedFault)
	}
	return mc.ChangeMembership(ctx, a.majority(), a.Remove, a.Add)
}

// healMembership runs after the cut is healed: the removed JM runs on for RemovedWatch, then is
// restarted with its old flags and data.
func (e *Executor) healMembership(ctx context.Context, a Action) error {
	if a.Remove == "" {
		return nil
	}
	mc, ok := e.T.(MembershipChanger)
	if !ok {
		return fmt.Errorf("%w: membership change", ErrUnsupportedFault)
	}
	healedAt := time.Now() // Heal flushed the cut before it called here
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(removedWatch):
	}
	return mc.RestartRemoved(ctx, a.Remove, healedAt)
}
