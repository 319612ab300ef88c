package fsm

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// goal prints one `make bench-short` goal line.
func goal(t *testing.T, name string, measured, target float64, met bool, unit string) {
	t.Helper()
	verdict := "missed"
	if met {
		verdict = "met"
	}
	line := fmt.Sprintf("GOAL %s %.2f%s %.2f%s %s", name, measured, unit, target, unit, verdict)
	t.Log(line)
	fmt.Println(line)
}

// stateOf builds a state of jobs x 4 FORWARD-chained vertices x perVertex executions, half
// of the jobs RUNNING, half DEPLOYING.
func stateOf(t testing.TB, jobs, perVertex int32) *harness {
	h := newHarness(t)
	for j := range jobs {
		id := jobIDN(int(200 + j))
		h.submit(forwardJob(id, 4, perVertex))
		h.setStatus(id, pb.JobStatus_JOB_STATUS_RUNNING)
		h.attemptAll(id, 0)
		h.moveAll(id, pb.ExecutionState_EXECUTION_STATE_DEPLOYING)
		if j%2 == 0 {
			h.moveAll(id, pb.ExecutionState_EXECUTION_STATE_RUNNING)
		}
	}
	establish(h, 1)
	return h
}

// TestGoalSnapshot (JMC_GOALS=1, `make bench-short`): saving a snapshot of 100,000 executions
// into hashicorp/raft's file snapshot store (the FSM's copy, its stream, the store's CRC and
// fsync) and restoring it from there (read, decode, rebuild the indexes), each against
// marshalling the same job records and writing and fsyncing their bytes to a file in the same
// directory, the better of three runs each. Goal: each within 3x.
func TestGoalSnapshot(t *testing.T) {
	if os.Getenv("JMC_GOALS") == "" {
		t.Skip("a benchmark goal (make bench-short): set JMC_GOALS=1")
	}
	const jobs, perVertex = 100, 250
	h := stateOf(t, jobs, perVertex)
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
	goal(t, "snapshot-save-100k-vs-marshal-fsync", rs, 3, rs <= 3, "x")
	goal(t, "snapshot-restore-100k-vs-marshal-fsync", rr, 3, rr <= 3, "x")
}
