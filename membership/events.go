package membership

import (
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
)

// EventKind says what happened to a member.
type EventKind int

// The kinds of membership events.
const (
	// EventJoin: a node joined, or came back after being dead or left.
	EventJoin EventKind = iota + 1
	// EventUpdate: a node's metadata changed.
	EventUpdate
	// EventSuspect is reserved and not emitted: memberlist v0.6.0 exposes
	// no suspicion state, by callback or by Members (see DESIGN.md).
	EventSuspect
	// EventDead: failure detection declared a node dead.
	EventDead
	// EventLeave: a node left the pool through Leave.
	EventLeave
)

// String returns the lower-case name of k.
func (k EventKind) String() string {
	switch k {
	case EventJoin:
		return "join"
	case EventUpdate:
		return "update"
	case EventSuspect:
		return "suspect"
	case EventDead:
		return "dead"
	case EventLeave:
		return "leave"
	default:
		return "unknown"
	}
}

// Event is one change of one member, carrying the member as it is after it.
type Event struct {
	Kind   EventKind
	Member Member
}

// broker fans events out to subscribers without ever blocking the sender.
type broker struct {
	logger  hclog.Logger
	dropped atomic.Uint64

	mu     sync.Mutex
	subs   map[uint64]chan Event
	next   uint64
	closed bool
}

func newBroker(logger hclog.Logger) *broker {
	return &broker{logger: logger, subs: make(map[uint64]chan Event)}
}

// subscribe registers a subscriber with a channel of the given buffer. The
// returned func unsubscribes and closes the channel; it may be called many
// times. After close the channel is returned already closed.
func (b *broker) subscribe(buffer int) (<-chan Event, func()) {
	if buffer < 0 {
		buffer = 0
	}
	ch := make(chan Event, buffer)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		close(ch)
		return ch, func() {}
	}
	id := b.next
	b.next++
	b.subs[id] = ch
	return ch, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if c, ok := b.subs[id]; ok {
			delete(b.subs, id)
			close(c)
		}
	}
}

// publish offers ev to every subscriber; a full subscriber loses it.
func (b *broker) publish(ev Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, ch := range b.subs {
		select {
		case ch <- ev:
		default:
			n := b.dropped.Add(1)
			b.logger.Warn("subscriber full, event dropped",
				"kind", ev.Kind.String(), "member", ev.Member.Name, "dropped_total", n)
		}
	}
}

// close closes every subscriber channel; later publishes are ignored.
func (b *broker) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for id, ch := range b.subs {
		delete(b.subs, id)
		close(ch)
	}
}
