package dataplane

import (
	"sync"
	"sync/atomic"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// eventKind says what an Event brings.
type eventKind uint8

const (
	evOpened  eventKind = iota + 1 // the producer accepted the channel
	evBatch                        // records of a remote channel (batch), the last with end_of_partition
	evReady                        // a local channel has something: poll it
	evLocal                        // a local channel's subscription answered (local or err)
	evRefused                      // the producer refused the channel (err); after the open: it failed there
	evBroken                       // the channel's stream broke (err)
	evUpdated                      // the channel's descriptor changed (UpdatePartitionInfo)
	evRetry                        // a backoff passed, or the wait for a producer ended: open again
)

// Event is one thing that happened to channel ch of a ChannelSet, in its open gen.
type Event struct {
	kind  eventKind
	ch    int
	gen   uint32
	batch *pb.RecordBatch
	local subpartitionReader
	err   error
}

// Channel is the index of the event's channel in its set, in the order added.
func (ev Event) Channel() int { return ev.ch }

// inbox is where every channel of one task delivers: the Exchange streams' readers, the local
// subpartitions' wake-ups, descriptor updates and timers push events, and the task's loop takes
// them all at once. Pushing never waits: what a channel may have in it is bounded by its
// credit (remote) or by one wake-up (local).
type inbox struct {
	// bytes counts the encoded batches delivered from Exchange streams: the consumer task's
	// (nil: not counted; set before any channel opens).
	bytes  *atomic.Int64
	mu     sync.Mutex
	events []Event
	spare  []Event
	closed bool
	signal chan struct{} // capacity 1: events are waiting
}

func newInbox() *inbox { return &inbox{signal: make(chan struct{}, 1)} }

// push adds an event; it reports false when the inbox was closed (the event is dropped).
func (q *inbox) push(ev Event) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	q.events = append(q.events, ev)
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
	return true
}

// take returns every waiting event; the slice is reused by the call after next.
func (q *inbox) take() []Event {
	q.mu.Lock()
	defer q.mu.Unlock()
	evs := q.events
	q.events, q.spare = q.spare[:0], evs
	return evs
}

// close drops every later push and returns what was still waiting.
func (q *inbox) close() []Event {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	evs := q.events
	q.events = nil
	return evs
}
