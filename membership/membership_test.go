package membership

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"
)

const settle = 10 * time.Second // upper bound for gossip to converge on loopback

// startPool starts three JMs and three TMs joined through the first JM.
func startPool(t *testing.T) map[string]*Membership {
	t.Helper()
	first := newNode(t, jm("jm-1"), nil)
	nodes := map[string]*Membership{"jm-1": first}
	join := func(c *Config) { c.Join = []string{first.Addr()} }
	for _, meta := range []Meta{jm("jm-2"), jm("jm-3"), tm("tm-1", 4), tm("tm-2", 4), tm("tm-3", 4)} {
		nodes[meta.ID] = newNode(t, meta, join)
	}
	for id, n := range nodes {
		waitFor(t, settle, id+" to see 6 alive members", func() (bool, string) {
			ms := n.Members()
			alive := 0
			for _, m := range ms {
				if m.State == StateAlive && m.MetaErr == nil {
					alive++
				}
			}
			return alive == 6, describe(ms)
		})
	}
	return nodes
}

func TestPool(t *testing.T) {
	nodes := startPool(t)

	t.Run("metadata and roles", func(t *testing.T) {
		for id, n := range nodes {
			for _, m := range n.Members() {
				want := jm(m.Name)
				if m.Name[:2] == "tm" {
					want = tm(m.Name, 4)
				}
				if m.Meta != want || m.Addr != nodes[m.Name].Addr() {
					t.Fatalf("%s sees %s as %+v at %s, want %+v at %s", id, m.Name, m.Meta, m.Addr, want, nodes[m.Name].Addr())
				}
			}
			if got := names(n.JobMasters()); got != "jm-1,jm-2,jm-3" {
				t.Fatalf("%s JobMasters = %s", id, got)
			}
			if got := names(n.TaskManagers()); got != "tm-1,tm-2,tm-3" {
				t.Fatalf("%s TaskManagers = %s", id, got)
			}
		}
	})

	t.Run("UpdateMeta propagates", func(t *testing.T) {
		events, cancel := nodes["tm-1"].Subscribe(64)
		defer cancel()
		err := nodes["jm-2"].UpdateMeta(func(m *Meta) { m.Epoch = 7; m.Leader = true })
		if err != nil {
			t.Fatalf("UpdateMeta: %v", err)
		}
		if got := nodes["jm-2"].LocalMeta(); got.Epoch != 7 || !got.Leader {
			t.Fatalf("LocalMeta = %+v", got)
		}
		ev := waitEvent(t, events, settle, "update of jm-2", func(ev Event) bool {
			return ev.Kind == EventUpdate && ev.Member.Name == "jm-2" && ev.Member.Meta.Epoch == 7
		})
		if !ev.Member.Meta.Leader || ev.Member.State != StateAlive {
			t.Fatalf("update event member = %+v", ev.Member)
		}
		for id, n := range nodes {
			waitFor(t, settle, id+" to see jm-2 at epoch 7", func() (bool, string) {
				m, _ := memberNamed(n, "jm-2")
				return m.Meta.Epoch == 7 && m.Meta.Leader, describe(n.Members())
			})
		}
	})

	t.Run("Leave is seen as left", func(t *testing.T) {
		events, cancel := nodes["jm-1"].Subscribe(64)
		defer cancel()
		if err := nodes["tm-3"].Leave(2 * time.Second); err != nil {
			t.Fatalf("Leave: %v", err)
		}
		ev := waitEvent(t, events, settle, "leave of tm-3", func(ev Event) bool {
			return ev.Member.Name == "tm-3" && (ev.Kind == EventLeave || ev.Kind == EventDead)
		})
		if ev.Kind != EventLeave || ev.Member.State != StateLeft || ev.Member.Meta.Role != RoleTaskManager {
			t.Fatalf("event = %s %+v, want leave with last meta", ev.Kind, ev.Member)
		}
		if err := nodes["tm-3"].Shutdown(); err != nil {
			t.Fatalf("Shutdown after Leave: %v", err)
		}
		for _, id := range []string{"jm-1", "jm-2", "jm-3", "tm-1", "tm-2"} {
			n := nodes[id]
			waitFor(t, settle, id+" to see tm-3 left", func() (bool, string) {
				m, ok := memberNamed(n, "tm-3")
				return ok && m.State == StateLeft && m.Meta.Slots == 4, describe(n.Members())
			})
		}
	})

	t.Run("abrupt shutdown is seen dead", func(t *testing.T) {
		events, cancel := nodes["jm-3"].Subscribe(64)
		defer cancel()
		if err := nodes["tm-2"].Shutdown(); err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		ev := waitEvent(t, events, settle, "death of tm-2", func(ev Event) bool {
			return ev.Member.Name == "tm-2" && (ev.Kind == EventDead || ev.Kind == EventLeave)
		})
		if ev.Kind != EventDead || ev.Member.State != StateDead || ev.Member.Meta.DataAddr != tm("tm-2", 4).DataAddr {
			t.Fatalf("event = %s %+v, want dead with last meta", ev.Kind, ev.Member)
		}
		for _, id := range []string{"jm-1", "jm-2", "jm-3", "tm-1"} {
			n := nodes[id]
			waitFor(t, settle, id+" to see tm-2 dead and only tm-1 live", func() (bool, string) {
				m, _ := memberNamed(n, "tm-2")
				return m.State == StateDead && names(n.TaskManagers()) == "tm-1",
					describe(n.Members())
			})
			if got := len(n.Members()); got != 6 {
				t.Fatalf("%s lists %d members, want 6 including dead and left: %s", id, got, describe(n.Members()))
			}
		}
	})
}

func TestSecretKey(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	keyed := func(k []byte, join ...string) func(*Config) {
		return func(c *Config) { c.SecretKey = k; c.Join = join }
	}
	a := newNode(t, jm("jm-1"), keyed(key))
	b := newNode(t, jm("jm-2"), keyed(key, a.Addr()))
	c := newNode(t, tm("tm-1", 2), keyed(key, a.Addr()))
	for _, n := range []*Membership{a, b, c} {
		waitFor(t, settle, n.Name()+" to see the keyed pool", func() (bool, string) {
			return len(n.Members()) == 3, describe(n.Members())
		})
	}

	strangers := map[string]*Membership{
		"tm-wrong-key": newNode(t, tm("tm-wrong-key", 2), keyed(bytes.Repeat([]byte{9}, 32))),
		"tm-no-key":    newNode(t, tm("tm-no-key", 2), nil),
	}
	for name, s := range strangers {
		if n, err := s.Join([]string{a.Addr()}); err == nil {
			t.Fatalf("%s joined a keyed pool (contacted %d)", name, n)
		} else if !errors.Is(err, ErrNoPeers) {
			t.Fatalf("%s join error = %v, want ErrNoPeers", name, err)
		}
		if got := names(s.Members()); got != name {
			t.Fatalf("%s sees %s", name, got)
		}
	}
	for _, n := range []*Membership{a, b, c} {
		if got := names(n.Members()); got != "jm-1,jm-2,tm-1" {
			t.Fatalf("%s sees %s after strangers tried to join", n.Name(), got)
		}
	}
}

func TestRejoinLoop(t *testing.T) {
	port, err := freePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	seed := fmt.Sprintf("127.0.0.1:%d", port)
	// The TM starts first: nothing listens at seed, so it retries in the background.
	tmNode := newNode(t, tm("tm-1", 1), func(c *Config) { c.Join = []string{seed} })
	jmNode := newNode(t, jm("jm-1"), func(c *Config) { c.BindAddr = seed })
	for _, n := range []*Membership{tmNode, jmNode} {
		waitFor(t, settle, n.Name()+" to see both nodes", func() (bool, string) {
			return names(n.Members()) == "jm-1,tm-1", describe(n.Members())
		})
	}
}

func TestSubscribers(t *testing.T) {
	a := newNode(t, jm("jm-1"), nil)
	stuck, cancelStuck := a.Subscribe(0) // never read: every event is dropped
	live, cancelLive := a.Subscribe(16)
	defer cancelLive()

	b := newNode(t, tm("tm-1", 1), func(c *Config) { c.Join = []string{a.Addr()} })
	waitEvent(t, live, settle, "join of tm-1", func(ev Event) bool {
		return ev.Kind == EventJoin && ev.Member.Name == "tm-1" && ev.Member.Meta.Slots == 1
	})
	waitFor(t, settle, "a dropped event", func() (bool, string) {
		return a.Dropped() > 0, fmt.Sprint(a.Dropped())
	})

	cancelStuck()
	cancelStuck()
	if _, ok := <-stuck; ok {
		t.Fatal("unsubscribed channel still open")
	}

	if err := b.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := a.Shutdown(); err != nil {
		t.Fatal(err)
	}
	for range live { // drain: Shutdown closes it
	}
	after, cancel := a.Subscribe(1)
	defer cancel()
	if _, ok := <-after; ok {
		t.Fatal("Subscribe after Shutdown returned an open channel")
	}
}

func TestLifecycleErrors(t *testing.T) {
	a := newNode(t, jm("jm-1"), nil)
	before := a.LocalMeta()
	if err := a.UpdateMeta(func(m *Meta) { m.ID = "" }); !errors.Is(err, ErrMissingID) {
		t.Fatalf("UpdateMeta to empty id = %v, want ErrMissingID", err)
	}
	big := string(make([]byte, 600))
	if err := a.UpdateMeta(func(m *Meta) { m.Version = big }); !errors.Is(err, ErrMetaTooLarge) {
		t.Fatalf("UpdateMeta oversized = %v, want ErrMetaTooLarge", err)
	}
	if got := a.LocalMeta(); got != before {
		t.Fatalf("rejected updates changed LocalMeta: %+v", got)
	}
	if n, err := a.Join([]string{a.Addr()}); n != 0 || err != nil {
		t.Fatalf("Join(self) = %d, %v; want 0, nil", n, err)
	}

	if err := a.Leave(time.Second); err != nil {
		t.Fatalf("Leave alone: %v", err)
	}
	if err := a.Leave(time.Second); err != nil {
		t.Fatalf("second Leave: %v", err)
	}
	if err := a.UpdateMeta(func(m *Meta) { m.Epoch++ }); !errors.Is(err, ErrLeft) {
		t.Fatalf("UpdateMeta after Leave = %v, want ErrLeft", err)
	}
	if _, err := a.Join([]string{"127.0.0.1:1"}); !errors.Is(err, ErrLeft) {
		t.Fatalf("Join after Leave = %v, want ErrLeft", err)
	}
	if err := a.Shutdown(); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := a.Shutdown(); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
	if err := a.Leave(time.Second); !errors.Is(err, ErrShutdown) {
		t.Fatalf("Leave after Shutdown = %v, want ErrShutdown", err)
	}
}
