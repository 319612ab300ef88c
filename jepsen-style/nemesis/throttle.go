package nemesis

import (
	"errors"
	"fmt"
	"math/rand"
	"time"
)

// throttle-leader: the leader's process is moved into a cgroup of its own with a CPU quota of
// 5-10 % of one core (5-10 ms per 100 ms period) for ThrottleLength, then moved back. It is
// the shape of an overloaded controller (KAFKA-15019): alive, answering, slow. The rule it
// checks (jobmaster/DESIGN.md, "A starved leader"): no TaskManager fenced or declared lost
// because the leader was slow; a leader that cannot keep up hands leadership over.

// ThrottleLength is how long a throttle-leader fault keeps the leader under its quota.
const ThrottleLength = 30 * time.Second

// Throttle quotas, in µs of CPU per 100 ms period: 5-10 % of one core.
const (
	ThrottleMinQuotaUs = 5000
	ThrottleMaxQuotaUs = 10000
)

// Throttler is implemented by targets whose node processes can be put under a CPU quota
// (Throttle: quotaUs of CPU per 100 ms) and released from it (Unthrottle: nothing when the
// node is not throttled).
type Throttler interface {
	Throttle(node string, quotaUs int) error
	Unthrottle(node string) error
}

// resolveThrottle picks the quota of a throttle-leader fault from its pick.
func resolveThrottle(rng *rand.Rand, leader string) map[string]int {
	return map[string]int{leader: ThrottleMinQuotaUs + rng.Intn(ThrottleMaxQuotaUs-ThrottleMinQuotaUs+1)}
}

// applyThrottle puts each node of the action under its quota.
func (e *Executor) applyThrottle(a Action) error {
	if len(a.Throttle) == 0 {
		return nil
	}
	th, ok := e.T.(Throttler)
	if !ok {
		return fmt.Errorf("%w: throttle a process", ErrUnsupportedFault)
	}
	for _, n := range sortedKeysOf(a.Throttle) {
		if err := th.Throttle(n, a.Throttle[n]); err != nil {
			return err
		}
	}
	return nil
}

// healThrottle releases the given nodes from their quota (a target that cannot throttle has
// nothing to release).
func (e *Executor) healThrottle(nodes []string) error {
	th, ok := e.T.(Throttler)
	if !ok {
		return nil
	}
	var errs []error
	for _, n := range nodes {
		if err := th.Unthrottle(n); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
