package nemesis

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// TestStoreFaultsUseEveryModeOverSeeds: the corruption scenarios' schedules for seeds 1-3
// resolve to all three modes in every run, deterministically.
func TestStoreFaultsUseEveryModeOverSeeds(t *testing.T) {
	v := View{JMs: []string{"jm1", "jm2", "jm3"}, TMs: []string{"tm1"}, Leader: "jm2"}
	for _, k := range []Kind{CorruptRaftLog, CorruptSnapshot} {
		for seed := int64(1); seed <= 3; seed++ {
			sched := Generate(ScheduleConfig{Kinds: []Kind{k}, Seed: seed, Duration: 60 * time.Second, Warmup: 5 * time.Second})
			modes := map[CorruptMode]bool{}
			for _, f := range sched {
				a, err := Resolve(f, v)
				if err != nil || a.Corrupt == nil || a.Corrupt.Kind != k {
					t.Fatalf("%s seed %d: %+v, %v", k, seed, a, err)
				}
				b, _ := Resolve(f, v)
				if !reflect.DeepEqual(a, b) {
					t.Fatalf("%s seed %d: resolved twice differently: %+v %+v", k, seed, a, b)
				}
				modes[a.Corrupt.Mode] = true
			}
			if len(modes) != 3 {
				t.Fatalf("%s seed %d: %d faults used modes %v", k, seed, len(sched), modes)
			}
		}
	}
}

// TestLostUnsyncedLiesAndKillsTheLeader: one JM gets the lying disk, and at the end it and the
// leader are killed; without a leader the fault is not resolved.
func TestLostUnsyncedLiesAndKillsTheLeader(t *testing.T) {
	v := View{JMs: []string{"jm1", "jm2", "jm3"}, Leader: "jm2"}
	seen := map[string]bool{}
	for pick := int64(0); pick < 20; pick++ {
		a, err := Resolve(Fault{Kind: LostUnsynced, Pick: pick}, v)
		if err != nil || len(a.Failpoints) != 1 {
			t.Fatalf("%+v, %v", a, err)
		}
		for liar, fp := range a.Failpoints {
			seen[liar] = true
			want := []string{liar}
			if liar != "jm2" {
				want = append(want, "jm2")
			}
			if fp != "disk-lose-unsynced" || !reflect.DeepEqual(a.KillAtHeal, want) {
				t.Fatalf("liar %s: failpoints %q, killed at heal %v", liar, fp, a.KillAtHeal)
			}
		}
	}
	if len(seen) != 3 {
		t.Fatalf("the lying JM over 20 picks: %v", seen)
	}
	if _, err := Resolve(Fault{Kind: LostUnsynced}, View{JMs: v.JMs}); err == nil {
		t.Fatal("resolved without a leader")
	}
}

// boltFile writes a bolt file shaped like raft.db: a bucket of 300 entries.
func boltFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "raft.db")
	store, err := raftboltdb.New(raftboltdb.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	var logs []*raft.Log
	for i := uint64(1); i <= 300; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1 + i/100, Type: raft.LogCommand,
			Data: bytes.Repeat([]byte{byte(i)}, 100), AppendedAt: time.Unix(1_700_000_000, int64(i))})
	}
	if err := store.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if err := store.SetUint64([]byte("CurrentTerm"), 4); err != nil {
		t.Fatal(err)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestDamageStoreHitsLiveData: each mode changes the bolt file inside its live pages (a bit
// flip exactly one bit; a truncation ends the file inside them; a copy changes bytes there),
// the same pick the same way.
func TestDamageStoreHitsLiveData(t *testing.T) {
	for _, mode := range CorruptModes() {
		path := boltFile(t)
		spans, err := liveBoltSpans(path)
		if err != nil || len(spans) < 2 {
			t.Fatalf("live spans: %v, %v", spans, err)
		}
		before, _ := os.ReadFile(path)
		c := Corruption{Node: "jm1", Kind: CorruptRaftLog, Mode: mode, Pick: 42}
		d, err := DamageStore(filepath.Dir(path), c)
		what := d.What
		if err != nil || d.File != path || d.Changed == "" {
			t.Fatalf("%s: %+v %v", mode, d, err)
		}
		after, _ := os.ReadFile(path)
		inLive := func(off int64) bool {
			for _, s := range spans {
				if off >= s[0] && off < s[1] {
					return true
				}
			}
			return false
		}
		var diff []int64
		for i := range min(len(before), len(after)) {
			if before[i] != after[i] {
				diff = append(diff, int64(i))
			}
		}
		switch mode {
		case BitFlip:
			if len(diff) != 1 || !inLive(diff[0]) || bitsSet(before[diff[0]]^after[diff[0]]) != 1 || len(after) != len(before) {
				t.Fatalf("bit flip (%s): differences at %v", what, diff)
			}
		case Truncate:
			if len(after) >= len(before) || !inLive(int64(len(after))) || len(diff) != 0 {
				t.Fatalf("truncation (%s): %d -> %d bytes", what, len(before), len(after))
			}
		case CopyChunk:
			if len(diff) == 0 || !inLive(diff[0]) {
				t.Fatalf("copied chunk (%s): differences at %v", what, diff)
			}
		}
		again := boltFile(t)
		d2, _ := DamageStore(filepath.Dir(again), c)
		if d2.What != d.What || d2.Changed != d.Changed {
			t.Fatalf("%s: same pick, different damage: %+v, %+v", mode, d, d2)
		}
	}
}

func bitsSet(b byte) int {
	n := 0
	for ; b != 0; b &= b - 1 {
		n++
	}
	return n
}

// TestDamageStoreTakesTheNewestSnapshot: the snapshot fault damages a file of the newest
// snapshot (by term, index, time) and is skipped when there is none.
func TestDamageStoreTakesTheNewestSnapshot(t *testing.T) {
	dir := t.TempDir()
	c := Corruption{Kind: CorruptSnapshot, Mode: BitFlip, Pick: 3}
	if _, err := DamageStore(dir, c); err == nil || !strings.Contains(err.Error(), "no snapshot") {
		t.Fatalf("no snapshot: %v", err)
	}
	for _, name := range []string{"2-900-1", "3-100-5", "3-100-9", "3-99-20"} {
		d := filepath.Join(dir, "snapshots", name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"state.bin", "meta.json"} {
			if err := os.WriteFile(filepath.Join(d, f), bytes.Repeat([]byte("x"), 64), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	for pick := int64(0); pick < 6; pick++ {
		c.Pick = pick
		d, err := DamageStore(dir, c)
		if err != nil || filepath.Base(filepath.Dir(d.File)) != "3-100-9" || d.Changed == "" {
			t.Fatalf("damaged %+v, %v", d, err)
		}
	}
}

// fakeDamager is a Target whose damaged JM exits with said (or keeps running when said is "").
type fakeDamager struct {
	fakeTarget
	dir     string
	said    string
	records []DamageRecord
}

func (f *fakeDamager) DataDir(string) string { return f.dir }
func (f *fakeDamager) AwaitStart(n string, limit time.Duration) (bool, string) {
	return f.said != "", f.said
}
func (f *fakeDamager) Repair(_ context.Context, n string) (string, error) {
	f.calls = append(f.calls, "repair "+n)
	return "repaired", nil
}
func (f *fakeDamager) NoteDamage(r DamageRecord) { f.records = append(f.records, r) }

// TestExecutorStoreFault: the JM is killed before its file is damaged and started after; a JM
// that refused naming the file is repaired at the heal, one that exited otherwise is recorded
// crashed, one that runs is left alone.
func TestExecutorStoreFault(t *testing.T) {
	for _, c := range []struct{ said, outcome string }{
		{"cluster: %s is damaged: checksum mismatch", OutcomeRefused},
		{"panic: runtime error: index out of range", OutcomeCrashed},
		{"", OutcomeStarted},
	} {
		path := boltFile(t)
		said := c.said
		if strings.Contains(said, "%s") {
			said = fmt.Sprintf(said, path)
		}
		ft := &fakeDamager{dir: filepath.Dir(path), said: said}
		e := &Executor{T: ft}
		a := Action{Fault: Fault{Index: 4, Kind: CorruptRaftLog}, Corrupt: &Corruption{Node: "jm3", Kind: CorruptRaftLog, Mode: Truncate, Pick: 1}}
		if err := e.Apply(context.Background(), a); err != nil {
			t.Fatal(err)
		}
		if err := e.Heal(context.Background(), a); err != nil {
			t.Fatal(err)
		}
		want := []string{"kill jm3", "revive jm3", "jm3: iptables -w -F JMC"}
		if c.outcome != OutcomeStarted {
			want = append(want, "repair jm3")
		}
		got := strings.Join(ft.calls, "\n")
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Fatalf("%s: no %q in\n%s", c.outcome, w, got)
			}
		}
		if c.outcome == OutcomeStarted && strings.Contains(got, "repair") {
			t.Fatalf("a running JM was repaired:\n%s", got)
		}
		if len(ft.records) != 1 || ft.records[0].Outcome != c.outcome || ft.records[0].File != path || ft.records[0].Fault != 4 {
			t.Fatalf("%s: records %+v", c.outcome, ft.records)
		}
	}
}
