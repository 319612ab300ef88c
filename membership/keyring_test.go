package membership

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// TestKeyRotationWithSixMembers rotates the gossip key of a six-member pool (install the new
// key everywhere, use it everywhere, remove the old one everywhere), one member at a time as a
// fan-out does, and checks that no member ever fails to decrypt a packet or stream of another
// (what a wrong order of the steps causes), that gossip keeps flowing after each step (a
// metadata change reaches every member, all six live), and that afterwards the pool speaks only
// the new key: a stranger with the old key cannot join, one with the new key can.
//
// A member marked dead during the rotation is logged, not failed: on a loaded machine the test
// profile's failure detector (150 ms probe timeout) marks live members dead whatever the keys
// (seen with no decrypt failure at all), and such a member refutes it at once; one cut off by
// its keys stays cut off and fails the live check after the step.
func TestKeyRotationWithSixMembers(t *testing.T) {
	oldKey, newKey := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 16)
	dir := t.TempDir()
	decrypt := &lineWatch{word: "decrypt"}
	logger := testLoggerTo(t, decrypt)
	metas := []Meta{jm("jm-1"), jm("jm-2"), jm("jm-3"), tm("tm-1", 2), tm("tm-2", 2), tm("tm-3", 2)}
	var nodes []*Membership
	for i, meta := range metas {
		var join []string
		if i > 0 {
			join = []string{nodes[0].Addr()}
		}
		nodes = append(nodes, newNode(t, meta, func(c *Config) {
			c.SecretKey, c.Join, c.Logger = oldKey, join, logger
			c.BroadcastTimeout = settle // the test profile's 2 s is tight on a machine loaded past its cores
			c.KeyringFile = filepath.Join(dir, meta.ID+".keyring")
		}))
	}
	for _, n := range nodes {
		waitFor(t, settle, n.Name()+" to see six members", func() (bool, string) {
			return liveCount(n) == 6, describe(n.Members())
		})
	}

	// Every member's events, from here on: none may be a death or a departure.
	var mu sync.Mutex
	var gone []string
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait) // registered before the unsubscribes, so it runs after they close the channels
	for _, n := range nodes {
		ch, unsubscribe := n.Subscribe(1024)
		t.Cleanup(unsubscribe)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ev := range ch {
				if ev.Kind == EventDead || ev.Kind == EventLeave {
					mu.Lock()
					gone = append(gone, fmt.Sprintf("%s saw %s %s", n.Name(), ev.Member.Name, ev.Kind))
					mu.Unlock()
				}
			}
		}()
	}

	step := 0
	gossipFlows := func(after string) {
		t.Helper()
		step++
		for _, n := range nodes {
			if err := n.UpdateMeta(func(m *Meta) { m.Epoch = uint64(step) }); err != nil {
				t.Fatalf("%s: update meta after %s: %v", n.Name(), after, err)
			}
		}
		for _, n := range nodes {
			waitFor(t, settle, n.Name()+" to see every member's epoch after "+after, func() (bool, string) {
				for _, mb := range n.Members() {
					if !mb.Live() || mb.Meta.Epoch != uint64(step) {
						return false, describe(n.Members())
					}
				}
				return len(n.Members()) == 6, describe(n.Members())
			})
		}
	}
	each := func(what string, fn func(*Membership) error) {
		t.Helper()
		for _, n := range nodes {
			if err := fn(n); err != nil {
				t.Fatalf("%s on %s: %v", what, n.Name(), err)
			}
		}
		gossipFlows(what)
	}

	each("install", func(n *Membership) error { return n.InstallKey(newKey) })
	// Use before every member has installed it would be refused by the fan-out's check; on one
	// member, a key it lacks is refused by the member itself.
	each("use", func(n *Membership) error { return n.UseKey(newKey) })
	for _, n := range nodes {
		if err := n.RemoveKey(newKey); !errors.Is(err, ErrRemovePrimary) {
			t.Fatalf("%s: removing the primary = %v, want ErrRemovePrimary", n.Name(), err)
		}
	}
	each("remove the old key", func(n *Membership) error { return n.RemoveKey(oldKey) })

	if n, first := decrypt.seen(); n > 0 {
		t.Fatalf("%d log lines of failed decryption during the rotation, the first: %s", n, first)
	}
	mu.Lock()
	if len(gone) > 0 {
		t.Logf("%d deaths or departures seen during the rotation, all refuted (every member was live after each step): %s",
			len(gone), strings.Join(gone[:min(len(gone), 5)], "; "))
	}
	mu.Unlock()
	for _, n := range nodes {
		st, err := n.Keyring()
		if err != nil || !bytes.Equal(st.Primary, newKey) || len(st.Keys) != 1 {
			t.Fatalf("%s keyring after rotation: %v %v", n.Name(), st.Keys, err)
		}
		file, ok, err := LoadKeyringFile(filepath.Join(dir, n.Name()+".keyring"))
		if err != nil || !ok || !bytes.Equal(file.Primary, newKey) || len(file.Keys) != 1 {
			t.Fatalf("%s keyring file after rotation: %v %v %v", n.Name(), file.Keys, ok, err)
		}
	}

	stale := newNode(t, tm("tm-old", 2), func(c *Config) { c.SecretKey = oldKey })
	if _, err := stale.Join([]string{nodes[0].Addr()}); !errors.Is(err, ErrNoPeers) {
		t.Fatalf("a member with only the removed key joined: %v", err)
	}
	fresh := newNode(t, tm("tm-new", 2), func(c *Config) { c.SecretKey = newKey })
	if _, err := fresh.Join([]string{nodes[0].Addr()}); err != nil {
		t.Fatalf("a member with the new key could not join: %v", err)
	}
	waitFor(t, settle, "the pool to see the member with the new key", func() (bool, string) {
		return liveCount(nodes[5]) == 7, describe(nodes[5].Members())
	})
}

func liveCount(n *Membership) int {
	c := 0
	for _, mb := range n.Members() {
		if mb.Live() {
			c++
		}
	}
	return c
}

// TestKeyringRefusals: each keyring change that would break gossip or is malformed is refused
// with its own error and changes nothing, in memory or on disk.
func TestKeyringRefusals(t *testing.T) {
	key, other := bytes.Repeat([]byte{3}, 32), bytes.Repeat([]byte{4}, 32)
	file := filepath.Join(t.TempDir(), "gossip.keyring")
	n := newNode(t, jm("jm-1"), func(c *Config) { c.SecretKey, c.KeyringFile = key, file })
	plain := newNode(t, jm("jm-2"), nil)

	for name, err := range map[string]error{
		"install on a plaintext pool": plain.InstallKey(other),
		"list on a plaintext pool":    func() error { _, err := plain.Keyring(); return err }(),
	} {
		if !errors.Is(err, ErrNotEncrypted) {
			t.Errorf("%s = %v, want ErrNotEncrypted", name, err)
		}
	}
	for name, c := range map[string]struct {
		err  error
		want error
	}{
		"install a 7-byte key":     {n.InstallKey([]byte("short!!")), ErrBadKey},
		"use a key not installed":  {n.UseKey(other), ErrKeyNotInstalled},
		"remove a key not there":   {n.RemoveKey(other), ErrKeyNotInstalled},
		"remove the primary":       {n.RemoveKey(key), ErrRemovePrimary},
		"remove a malformed key":   {n.RemoveKey(nil), ErrBadKey},
		"use an empty key":         {n.UseKey([]byte{}), ErrBadKey},
		"install a 33-byte key":    {n.InstallKey(bytes.Repeat([]byte{5}, 33)), ErrBadKey},
		"use a 16-byte stranger":   {n.UseKey(bytes.Repeat([]byte{6}, 16)), ErrKeyNotInstalled},
		"remove a 24-byte unknown": {n.RemoveKey(bytes.Repeat([]byte{6}, 24)), ErrKeyNotInstalled},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s = %v, want %v", name, c.err, c.want)
		}
	}
	st, err := n.Keyring()
	if err != nil || len(st.Keys) != 1 || !bytes.Equal(st.Primary, key) {
		t.Fatalf("keyring changed by refused calls: %v %v", st.Keys, err)
	}
	disk, ok, err := LoadKeyringFile(file)
	if err != nil || !ok || len(disk.Keys) != 1 || !bytes.Equal(disk.Primary, key) {
		t.Fatalf("keyring file changed by refused calls: %v %v %v", disk.Keys, ok, err)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != KeyringFileMode {
		t.Fatalf("keyring file mode = %v (%v), want %v", fi.Mode().Perm(), err, os.FileMode(KeyringFileMode))
	}
}

// TestKeyringFileWinsAtRestart: a node restarted with its original --gossip-key but a keyring
// file that a rotation changed starts with the rotated keyring.
func TestKeyringFileWinsAtRestart(t *testing.T) {
	oldKey, newKey := bytes.Repeat([]byte{7}, 32), bytes.Repeat([]byte{8}, 32)
	file := filepath.Join(t.TempDir(), "gossip.keyring")
	cfg := func(c *Config) { c.SecretKey, c.KeyringFile = oldKey, file }
	n := newNode(t, jm("jm-1"), cfg)
	for _, step := range []func([]byte) error{n.InstallKey, n.UseKey} {
		if err := step(newKey); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.RemoveKey(oldKey); err != nil {
		t.Fatal(err)
	}
	if err := n.Shutdown(); err != nil {
		t.Fatal(err)
	}
	again := newNode(t, jm("jm-1"), cfg)
	st, err := again.Keyring()
	if err != nil || !bytes.Equal(st.Primary, newKey) || slices.ContainsFunc(st.Keys, func(k []byte) bool { return bytes.Equal(k, oldKey) }) {
		t.Fatalf("restarted keyring: primary %s, %d keys, %v; want the rotated one", KeyFingerprint(st.Primary), len(st.Keys), err)
	}

	if err := os.WriteFile(file, []byte(`{"primary":"bm90IGEga2V5"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c := TestConfig(jm("jm-9"))
	c.KeyringFile = file
	if _, err := New(c); !errors.Is(err, ErrBadKey) {
		t.Fatalf("New with a malformed keyring file = %v, want ErrBadKey", err)
	}
}
