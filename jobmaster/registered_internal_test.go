package jobmaster

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// TestOnlyTaskManagersRegisteredInTheTermAreUsable: gossip alone makes no TM usable nor
// accepts its heartbeat; a registration does, until the next term begins; a refused
// registration unregisters the TM and is kept for the id until it registers again.
func TestOnlyTaskManagersRegisteredInTheTermAreUsable(t *testing.T) {
	r := newRegistry(hclog.NewNullLogger(), time.Second, 0)
	usable := func() []string {
		var out []string
		for _, tm := range r.Usable(time.Minute) {
			out = append(out, tm.ID)
		}
		return out
	}
	r.Upsert("tm1", "127.0.0.1:1", "127.0.0.1:2", 16, false) // gossip
	r.SetGossip("tm1", "alive")
	if u := usable(); len(u) != 0 || r.TouchOf("tm1", "") {
		t.Fatalf("a TM known by gossip alone: usable %v, heartbeat accepted %v", u, r.TouchOf("tm1", ""))
	}
	if _, err := r.Register("tm1", "aaaa", "127.0.0.1:1", "127.0.0.1:2", 4); err != nil {
		t.Fatal(err)
	}
	if u := usable(); fmt.Sprint(u) != "[tm1]" || !r.TouchOf("tm1", "aaaa") {
		t.Fatalf("a registered TM: usable %v", u)
	}
	r.BeginTerm()
	if u := usable(); len(u) != 0 || r.TouchOf("tm1", "aaaa") {
		t.Fatalf("a TM registered in an earlier term: usable %v", u)
	}
	if _, err := r.Register("tm1", "aaaa", "127.0.0.1:1", "127.0.0.1:2", 4); err != nil {
		t.Fatal(err)
	}
	if !r.Refuse("tm1", "slots must be in [1, 1024], got 1025") || r.Refuse("tm1", "slots must be in [1, 1024], got 1025") {
		t.Fatal("Refuse: a new reason must be fresh once, a repeated one not")
	}
	if u := usable(); len(u) != 0 || r.Refused()["tm1"].Reason == "" {
		t.Fatalf("a refused TM: usable %v, refused %v", u, r.Refused())
	}
	if _, err := r.Register("tm1", "aaaa", "127.0.0.1:1", "127.0.0.1:2", 4); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Refused()["tm1"]; ok {
		t.Fatal("a successful registration keeps the refusal")
	}
	// Made-up ids cannot grow the refusals without bound; a refused id adds no TM.
	for i := range 2 * maxRefused {
		r.Refuse(fmt.Sprintf("ghost%d", i), "no")
	}
	if n := len(r.Refused()); n != maxRefused {
		t.Fatalf("%d refusals kept, want %d", n, maxRefused)
	}
	if n := len(r.List()); n != 1 {
		t.Fatalf("refused ids entered the registry: %d TMs", n)
	}
}
