package fsm_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// The upgrade fixture: the Raft log and a snapshot that a three-JobMaster cluster of this
// version wrote (a streaming job, a batch job run to the end, a leader kill and its
// reconciliation, a cancel), checked in under testdata/upgrade/v1. Every later version must
// replay the log and restore the snapshot to the same state (the same FSM hash): a command
// whose meaning changes, or a snapshot field dropped, fails TestUpgradeFixtureReplays.
// `go test ./fsm/ -run TestUpgradeFixture -args -update-fixture` writes it again (only when the
// format is meant to change: then add a v2 beside v1, never replace v1).
var updateFixture = flag.Bool("update-fixture", false, "write testdata/upgrade/v1 from a live cluster")

const fixtureDir = "testdata/upgrade/v1"

type fixtureEntry struct {
	Index uint64       `json:"index"`
	Term  uint64       `json:"term"`
	Type  raft.LogType `json:"type"`
	Data  []byte       `json:"data,omitempty"`
}

type fixtureState struct {
	// Hash is the FSM hash after the whole log, at AppliedIndex; SnapshotHash after restoring
	// snapshot.bin, taken at SnapshotIndex.
	Hash          string `json:"hash"`
	AppliedIndex  uint64 `json:"applied_index"`
	SnapshotHash  string `json:"snapshot_hash"`
	SnapshotIndex uint64 `json:"snapshot_index"`
	Jobs          int    `json:"jobs"`
}

func replay(t *testing.T, entries []fixtureEntry) *fsm.FSM {
	t.Helper()
	f := fsm.New(hclog.NewNullLogger())
	for _, e := range entries {
		f.Apply(&raft.Log{Index: e.Index, Term: e.Term, Type: e.Type, Data: e.Data})
	}
	return f
}

// memSink is a raft.SnapshotSink into memory.
type memSink struct{ bytes.Buffer }

func (s *memSink) ID() string    { return "fixture" }
func (s *memSink) Cancel() error { return nil }
func (s *memSink) Close() error  { return nil }

func TestUpgradeFixtureReplays(t *testing.T) {
	if *updateFixture {
		writeFixture(t)
	}
	var entries []fixtureEntry
	var want fixtureState
	for name, v := range map[string]any{"log.json": &entries, "state.json": &want} {
		b, err := os.ReadFile(filepath.Join(fixtureDir, name))
		if err != nil {
			t.Fatalf("%v (write the fixture with -update-fixture)", err)
		}
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatal(err)
		}
	}
	f := replay(t, entries)
	if hash, idx := f.HashAt(); hash != want.Hash || idx != want.AppliedIndex || len(f.Jobs()) != want.Jobs {
		t.Fatalf("the log of v1 replays to hash %s at %d with %d jobs; v1 had %s at %d with %d", hash, idx, len(f.Jobs()), want.Hash, want.AppliedIndex, want.Jobs)
	}
	snap, err := os.ReadFile(filepath.Join(fixtureDir, "snapshot.bin"))
	if err != nil {
		t.Fatal(err)
	}
	r := fsm.New(hclog.NewNullLogger())
	if err := r.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatalf("restore the v1 snapshot: %v", err)
	}
	if hash, idx := r.HashAt(); hash != want.SnapshotHash || idx != want.SnapshotIndex {
		t.Fatalf("the v1 snapshot restores to hash %s at %d; v1 had %s at %d", hash, idx, want.SnapshotHash, want.SnapshotIndex)
	}
	t.Logf("v1: %d entries replayed to %s at %d (%d jobs); the snapshot restored to %s at %d", len(entries), want.Hash, want.AppliedIndex, want.Jobs, want.SnapshotHash, want.SnapshotIndex)
}

// writeFixture runs the scenario on a live cluster and writes what jm1 logged.
func writeFixture(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{JMs: 3, TMs: 2})
	stream := c.Submit(testcluster.StreamingChain("fixture-stream", 2, 20, 0))
	c.WaitJob(stream, "RUNNING", 30*time.Second, testcluster.AllRunning)
	batch := c.Submit(testcluster.BatchKeyedSum("fixture-batch", 2, 200, 4))
	c.WaitJob(batch, "FINISHED", 30*time.Second, func(r *pb.JobRecord) bool { return r.Status == pb.JobStatus_JOB_STATUS_FINISHED })
	old := c.Leader()
	c.KillJM(old)
	l := c.Leader()
	c.WaitJob(stream, "RUNNING after the failover", 30*time.Second, testcluster.AllRunning)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Client(l).CancelJob(ctx, &pb.CancelJobRequest{JobId: stream}); err != nil {
		t.Fatal(err)
	}
	c.WaitJob(stream, "CANCELED", 30*time.Second, func(r *pb.JobRecord) bool { return r.Status == pb.JobStatus_JOB_STATUS_CANCELED })
	var jm *testcluster.JM
	for _, j := range c.JMs {
		if j != old && j != l {
			jm = j
		}
	}
	testcluster.WaitFor(t, 10*time.Second, jm.ID+" to apply everything", func() (bool, string) {
		return jm.A.State.AppliedIndex() >= l.A.State.AppliedIndex(), ""
	})
	c.KillJM(jm)
	store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(jm.DataDir, "raft.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	first, _ := store.FirstIndex()
	last, _ := store.LastIndex()
	var entries []fixtureEntry
	for i := first; i <= last; i++ {
		var l raft.Log
		if err := store.GetLog(i, &l); err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		entries = append(entries, fixtureEntry{Index: l.Index, Term: l.Term, Type: l.Type, Data: l.Data})
	}
	f := replay(t, entries)
	var st fixtureState
	st.Hash, st.AppliedIndex = f.HashAt()
	st.Jobs = len(f.Jobs())
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	r := fsm.New(hclog.NewNullLogger())
	if err := r.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	st.SnapshotHash, st.SnapshotIndex = r.HashAt()
	if err := os.MkdirAll(fixtureDir, 0o755); err != nil {
		t.Fatal(err)
	}
	logJSON, _ := json.MarshalIndent(entries, "", " ")
	stateJSON, _ := json.MarshalIndent(st, "", "  ")
	for name, b := range map[string][]byte{"log.json": logJSON, "state.json": stateJSON, "snapshot.bin": sink.Bytes()} {
		if err := os.WriteFile(filepath.Join(fixtureDir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("wrote %s: %d entries (%d-%d), %d jobs, snapshot %d bytes", fixtureDir, len(entries), first, last, st.Jobs, sink.Len())
}
