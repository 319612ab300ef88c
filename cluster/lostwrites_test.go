package cluster

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/jmcluster/jmcluster/internal/failpoint"
)

// TestLoseUnsyncedHoldsWritesUntilTheFlush: with disk-lose-unsynced a log entry and a stable
// value are acknowledged and readable at once but reach raft.db only at the flush 1-2 s later
// (what a kill -9 before it loses); with the failpoint off, writes go straight to the file.
func TestLoseUnsyncedHoldsWritesUntilTheFlush(t *testing.T) {
	store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(t.TempDir(), raftDBFile)})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	lossy := newLossyStore(store, store, testLogger(t))
	logs := checksumLogStore{LogStore: lossyLogs{lossy}}
	stable := checksumStableStore{lossyStable{lossy}}

	failpoint.Set(t, "disk-lose-unsynced")
	if err := logs.StoreLogs([]*raft.Log{{Index: 1, Term: 1, Data: []byte("a")}, {Index: 2, Term: 1, Data: []byte("b")}}); err != nil {
		t.Fatal(err)
	}
	if err := stable.SetUint64([]byte("CurrentTerm"), 5); err != nil {
		t.Fatal(err)
	}
	var l raft.Log
	if err := logs.GetLog(2, &l); err != nil || string(l.Data) != "b" {
		t.Fatalf("held entry 2: %v %q", err, l.Data)
	}
	if last, _ := logs.LastIndex(); last != 2 {
		t.Fatalf("last index with held entries: %d", last)
	}
	if v, err := stable.GetUint64([]byte("CurrentTerm")); err != nil || v != 5 {
		t.Fatalf("held term: %d %v", v, err)
	}
	if err := store.GetLog(2, &l); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("entry 2 is in raft.db before the flush: %v", err)
	}
	waitFor(t, "the held writes in raft.db", func() (bool, string) {
		// Into a log of its own: l's Data is the held entry's, which the flush is encoding.
		var l raft.Log
		err := store.GetLog(2, &l)
		v, verr := store.GetUint64([]byte("CurrentTerm"))
		return err == nil && verr == nil && v == 5, fmt.Sprintf("entry 2: %v; term %d %v", err, v, verr)
	})

	failpoint.Set(t, "")
	if err := logs.StoreLogs([]*raft.Log{{Index: 3, Term: 1, Data: []byte("c")}}); err != nil {
		t.Fatal(err)
	}
	if err := store.GetLog(3, &l); err != nil {
		t.Fatalf("with the failpoint off, entry 3 is not in raft.db at once: %v", err)
	}
}

// TestSkipStoreVerifyStartsOnDamage: the planted bug skip-store-verify lets the replica start on
// a raft.db with a damaged entry.
func TestSkipStoreVerifyStartsOnDamage(t *testing.T) {
	cfg := copyDir(t, writtenDir(t, 20, false))
	db := filepath.Join(cfg.DataDir, raftDBFile)
	damage(t, db, func(raw []byte) []byte { return flipMark(t, raw, 9) })
	mustRefuse(t, cfg, db)
	failpoint.Set(t, "skip-store-verify")
	cfg.RaftBindAddr, cfg.GRPCAddr = "127.0.0.1:0", "127.0.0.1:1"
	n, err := NewNode(cfg, newTestFSM(), &recHooks{})
	if err != nil {
		t.Fatalf("with skip-store-verify: %v", err)
	}
	_ = n.Kill()
}
