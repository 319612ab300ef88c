package operator

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestChecksumSinkHoldsCommitsBehindANewerState: a sink restored from checkpoint 1 with the
// state it had at checkpoint 2 (Info.RestoredAhead: its region fell back past 2) commits
// nothing, not even checkpoint 1 at Open, until a staged document holds every record the
// newer state held; from then on it commits as usual.
func TestChecksumSinkHoldsCommitsBehindANewerState(t *testing.T) {
	op := &pb.Operator{Kind: &pb.Operator_ChecksumSink{ChecksumSink: &pb.ChecksumSink{Path: "c-{subtask}.json", FlushIntervalMs: 1}}}
	info := Info{Job: "j", Vertex: "sink", AttemptID: "a0", WorkDir: t.TempDir(), Checkpointed: true}
	first, err := New(op, info)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	var states [][]byte
	for i := int64(0); i < 10; i++ {
		if err := first.Process(NumericRecord(0, i, 0, i), nil); err != nil {
			t.Fatal(err)
		}
		if i == 4 || i == 9 { // checkpoints 1 (5 records) and 2 (10 records)
			st, err := first.(Stateful).SnapshotState()
			if err != nil {
				t.Fatal(err)
			}
			states = append(states, st)
		}
	}
	_ = first.Close()

	dir := t.TempDir()
	info.AttemptID, info.WorkDir, info.Restored, info.RestoredCheckpoint, info.RestoredAhead = "a1", dir, states[0], 1, states[1]
	sink, err := New(op, info)
	if err != nil {
		t.Fatal(err)
	}
	if err := sink.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	path := filepath.Join(dir, "c-0.json")
	if _, err := ReadChecksum(path); err == nil {
		t.Fatal("checkpoint 1 committed at Open although the sink had committed more at checkpoint 2")
	}
	c := sink.(Committer)
	step := func(from, to int64, id uint64) {
		t.Helper()
		for i := from; i < to; i++ {
			if err := sink.Process(NumericRecord(0, i, 0, i), nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.PrepareCommit(id); err != nil {
			t.Fatal(err)
		}
		if err := c.CommitCheckpoint(id); err != nil {
			t.Fatal(err)
		}
	}
	step(5, 8, 3) // 8 records: behind the 10 of checkpoint 2
	if _, err := ReadChecksum(path); err == nil {
		t.Fatal("checkpoint 3 (8 records) committed behind the 10 already committed")
	}
	step(8, 12, 4) // 12 records: covers it
	d, err := ReadChecksum(path)
	if err != nil || d.CommittedCheckpoint != 4 || d.Count != 12 || d.Origins["0"].Duplicates != 0 {
		t.Fatalf("after checkpoint 4: %+v, %v; want checkpoint 4 with 12 records", d, err)
	}
	step(12, 13, 5)
	if d, _ := ReadChecksum(path); d.CommittedCheckpoint != 5 {
		t.Fatalf("after checkpoint 5: committed %d", d.CommittedCheckpoint)
	}
}
