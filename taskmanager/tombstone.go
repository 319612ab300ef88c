package taskmanager

// MaxCancelTombstones bounds how many attempts a TM remembers as cancelled before it saw them:
// 65,536 attempt ids (about 4 MiB). A cancel that overtakes its SubmitTask (the leader
// cancels an attempt whose SubmitTask is still in flight, or retried) leaves a tombstone, and
// the SubmitTask that arrives after it is refused instead of starting a task no leader owns.
// The oldest tombstone goes first: by then its SubmitTask has long been answered or abandoned.
const MaxCancelTombstones = 1 << 16

// tombstones is a bounded FIFO set of attempt ids. Guarded by TaskManager.mu.
type tombstones struct {
	ring []string
	next int
	set  map[string]struct{}
}

func newTombstones(n int) *tombstones {
	return &tombstones{ring: make([]string, n), set: make(map[string]struct{}, min(n, 1024))}
}

// add remembers id, forgetting the oldest when full.
func (t *tombstones) add(id string) {
	if _, ok := t.set[id]; ok {
		return
	}
	if old := t.ring[t.next]; old != "" {
		delete(t.set, old)
	}
	t.ring[t.next] = id
	t.next = (t.next + 1) % len(t.ring)
	t.set[id] = struct{}{}
}

func (t *tombstones) has(id string) bool {
	_, ok := t.set[id]
	return ok
}

func (t *tombstones) len() int { return len(t.set) }
