package jobmaster

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// TestRegistryIncarnations: a TM restarted with the same id and addresses registers a new
// incarnation. The registry forgets what it knew of the earlier process (its gossip death, the
// lost flag), so the new one is usable at once; it returns the earlier incarnation (whose
// attempts the caller fails); gossip about the earlier incarnation no longer counts; and the
// earlier incarnation can neither register nor heartbeat again.
func TestRegistryIncarnations(t *testing.T) {
	r := newRegistry(hclog.NewNullLogger(), time.Second, 0)
	defer r.close()
	if prev, err := r.Register("tm2", "aaaa", "127.0.0.1:1", "127.0.0.1:2", 4); err != nil || prev != "" {
		t.Fatalf("first registration: %q %v", prev, err)
	}
	// The process dies: gossip says so, the leader declares it lost.
	r.SetGossipOf("tm2", "aaaa", "dead")
	r.MarkLost("tm2")
	if tm, _ := r.Get("tm2"); !tm.Lost || !tm.GoneByGossip() || len(r.Usable(time.Minute)) != 0 {
		t.Fatalf("after the death: %+v", tm)
	}
	// It restarts with a new incarnation and registers.
	prev, err := r.Register("tm2", "bbbb", "127.0.0.1:1", "127.0.0.1:2", 4)
	if err != nil || prev != "aaaa" {
		t.Fatalf("registration of the new incarnation: previous %q, %v", prev, err)
	}
	// Gossip still carries the dead process for a while (and the restarted member's alive can
	// lose to it until it refutes): that news is about the old incarnation.
	r.SetGossipOf("tm2", "aaaa", "dead")
	tm, _ := r.Get("tm2")
	if tm.Lost || tm.GoneByGossip() || tm.Incarnation != "bbbb" || len(r.Usable(time.Minute)) != 1 {
		t.Fatalf("the new incarnation is not usable at once: %+v", tm)
	}
	// The old incarnation cannot come back.
	if _, err := r.Register("tm2", "aaaa", "127.0.0.1:1", "127.0.0.1:2", 4); !errors.Is(err, ErrReplacedIncarnation) {
		t.Fatalf("registration of the replaced incarnation: %v", err)
	}
	if r.TouchOf("tm2", "aaaa") || !r.TouchOf("tm2", "bbbb") {
		t.Fatal("heartbeats: the replaced incarnation accepted or the registered one refused")
	}
	// Gossip about the registered incarnation still counts.
	r.SetGossipOf("tm2", "bbbb", "left")
	if tm, _ := r.Get("tm2"); tm.Gossip != "left" {
		t.Fatalf("gossip of the registered incarnation ignored: %+v", tm)
	}
	// The same incarnation registering again (a re-registration after a leader change) replaces
	// nothing.
	if prev, err := r.Register("tm2", "bbbb", "127.0.0.1:1", "127.0.0.1:2", 4); err != nil || prev != "" {
		t.Fatalf("re-registration: %q %v", prev, err)
	}
}
