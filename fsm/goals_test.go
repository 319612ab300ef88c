package fsm

import (
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/testkit/benchgoal"
)

// TestGoalSnapshot (JMC_GOALS=1, `make bench-short`): saving a snapshot of 100,000 executions
// into hashicorp/raft's file snapshot store (the FSM's copy, its stream, the store's CRC and
// fsync) and restoring it from there (read, decode, rebuild the indexes), each against
// marshalling the same job records and writing and fsyncing their bytes to a file in the same
// directory, the better of three runs each. Goal: each within 3x.
func TestGoalSnapshot(t *testing.T) {
	benchgoal.Skip(t)
	const jobs, perVertex = 100, 250
	h := stateOf(t, 200, jobs, perVertex)
	n := 0
	for _, j := range h.f.Jobs() {
		n += len(graph.AllExecutions(j.ExecutionGraph))
	}
	if n != jobs*4*perVertex {
		t.Fatalf("%d executions", n)
	}
	dir := t.TempDir()
	store, err := raft.NewFileSnapshotStoreWithLogger(dir, 3, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	best := func(f func() time.Duration) time.Duration {
		b := time.Duration(1 << 62)
		for range 3 {
			b = min(b, f())
		}
		return b
	}
	var bytes int
	baseline := best(func() time.Duration {
		start := time.Now()
		f, err := os.Create(filepath.Join(dir, "baseline"))
		if err != nil {
			t.Fatal(err)
		}
		bytes = 0
		for _, j := range h.f.Jobs() {
			out, err := proto.Marshal(j)
			if err != nil {
				t.Fatal(err)
			}
			bytes += len(out)
			if _, err := f.Write(out); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		return time.Since(start)
	})
	var id string
	save := best(func() time.Duration {
		start := time.Now()
		snap, err := h.f.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		sink, err := store.Create(raft.SnapshotVersionMax, 100, 1, raft.Configuration{}, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := snap.Persist(sink); err != nil {
			t.Fatal(err)
		}
		snap.Release()
		id = sink.ID()
		return time.Since(start)
	})
	var size int64
	restore := best(func() time.Duration {
		start := time.Now()
		meta, rc, err := store.Open(id)
		if err != nil {
			t.Fatal(err)
		}
		size = meta.Size
		f := New(hclog.NewNullLogger())
		if err := f.Restore(io.NopCloser(rc)); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		rc.Close()
		if f.Hash() != h.f.Hash() {
			t.Fatal("the restored state differs")
		}
		return took
	})
	t.Logf("%d executions: job records %d bytes, snapshot %d bytes (%d per execution); marshal+write+fsync %s, save %s, restore %s",
		n, bytes, size, size/int64(n), baseline, save, restore)
	rs, rr := float64(save)/float64(baseline), float64(restore)/float64(baseline)
	benchgoal.Report(t, "snapshot-save-100k-vs-marshal-fsync", rs, 3, rs <= 3, "x")
	benchgoal.Report(t, "snapshot-restore-100k-vs-marshal-fsync", rr, 3, rr <= 3, "x")
}
