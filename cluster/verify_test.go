package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/jmcluster/jmcluster/internal/failpoint"
)

// writtenDir runs a one-replica cluster that commits n values ("mark-%04d-...") and, with snap,
// takes a snapshot after them and commits two more; it returns the replica's configuration
// (its data dir holds a raft.db, and snapshots) once the replica is stopped.
func writtenDir(t *testing.T, n int, snap bool) Config {
	t.Helper()
	nodes := startStatic(t, 1, nil)
	leader := establishedLeader(t, nodes, 1)
	for i := 0; i < n; i++ {
		mustApply(t, leader.Node, fmt.Sprintf("mark-%04d-%s", i, strings.Repeat("x", 40)))
	}
	if snap {
		if err := leader.raft.Snapshot().Error(); err != nil {
			t.Fatalf("snapshot: %v", err)
		}
		mustApply(t, leader.Node, "after-snapshot-1")
		mustApply(t, leader.Node, "after-snapshot-2")
	}
	leader.stop()
	cfg := leader.cfg
	cfg.Peers = nil
	return cfg
}

// copyDir copies the data dir to a fresh one, returning its configuration.
func copyDir(t *testing.T, cfg Config) Config {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(cfg.DataDir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(cfg.DataDir, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o700)
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), raw, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = dst
	return cfg
}

// mustRefuse starts a replica on cfg's data dir and wants a DamageError naming file.
func mustRefuse(t *testing.T, cfg Config, file string) {
	t.Helper()
	cfg.RaftBindAddr = "127.0.0.1:0"
	cfg.GRPCAddr = "127.0.0.1:1"
	n, err := NewNode(cfg, newTestFSM(), &recHooks{})
	if err == nil {
		_ = n.Kill()
		t.Fatalf("the replica started on a damaged %s", file)
	}
	var de *DamageError
	if !errors.As(err, &de) || !errors.Is(err, ErrDamaged) {
		t.Fatalf("want a DamageError, got %v", err)
	}
	if de.File != file || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "jmnode raft remove "+cfg.ID) {
		t.Fatalf("the error names %q, want %q, and the repair: %v", de.File, file, err)
	}
	t.Logf("refused: %v", err)
}

func damage(t *testing.T, path string, f func(raw []byte) []byte) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, f(raw), 0o600); err != nil {
		t.Fatal(err)
	}
}

// flipMark flips a bit in every copy of value i in the file (bolt copies pages on write: the
// older copies are free pages).
func flipMark(t *testing.T, raw []byte, i int) []byte {
	t.Helper()
	mark := []byte(fmt.Sprintf("mark-%04d-", i))
	n := 0
	for at := bytes.Index(raw, mark); at >= 0; at = bytes.Index(raw[at+1:], mark) + at + 1 {
		raw[at+12] ^= 0x04
		n++
		if bytes.Index(raw[at+1:], mark) < 0 {
			break
		}
	}
	if n == 0 {
		t.Fatalf("value mark-%04d not found in the file", i)
	}
	return raw
}

func markAt(t *testing.T, raw []byte, i int) int {
	t.Helper()
	at := bytes.Index(raw, []byte(fmt.Sprintf("mark-%04d-", i)))
	if at < 0 {
		t.Fatalf("value mark-%04d not found in the file", i)
	}
	return at
}

// TestDamagedRaftDBRefusesToStart: a bit flipped in a committed entry, the file truncated, and a
// chunk of the file copied over another entry: each start refuses with raft.db named.
func TestDamagedRaftDBRefusesToStart(t *testing.T) {
	base := writtenDir(t, 40, false)
	if rep, err := VerifyDataDir(base.ID, base.DataDir); err != nil || rep.Entries < 40 || rep.LegacyEntries != 0 {
		t.Fatalf("the undamaged dir: %+v, %v", rep, err)
	}
	cases := map[string]func(t *testing.T, raw []byte) []byte{
		"bit flip": func(t *testing.T, raw []byte) []byte {
			return flipMark(t, raw, 17)
		},
		"truncation": func(t *testing.T, raw []byte) []byte { return raw[:len(raw)/2+123] },
		"copied chunk": func(t *testing.T, raw []byte) []byte {
			from, to := markAt(t, raw, 3), markAt(t, raw, 30)
			copy(raw[to-20:], append([]byte(nil), raw[from-20:from+60]...))
			return raw
		},
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := copyDir(t, base)
			db := filepath.Join(cfg.DataDir, raftDBFile)
			damage(t, db, func(raw []byte) []byte { return f(t, raw) })
			mustRefuse(t, cfg, db)
		})
	}
}

// TestDamagedSnapshotRefusesToStart: a bit flipped in the newest snapshot's state.bin, its
// meta.json's index changed, and state.bin truncated: each start refuses naming the file.
func TestDamagedSnapshotRefusesToStart(t *testing.T) {
	base := writtenDir(t, 10, true)
	rep, err := VerifyDataDir(base.ID, base.DataDir)
	if err != nil || rep.Snapshot == "" || rep.LegacySnap {
		t.Fatalf("the undamaged dir: %+v, %v", rep, err)
	}
	snap := filepath.Join(base.DataDir, snapshotsDir, rep.Snapshot)
	cases := map[string]struct {
		file string
		f    func(raw []byte) []byte
	}{
		"state.bin bit flip":   {"state.bin", func(raw []byte) []byte { raw[len(raw)/2] ^= 0x10; return raw }},
		"state.bin truncation": {"state.bin", func(raw []byte) []byte { return raw[:len(raw)-7] }},
		"meta.json index": {"meta.json", func(raw []byte) []byte {
			return bytes.Replace(raw, []byte(`"Index":`), []byte(`"Index":1`), 1)
		}},
		"meta.json copied chunk": {"meta.json", func(raw []byte) []byte { copy(raw[len(raw)/2:], raw[:10]); return raw }},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := copyDir(t, base)
			file := filepath.Join(cfg.DataDir, snapshotsDir, filepath.Base(snap), c.file)
			damage(t, file, c.f)
			mustRefuse(t, cfg, file)
		})
	}
}

// TestLogWithoutChecksumsStarts: a raft.db written before checksums (every entry and stable
// value rewritten without one) verifies, counts its entries as such and starts: the replica
// leads again and applies every value.
func TestLogWithoutChecksumsStarts(t *testing.T) {
	cfg := writtenDir(t, 12, false)
	store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(cfg.DataDir, raftDBFile)})
	if err != nil {
		t.Fatal(err)
	}
	first, _ := store.FirstIndex()
	last, _ := store.LastIndex()
	for i := first; i <= last; i++ {
		var l raft.Log
		if err := store.GetLog(i, &l); err != nil {
			t.Fatal(err)
		}
		if sealed, err := openEntry(&l); !sealed || err != nil {
			t.Fatalf("entry %d: sealed %v, %v", i, sealed, err)
		}
		if err := store.StoreLog(&l); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"CurrentTerm", "LastVoteTerm", "LastVoteCand"} {
		if v, err := store.Get([]byte(k)); err == nil {
			plain, _, _ := openValue([]byte(k), v)
			if err := store.Set([]byte(k), plain); err != nil {
				t.Fatal(err)
			}
		}
	}
	_ = store.Close()
	rep, err := VerifyDataDir(cfg.ID, cfg.DataDir)
	if err != nil || rep.LegacyEntries != last-first+1 || rep.LegacyValues == 0 {
		t.Fatalf("verify the old-format log (%d entries): %+v, %v", last-first+1, rep, err)
	}
	cfg.RaftBindAddr = "127.0.0.1:0"
	tn := newTestNode(t, cfg, listen(t, "127.0.0.1:0"))
	if err := tn.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	establishedLeader(t, []*testNode{tn}, 2)
	if got := tn.fsm.Values(); len(got) != 12 {
		t.Fatalf("the old-format log's values after the restart: %v", got)
	}
	// What the restarted replica writes is checksummed again; an entry without one after it
	// is damage.
	mustApply(t, tn.Node, "new")
	tn.stop()
	if _, err := VerifyDataDir(cfg.ID, cfg.DataDir); err != nil {
		t.Fatalf("old entries then checksummed ones: %v", err)
	}
}

// TestEntryChecksumKeepsExtensions: the checksum is added and removed around the caller's own
// extensions, and any changed field fails it.
func TestEntryChecksumKeepsExtensions(t *testing.T) {
	l := &raft.Log{Index: 7, Term: 3, Type: raft.LogCommand, Data: []byte("data"), Extensions: []byte("ext")}
	s := sealEntry(l)
	if string(l.Extensions) != "ext" {
		t.Fatalf("sealing changed the caller's entry: %q", l.Extensions)
	}
	c := *s
	if sealed, err := openEntry(&c); !sealed || err != nil || string(c.Extensions) != "ext" {
		t.Fatalf("open: sealed %v, %v, extensions %q", sealed, err, c.Extensions)
	}
	for name, change := range map[string]func(l *raft.Log){
		"index": func(l *raft.Log) { l.Index++ },
		"term":  func(l *raft.Log) { l.Term++ },
		"data":  func(l *raft.Log) { l.Data = []byte("dbta") },
		"ext":   func(l *raft.Log) { l.Extensions = append(append([]byte(nil), l.Extensions[:checksumLen]...), "exu"...) },
	} {
		c := *s
		change(&c)
		if _, err := openEntry(&c); !errors.Is(err, ErrChecksum) {
			t.Fatalf("%s changed: %v", name, err)
		}
	}
}

// TestLogGapAfterSnapshotRefusesToStart: a log compacted behind its snapshot, whose snapshots
// are then lost, no longer covers the state: the start refuses naming raft.db.
func TestLogGapAfterSnapshotRefusesToStart(t *testing.T) {
	nodes := startStaticWith(t, 1, nil, func(c *Config) { c.TrailingLogs = 1 })
	leader := establishedLeader(t, nodes, 1)
	for i := 0; i < 10; i++ {
		mustApply(t, leader.Node, fmt.Sprintf("mark-%04d", i))
	}
	if err := leader.raft.Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	mustApply(t, leader.Node, "after")
	leader.stop()
	cfg := leader.cfg
	cfg.Peers = nil
	if _, err := VerifyDataDir(cfg.ID, cfg.DataDir); err != nil {
		t.Fatalf("the compacted log with its snapshot: %v", err)
	}
	if err := os.RemoveAll(filepath.Join(cfg.DataDir, snapshotsDir)); err != nil {
		t.Fatal(err)
	}
	mustRefuse(t, cfg, filepath.Join(cfg.DataDir, raftDBFile))
}

// TestUnverifiedSnapshotsToday shows what raft does with a damaged newest snapshot when nothing
// verifies it (the planted bug skip-store-verify; the replica before verification): a state.bin
// failing its CRC is skipped for the older snapshot, and the log, still covering it, restores
// every value; but a meta.json whose index changed (14 to 114) still parses and is restored as
// it says: the replica skips the committed entries after the snapshot (the last value is lost)
// and believes it applied index 114. VerifyDataDir refuses both (TestDamagedSnapshotRefusesToStart).
func TestUnverifiedSnapshotsToday(t *testing.T) {
	nodes := startStatic(t, 1, nil)
	leader := establishedLeader(t, nodes, 1)
	var want []string
	for i := 0; i < 10; i++ {
		want = append(want, fmt.Sprintf("v-%d", i))
		mustApply(t, leader.Node, want[i])
		if i == 4 || i == 8 {
			if err := leader.raft.Snapshot().Error(); err != nil {
				t.Fatal(err)
			}
		}
	}
	leader.stop()
	base := leader.cfg
	base.Peers = nil
	rep, err := VerifyDataDir(base.ID, base.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	failpoint.Set(t, "skip-store-verify")
	start := func(file string, f func([]byte) []byte) *testNode {
		cfg := copyDir(t, base)
		damage(t, filepath.Join(cfg.DataDir, snapshotsDir, rep.Snapshot, file), f)
		cfg.RaftBindAddr = "127.0.0.1:0"
		tn := newTestNode(t, cfg, listen(t, "127.0.0.1:0"))
		if err := tn.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		establishedLeader(t, []*testNode{tn}, 2)
		return tn
	}
	tn := start("state.bin", func(raw []byte) []byte { raw[len(raw)/2] ^= 1; return raw })
	waitValues(t, []*testNode{tn}, want)
	tn.stop()

	tn = start("meta.json", func(raw []byte) []byte {
		return bytes.Replace(raw, []byte(`"Index":`), []byte(`"Index":1`), 1)
	})
	got := tn.fsm.Values()
	if len(got) != 9 || tn.raft.AppliedIndex() < 100 {
		t.Fatalf("with meta.json's index raised: values %v, applied index %d", got, tn.raft.AppliedIndex())
	}
	t.Logf("meta.json index raised: %d values of %d, applied index %d", len(got), len(want), tn.raft.AppliedIndex())
}
