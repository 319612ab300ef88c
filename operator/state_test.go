package operator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jmcluster/jmcluster/internal/failpoint"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestSourceResumesAtItsSnapshottedPosition: a source snapshotted while it emits record i
// starts, restored, at record i (the barrier goes in front of it).
func TestSourceResumesAtItsSnapshottedPosition(t *testing.T) {
	op := &pb.Operator{Kind: &pb.Operator_SequenceSource{SequenceSource: &pb.SequenceSource{Count: 10, Keys: 3}}}
	info := Info{JobType: pb.JobType_JOB_TYPE_BATCH}
	src, err := NewSource(op, info)
	if err != nil {
		t.Fatal(err)
	}
	var state []byte
	stop := errors.New("stop")
	err = src.Run(context.Background(), func(r Record) error {
		if r.Seq == 4 {
			if state, err = src.(Stateful).SnapshotState(); err != nil {
				t.Fatal(err)
			}
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) {
		t.Fatalf("run: %v", err)
	}
	info.Restored = state
	again, err := NewSource(op, info)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	if err := again.Run(context.Background(), func(r Record) error { seqs = append(seqs, r.Seq); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(seqs) != 6 || seqs[0] != 4 || seqs[5] != 9 {
		t.Fatalf("restored from %s, the source emitted seqs %v, want 4..9", state, seqs)
	}
	info.Restored = []byte(`{"next":11}`)
	if _, err := NewSource(op, info); err == nil || !strings.Contains(err.Error(), "outside the sequence") {
		t.Fatalf("a position past the end: %v", err)
	}
}

// TestKeyBySumContinuesItsSums: restored sums continue where the snapshot left them.
func TestKeyBySumContinuesItsSums(t *testing.T) {
	op := &pb.Operator{Kind: &pb.Operator_KeyBySum{KeyBySum: &pb.KeyBySumOperator{}}}
	first, err := New(op, Info{})
	if err != nil {
		t.Fatal(err)
	}
	collect(t, first, []Record{NumericRecord(2, 5, 0, 0), NumericRecord(1, 1, 0, 0), NumericRecord(2, 7, 0, 0)})
	state, err := first.(Stateful).SnapshotState()
	if err != nil {
		t.Fatal(err)
	}
	vals, err := KeyedValues(state)
	if err != nil {
		t.Fatal(err)
	}
	one, _ := Int64Value(vals[1])
	two, _ := Int64Value(vals[2])
	if len(vals) != 2 || one != 1 || two != 12 {
		t.Fatalf("state %s: sums %d and %d, want 1 and 12", state, one, two)
	}
	again, err := New(op, Info{Restored: state})
	if err != nil {
		t.Fatal(err)
	}
	out := collect(t, again, []Record{NumericRecord(2, 1, 0, 0), NumericRecord(3, 4, 0, 0)})
	if num(out[0].Value) != 13 || num(out[1].Value) != 4 {
		t.Fatalf("restored sums emitted %v, want 13 and 4", out)
	}
	if _, err := New(op, Info{Restored: []byte(`{"keys":[1],"sums":[]}`)}); err == nil {
		t.Fatal("a state with fewer sums than keys was accepted")
	}
	if _, err := New(op, Info{Restored: []byte(`{"keys":[1],"values":[]}`)}); err == nil {
		t.Fatal("a state with fewer values than keys was accepted")
	}
}

// TestKeyBySumReadsTheSumsFormat: a checkpoint of key_by_sum taken in the format of its own
// sums ({"keys":[...],"sums":[...]}, before keyed state) is restored; its next snapshot is
// of the keyed format.
func TestKeyBySumReadsTheSumsFormat(t *testing.T) {
	op := &pb.Operator{Kind: &pb.Operator_KeyBySum{KeyBySum: &pb.KeyBySumOperator{}}}
	o, err := New(op, Info{Restored: []byte(`{"keys":[1,2],"sums":[1,12]}`)})
	if err != nil {
		t.Fatal(err)
	}
	out := collect(t, o, []Record{NumericRecord(2, 1, 0, 0), NumericRecord(1, 4, 0, 0), NumericRecord(3, 5, 0, 0)})
	if num(out[0].Value) != 13 || num(out[1].Value) != 5 || num(out[2].Value) != 5 {
		t.Fatalf("restored from the sums format, emitted %v; want 13, 5, 5", out)
	}
	state, err := o.SnapshotState()
	if err != nil {
		t.Fatal(err)
	}
	vals, err := KeyedValues(state)
	if err != nil || len(vals) != 3 {
		t.Fatalf("snapshot after the legacy restore: %s (%v)", state, err)
	}
}

// TestSourceReadsItsPositionFormats: a source task of one split keeps {"next":N}, the format
// of a single position; one of several splits keeps each split's position.
func TestSourceReadsItsPositionFormats(t *testing.T) {
	op := &pb.Operator{Kind: &pb.Operator_SequenceSource{SequenceSource: &pb.SequenceSource{Count: 10}}}
	src, err := NewSource(op, Info{Subtask: 1, Parallelism: 2, Restored: []byte(`{"next":7}`)})
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	if err := src.Run(context.Background(), func(r Record) error { seqs = append(seqs, r.Seq); return nil }); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(seqs) != "[7 8 9]" {
		t.Fatalf("restored at 7: %v", seqs)
	}
	if st, _ := src.SnapshotState(); string(st) != `{"next":10}` {
		t.Fatalf("after the end: %s", st)
	}
	for _, bad := range []string{`{"splits":[{"id":0,"next":1}]}`, `{"next":-1}`, `{"splits":[{"id":1,"next":1},{"id":3,"next":1}]}`} {
		if _, err := NewSource(op, Info{Subtask: 1, Parallelism: 2, Restored: []byte(bad)}); err == nil {
			t.Errorf("restored from %s: no error", bad)
		}
	}
}

// TestChecksumSinkContinuesTheCheckpointedDocument: a restored checksum sink drops what an
// attempt accounted after the checkpoint, so replayed records are neither gaps nor duplicates.
func TestChecksumSinkContinuesTheCheckpointedDocument(t *testing.T) {
	dir := t.TempDir()
	op := &pb.Operator{Kind: &pb.Operator_ChecksumSink{ChecksumSink: &pb.ChecksumSink{Path: "out/{vertex}-{subtask}.json"}}}
	info := Info{Job: "j", Vertex: "sink", AttemptID: "a0", WorkDir: dir}
	first, err := New(op, info)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	var state []byte
	for i := range int64(6) {
		if i == 3 {
			if state, err = first.(Stateful).SnapshotState(); err != nil {
				t.Fatal(err)
			}
		}
		if err := first.Process(NumericRecord(0, i, 0, i), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := first.Close(); err != nil { // the attempt dies past the checkpoint
		t.Fatal(err)
	}
	info.AttemptID, info.Restored = "a1", state
	again, err := New(op, info)
	if err != nil {
		t.Fatal(err)
	}
	if err := again.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := int64(3); i < 8; i++ { // the source replays from its checkpointed position
		if err := again.Process(NumericRecord(0, i, 0, i), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := again.Finish(nil); err != nil {
		t.Fatal(err)
	}
	if err := again.Close(); err != nil {
		t.Fatal(err)
	}
	c, err := ReadChecksum(filepath.Join(dir, "out", "sink-0.json"))
	if err != nil {
		t.Fatal(err)
	}
	o := c.Origins["0"]
	if c.Count != 8 || c.Sum != 28 || o.Duplicates != 0 || o.Gaps != 0 || o.LastSeq != 7 {
		t.Fatalf("after the restore: count %d sum %d origin %+v, want 8 records, sum 28, no gap or duplicate", c.Count, c.Sum, o)
	}
	if strings.Join(c.Attempts, ",") != "a0,a1" {
		t.Fatalf("attempts %v", c.Attempts)
	}
	info.Vertex = "other"
	if _, err := New(op, info); err == nil || !strings.Contains(err.Error(), "not of this task") {
		t.Fatalf("another task's state: %v", err)
	}
}

// TestStatelessOperatorRefusesState: state for an operator that keeps none is an error.
func TestStatelessOperatorRefusesState(t *testing.T) {
	op := &pb.Operator{Kind: &pb.Operator_Map{Map: &pb.MapOperator{Multiply: 2}}}
	if _, err := New(op, Info{Restored: []byte("{}")}); err == nil || !strings.Contains(err.Error(), "keeps no state") {
		t.Fatalf("map with state: %v", err)
	}
}

// TestChecksumSinkCommitsOnlyCompletedCheckpoints: in a checkpointed job the sink's file is
// written only by commits, each the document at its checkpoint's barrier; commits are
// idempotent and never go back; what follows the last committed barrier is not written; a
// sink restored from a checkpoint commits it again at Open.
func TestChecksumSinkCommitsOnlyCompletedCheckpoints(t *testing.T) {
	dir := t.TempDir()
	op := &pb.Operator{Kind: &pb.Operator_ChecksumSink{ChecksumSink: &pb.ChecksumSink{Path: "c-{subtask}.json", FlushIntervalMs: 1}}}
	info := Info{Job: "j", Vertex: "sink", AttemptID: "a0", WorkDir: dir, Checkpointed: true}
	path := filepath.Join(dir, "c-0.json")
	sink, err := New(op, info)
	if err != nil {
		t.Fatal(err)
	}
	if err := sink.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := sink.(Committer)
	feed := func(from, to int64) {
		for i := from; i < to; i++ {
			if err := sink.Process(NumericRecord(i%2, i, 0, i), nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	committed := func() Checksum {
		t.Helper()
		doc, err := ReadChecksum(path)
		if err != nil {
			t.Fatal(err)
		}
		return doc
	}
	barrier := func(id uint64) []byte {
		t.Helper()
		st, err := sink.(Stateful).SnapshotState()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.PrepareCommit(id); err != nil {
			t.Fatal(err)
		}
		return st
	}
	feed(0, 5)
	barrier(1)
	feed(5, 9)
	state2 := barrier(2)
	feed(9, 12)
	if _, err := ReadChecksum(path); err == nil {
		t.Fatal("a checkpointed sink wrote its file before any checkpoint completed")
	}
	if err := c.CommitCheckpoint(1); err != nil {
		t.Fatal(err)
	}
	if d := committed(); d.CommittedCheckpoint != 1 || d.Count != 5 {
		t.Fatalf("after commit 1: checkpoint %d, %d records; want 1 and 5", d.CommittedCheckpoint, d.Count)
	}
	if err := c.CommitCheckpoint(3); err != nil { // 3 was never staged: the newest staged up to it is 2
		t.Fatal(err)
	}
	if d := committed(); d.CommittedCheckpoint != 2 || d.Count != 9 {
		t.Fatalf("after commit 3: checkpoint %d, %d records; want 2 and 9", d.CommittedCheckpoint, d.Count)
	}
	if err := c.CommitCheckpoint(1); err != nil || committed().CommittedCheckpoint != 2 {
		t.Fatalf("an older commit changed the file: %v, %+v", err, committed())
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	if d := committed(); d.Count != 9 {
		t.Fatalf("Close wrote uncommitted records: %d", d.Count)
	}

	// Restored from checkpoint 2 on another TaskManager (another work dir): committed at Open.
	dir2 := t.TempDir()
	info.AttemptID, info.WorkDir, info.Restored, info.RestoredCheckpoint = "a1", dir2, state2, 2
	again, err := New(op, info)
	if err != nil {
		t.Fatal(err)
	}
	if err := again.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	d, err := ReadChecksum(filepath.Join(dir2, "c-0.json"))
	if err != nil || d.CommittedCheckpoint != 2 || d.Count != 9 {
		t.Fatalf("restored sink's file: %+v, %v; want checkpoint 2 with 9 records", d, err)
	}
}

// TestFileSinkCommitsPartsOfCompletedCheckpoints: in a checkpointed job the file sink writes a
// part per segment once a checkpoint at or after it completed (an aborted checkpoint's segment
// goes with the next completed one); nothing uncommitted is written; a sink restored from a
// checkpoint writes the segments that checkpoint had not committed, with the same bytes.
func TestFileSinkCommitsPartsOfCompletedCheckpoints(t *testing.T) {
	dir := t.TempDir()
	op := &pb.Operator{Kind: &pb.Operator_FileSink{FileSink: &pb.FileSink{Path: "out/{subtask}.txt"}}}
	info := Info{Job: "j", Vertex: "sink", AttemptID: "a0", WorkDir: dir, Checkpointed: true}
	sink, err := New(op, info)
	if err != nil {
		t.Fatal(err)
	}
	if err := sink.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	feed := func(from, to int64) {
		for i := from; i < to; i++ {
			if err := sink.Process(NumericRecord(1, i, 0, 0), nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	barrier := func(id uint64) []byte {
		t.Helper()
		st, err := sink.(Stateful).SnapshotState()
		if err != nil {
			t.Fatal(err)
		}
		if err := sink.(Committer).PrepareCommit(id); err != nil {
			t.Fatal(err)
		}
		return st
	}
	parts := func(d string) string {
		t.Helper()
		names, _ := filepath.Glob(filepath.Join(d, "out", "0.txt.part-*"))
		var b strings.Builder
		for _, n := range names {
			data, err := os.ReadFile(n)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%s:%q ", filepath.Base(n), data)
		}
		return b.String()
	}
	feed(0, 2)
	barrier(1) // aborted later
	feed(2, 3)
	state2 := barrier(2)
	feed(3, 4)
	if got := parts(dir); got != "" {
		t.Fatalf("parts before any completion: %s", got)
	}
	if err := sink.(Committer).CommitCheckpoint(2); err != nil {
		t.Fatal(err)
	}
	want12 := `0.txt.part-0000000001:"1 0\n1 1\n" 0.txt.part-0000000002:"1 2\n" `
	if got := parts(dir); got != want12 {
		t.Fatalf("after completing 2 (1 aborted):\n got %s\nwant %s", got, want12)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}

	// Restored from 2 elsewhere: its segments are written again, the same bytes.
	dir2 := t.TempDir()
	info.AttemptID, info.WorkDir, info.Restored, info.RestoredCheckpoint = "a1", dir2, state2, 2
	again, err := New(op, info)
	if err != nil {
		t.Fatal(err)
	}
	if err := again.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := parts(dir2); got != want12 {
		t.Fatalf("restored from 2:\n got %s\nwant %s", got, want12)
	}
	if err := again.Process(NumericRecord(1, 3, 0, 0), nil); err != nil {
		t.Fatal(err)
	}
	if err := again.Finish(nil); err != nil {
		t.Fatal(err)
	}
	if err := again.Close(); err != nil {
		t.Fatal(err)
	}
	end, err := os.ReadFile(filepath.Join(dir2, "out", "0.txt.part-end"))
	if err != nil || string(end) != "1 3\n" {
		t.Fatalf("the end part: %q, %v", end, err)
	}
}

// TestCommitBeforeCompleteIsCaught: with the planted bug commit-before-complete the checksum
// sink writes a committed document at the barrier, before any completion; the check of the
// test above (no file before a completion) sees it.
func TestCommitBeforeCompleteIsCaught(t *testing.T) {
	failpoint.Set(t, "commit-before-complete")
	dir := t.TempDir()
	op := &pb.Operator{Kind: &pb.Operator_ChecksumSink{ChecksumSink: &pb.ChecksumSink{Path: "c.json"}}}
	sink, err := New(op, Info{Job: "j", Vertex: "sink", AttemptID: "a0", WorkDir: dir, Checkpointed: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := sink.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	if err := sink.Process(NumericRecord(0, 0, 0, 0), nil); err != nil {
		t.Fatal(err)
	}
	if err := sink.(Committer).PrepareCommit(1); err != nil {
		t.Fatal(err)
	}
	doc, err := ReadChecksum(filepath.Join(dir, "c.json"))
	if err != nil || doc.CommittedCheckpoint != 1 {
		t.Fatalf("with commit-before-complete planted, no commit at the barrier (%+v, %v): the check cannot catch it", doc, err)
	}
	t.Log("caught: with commit-before-complete planted, checkpoint 1 was committed at its barrier")
}

// TestCommitRacingCloseFailsCleanly: a completion announced while the sink's task closes it
// either commits or fails with ErrSinkClosed; it never writes through a closed root (run with
// -race).
func TestCommitRacingCloseFailsCleanly(t *testing.T) {
	for _, kind := range []*pb.Operator{
		{Kind: &pb.Operator_ChecksumSink{ChecksumSink: &pb.ChecksumSink{Path: "c.json"}}},
		{Kind: &pb.Operator_FileSink{FileSink: &pb.FileSink{Path: "f.txt"}}},
	} {
		sink, err := New(kind, Info{Job: "j", Vertex: "sink", AttemptID: "a0", WorkDir: t.TempDir(), Checkpointed: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := sink.Open(context.Background()); err != nil {
			t.Fatal(err)
		}
		c := sink.(Committer)
		for id := uint64(1); id <= 50; id++ {
			if err := c.PrepareCommit(id); err != nil {
				t.Fatal(err)
			}
		}
		done := make(chan error, 1)
		go func() {
			var last error
			for id := uint64(1); id <= 50; id++ {
				if err := c.CommitCheckpoint(id); err != nil {
					last = err
				}
			}
			done <- last
		}()
		if err := sink.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil && !errors.Is(err, ErrSinkClosed) {
			t.Fatalf("a commit racing Close: %v", err)
		}
	}
}
