package main

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/membership"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestGossipKeyRotationOnAProcessCluster rotates the gossip key of a TLS cluster of six
// processes (three JobMasters, three TaskManagers) with the CLI while a streaming job runs:
// steps out of order are refused and change nothing; install, use, remove leave every member
// with only the new key, in memory and in its keyring file; no member is declared failed by
// any other, no task restarts; each change has an audit line naming the operator;
// and a TaskManager restarted with its old --gossip-key rejoins with the rotated keyring.
func TestGossipKeyRotationOnAProcessCluster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds jmnode and runs processes")
	}
	o, flags, ca, certs := tlsProcs(t, 3)
	d := newProcessCluster(t, o)
	d.sec = operatorTLS(t, ca, certs)
	before := submitChain(t, d, "rotation", 2)
	leader, err := d.waitLeader(context.Background(), "", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	addr := leader.LeaderGrpcAddress
	oldKey := keyFlag(t, o.JMFlags)
	newKey, err := membership.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	oldFP, newFP := fingerprint(t, oldKey), fingerprint(t, newKey)
	cli := func(args ...string) error {
		return runCLI(append(append([]string{"gossip", "keyring"}, args...), append([]string{"--addr", addr, "--timeout", "10s"}, flags("operator", "alice")...)...))
	}
	list := func() []*pb.MemberKeyring {
		t.Helper()
		c := d.client(addr)
		defer c.cc.Close()
		var resp *pb.GossipKeyringResponse
		if err := c.call(10*time.Second, func(ctx context.Context) (err error) {
			resp, err = c.operator().GossipKeyring(ctx, &pb.KeyringRequest{Op: pb.KeyringOp_KEYRING_OP_LIST})
			return err
		}); err != nil {
			t.Fatalf("keyring list: %v", err)
		}
		return resp.Members
	}
	expect := func(when, primary string, keys ...string) {
		t.Helper()
		ms := list()
		if len(ms) != 6 {
			t.Fatalf("%s: keyring list has %d members, want 6: %v", when, len(ms), ms)
		}
		for _, m := range ms {
			if m.Error != "" || m.Primary != primary || !slices.Equal(m.Keys, keys) {
				t.Fatalf("%s: %s has primary %s keys %v error %q; want %s %v", when, m.Name, m.Primary, m.Keys, m.Error, primary, keys)
			}
		}
	}
	expect("at start", oldFP, oldFP)

	if err := cli("use", newKey); err == nil || !strings.Contains(err.Error(), "not installed on") {
		t.Fatalf("use before install = %v; want refused, naming the members without the key", err)
	}
	if err := cli("remove", oldKey); err == nil || !strings.Contains(err.Error(), "still the primary on") {
		t.Fatalf("remove of the primary = %v; want refused", err)
	}
	if err := cli("install", "bm90IGEga2V5"); err == nil || !strings.Contains(err.Error(), "16, 24 or 32 bytes") {
		t.Fatalf("install of a 7-byte key = %v; want refused naming the sizes", err)
	}
	reader := runCLI(append([]string{"gossip", "keyring", "install", newKey, "--addr", addr, "--timeout", "5s"}, flags("reader", "rita")...))
	if reader == nil || !strings.Contains(reader.Error(), "PermissionDenied") {
		t.Fatalf("a reader's install = %v; want PermissionDenied", reader)
	}
	expect("after the refused steps", oldFP, oldFP)

	if err := cli("install", newKey); err != nil {
		t.Fatal(err)
	}
	expect("after install", oldFP, oldFP, newFP)
	keyFile := filepath.Join(t.TempDir(), "new.key")
	if err := os.WriteFile(keyFile, []byte(newKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cli("use", "--key-file", keyFile); err != nil {
		t.Fatal(err)
	}
	expect("after use", newFP, newFP, oldFP)
	if err := cli("remove", oldKey); err != nil {
		t.Fatal(err)
	}
	expect("after remove", newFP, newFP)

	for _, p := range d.JMs {
		file := filepath.Join(p.DataDir, "gossip.keyring")
		st, ok, err := membership.LoadKeyringFile(file)
		if err != nil || !ok || membership.KeyFingerprint(st.Primary) != newFP || len(st.Keys) != 1 {
			t.Fatalf("%s: keyring file %s after the rotation: %v %v %v", p.Name, file, ok, len(st.Keys), err)
		}
	}

	// The rotation cost nothing: no task restarted, no member was declared failed (a suspicion
	// refuted at once is memberlist's normal life on a loaded machine, and not what a wrong
	// key causes: with a key missing, the probes of every member fail until it is dead).
	after, err := d.waitJob(context.Background(), before.JobGraph.JobId, 10*time.Second, allRunning)
	if err != nil {
		t.Fatal(err)
	}
	if diff := compareAttempts(before, after); len(diff) > 0 {
		t.Fatalf("attempts changed during the rotation: %v", diff)
	}
	declaredFailed := regexp.MustCompile(`Marking \S+ as failed`)
	for _, p := range d.Procs() {
		if l := declaredFailed.FindString(p.LogTail(100000)); l != "" {
			t.Fatalf("%s logged %q during the rotation", p.Name, l)
		}
	}
	audit := 0
	for _, p := range d.JMs {
		for _, l := range strings.Split(p.LogTail(100000), "\n") {
			if strings.Contains(l, "gossip keyring") && strings.Contains(l, "on the pool") && strings.Contains(l, "alice (operator)") {
				audit++
			}
		}
	}
	if audit < 3 {
		t.Fatalf("%d audit lines naming alice for the pool's keyring changes; want one per change (3)", audit)
	}

	// A TaskManager restarted with its old --gossip-key: its keyring file wins, so it rejoins.
	tm := d.TMs[0]
	if err := tm.Kill(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := tm.Revive(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	var ms []*pb.MemberKeyring
	for time.Now().Before(deadline) {
		ms = list()
		i := slices.IndexFunc(ms, func(m *pb.MemberKeyring) bool { return m.Name == tm.Name })
		if len(ms) == 6 && i >= 0 && ms[i].Error == "" && ms[i].Primary == newFP {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s did not rejoin with the rotated keyring within 30s; last list: %v", tm.Name, ms)
}

func keyFlag(t *testing.T, flags []string) string {
	t.Helper()
	i := slices.Index(flags, "--gossip-key")
	if i < 0 || i+1 >= len(flags) {
		t.Fatalf("no --gossip-key in %v", flags)
	}
	return flags[i+1]
}

func fingerprint(t *testing.T, key string) string {
	t.Helper()
	k, err := base64.StdEncoding.DecodeString(key)
	if err != nil {
		t.Fatal(err)
	}
	return membership.KeyFingerprint(k)
}
