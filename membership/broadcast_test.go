package membership

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestUpdateMetaSurvivesALostBroadcastNotice: memberlist's UpdateNode can miss the notice of a
// broadcast that went out before it started to wait (setMeta explains). Here the first call
// queues the broadcast but reports a timeout, as such a call does; UpdateMeta still succeeds,
// within one round rather than the whole BroadcastTimeout, and the peer has the metadata.
func TestUpdateMetaSurvivesALostBroadcastNotice(t *testing.T) {
	a := newNode(t, jm("jm-1"), nil)
	b := newNode(t, jm("jm-2"), func(c *Config) { c.Join = []string{a.Addr()} })
	waitFor(t, settle, "jm-1 to see jm-2", func() (bool, string) { return liveCount(a) == 2, describe(a.Members()) })

	calls := 0
	send := a.updateNode
	a.updateNode = func(timeout time.Duration) error {
		calls++
		if calls == 1 {
			_ = send(time.Nanosecond) // queued and sent; its notice is not waited for
			return errors.New("timeout waiting for update broadcast")
		}
		return send(timeout)
	}
	start := time.Now()
	if err := a.UpdateMeta(func(m *Meta) { m.Epoch = 3 }); err != nil {
		t.Fatalf("UpdateMeta after a lost notice: %v (%d calls of UpdateNode)", err, calls)
	}
	if took := time.Since(start); calls < 2 || took >= a.cfg.BroadcastTimeout {
		t.Fatalf("UpdateMeta took %s and %d calls of UpdateNode, want a second call within BroadcastTimeout %s", took, calls, a.cfg.BroadcastTimeout)
	}
	waitFor(t, settle, "jm-2 to see jm-1 at epoch 3", func() (bool, string) {
		m, _ := memberNamed(b, "jm-1")
		return m.Meta.Epoch == 3, describe(b.Members())
	})
}

// TestUpdateMetaFailsWhenTheBroadcastNeverGoesOut: a broadcast that no round confirms fails at
// BroadcastTimeout, and the error names the limit; the metadata stays in force locally.
func TestUpdateMetaFailsWhenTheBroadcastNeverGoesOut(t *testing.T) {
	a := newNode(t, jm("jm-1"), func(c *Config) { c.BroadcastTimeout = 500 * time.Millisecond })
	calls := 0
	a.updateNode = func(timeout time.Duration) error {
		calls++
		if timeout <= 0 {
			t.Errorf("UpdateNode called with timeout %s: it would wait without end", timeout)
		}
		<-time.After(timeout)
		return errors.New("timeout waiting for update broadcast")
	}
	start := time.Now()
	err := a.UpdateMeta(func(m *Meta) { m.Epoch = 4 })
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "BroadcastTimeout") || !strings.Contains(err.Error(), "500ms") {
		t.Fatalf("UpdateMeta = %v, want an error naming BroadcastTimeout 500ms", err)
	}
	if took < 500*time.Millisecond || calls < 2 {
		t.Fatalf("UpdateMeta gave up after %s and %d rounds, want 500ms in rounds of %s", took, calls, a.broadcastRound)
	}
	if got := a.LocalMeta().Epoch; got != 4 {
		t.Fatalf("local epoch %d after the failed broadcast, want 4 (the metadata stays in force)", got)
	}
}

// TestUpdateMetaConfirmsEveryBroadcastOnAnEncryptedPool: 100 metadata updates across an
// encrypted six-member pool holding two keys (the setting in which the lost notice was found),
// each confirmed; every member then holds the last epoch of every other. The BroadcastTimeout
// is 10 s so that a machine loaded far past its cores (where a 2 s confirmation really can
// take longer) does not fail it; a lost notice without the rounds fails it at any timeout.
func TestUpdateMetaConfirmsEveryBroadcastOnAnEncryptedPool(t *testing.T) {
	metas := []Meta{jm("jm-1"), jm("jm-2"), jm("jm-3"), tm("tm-1", 2), tm("tm-2", 2), tm("tm-3", 2)}
	var nodes []*Membership
	for i, meta := range metas {
		var join []string
		if i > 0 {
			join = []string{nodes[0].Addr()}
		}
		nodes = append(nodes, newNode(t, meta, func(c *Config) {
			c.Join, c.SecretKey, c.BroadcastTimeout = join, bytes.Repeat([]byte{1}, 32), settle
		}))
	}
	for _, n := range nodes {
		waitFor(t, settle, n.Name()+" to see six members", func() (bool, string) { return liveCount(n) == 6, describe(n.Members()) })
	}
	for _, n := range nodes {
		if err := n.InstallKey(bytes.Repeat([]byte{2}, 16)); err != nil {
			t.Fatal(err)
		}
	}
	last := map[string]uint64{}
	for i := 1; i <= 100; i++ {
		n := nodes[i%len(nodes)]
		start := time.Now()
		if err := n.UpdateMeta(func(m *Meta) { m.Epoch = uint64(i) }); err != nil {
			t.Fatalf("update %d on %s: %v after %s", i, n.Name(), err, time.Since(start))
		}
		last[n.Name()] = uint64(i)
	}
	for _, n := range nodes {
		waitFor(t, settle, n.Name()+" to see every member's last epoch", func() (bool, string) {
			for _, mb := range n.Members() {
				if mb.Meta.Epoch != last[mb.Name] {
					return false, fmt.Sprintf("%s at epoch %d, want %d", mb.Name, mb.Meta.Epoch, last[mb.Name])
				}
			}
			return true, ""
		})
	}
}
