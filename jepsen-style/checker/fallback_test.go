package checker

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// fallbackRecord is a stream job record whose source[0] history holds the given causes.
func fallbackRecordOf(status pb.JobStatus, cause string, causes ...string) *pb.JobRecord {
	var hist []*pb.Execution
	for _, c := range causes {
		hist = append(hist, &pb.Execution{State: pb.ExecutionState_EXECUTION_STATE_FAILED, FailureCause: c})
	}
	return &pb.JobRecord{Status: status, FailureCause: cause, ExecutionGraph: &pb.ExecutionGraph{Vertices: []*pb.ExecutionJobVertex{
		{VertexId: "source", Subtasks: []*pb.ExecutionVertex{{VertexId: "source", History: hist, Current: &pb.Execution{State: pb.ExecutionState_EXECUTION_STATE_RUNNING}}}},
	}}}
}

// refusedCause is the failure cause a TaskManager reports (checkpoint.RestoreError's message).
func refusedCause(id uint64, path string, reason string) string {
	return fmt.Sprintf("restore: unusable checkpoint %d: state file %q of source[0] (acknowledged by attempt 0): %s: the details", id, path, reason)
}

const (
	mismatch  = "state checksum mismatch"
	truncated = "state is truncated"
)

// TestCheckpointFallback: a damaged state refused by its restore is a fallback; one no restore
// refused fails (the planted bug restore-unverified); a refused state no fault damaged fails; a
// job failed for want of a usable checkpoint fails; nothing damaged skips.
func TestCheckpointFallback(t *testing.T) {
	running := pb.JobStatus_JOB_STATUS_RUNNING
	dmg := []DamagedState{{Checkpoint: 7, Path: "j/chk-7/source-0-0.state", Kind: "bit-flip", TM: "tm1"}}
	for _, tc := range []struct {
		name    string
		in      FallbackInput
		verdict Verdict
		problem string
	}{
		{"nothing damaged", FallbackInput{Final: fallbackRecordOf(running, "")}, Skipped, ""},
		{"the damaged state refused: a fallback", FallbackInput{Damaged: dmg, Final: fallbackRecordOf(running, "", refusedCause(7, dmg[0].Path, mismatch))}, Pass, ""},
		{"the damaged state restored", FallbackInput{Damaged: dmg, Final: fallbackRecordOf(running, "", "task failed")}, Fail, "no restore refused it"},
		{"an intact state refused", FallbackInput{Final: fallbackRecordOf(running, "", refusedCause(6, "j/chk-6/source-1-0.state", mismatch))}, Fail, "which no fault damaged"},
		{"a missing state is counted, not failed", FallbackInput{Final: fallbackRecordOf(running, "", refusedCause(6, "j/chk-6/source-1-0.state", reasonMissing))}, Pass, ""},
		{"the job failed for want of a checkpoint", FallbackInput{Damaged: dmg, Final: fallbackRecordOf(pb.JobStatus_JOB_STATUS_FAILED, "checkpoint restore refused: no usable checkpoint for region 0",
			refusedCause(7, dmg[0].Path, truncated))}, Fail, "no usable checkpoint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := CheckpointFallback(tc.in)
			if r.Verdict != tc.verdict || (tc.problem != "" && !strings.Contains(strings.Join(r.Problems, "\n"), tc.problem)) {
				t.Fatalf("%s: %s %v, want %s with a problem containing %q", r.Summary, r.Verdict, r.Problems, tc.verdict, tc.problem)
			}
		})
	}
	r := CheckpointFallback(FallbackInput{Damaged: dmg, Final: fallbackRecordOf(running, "", refusedCause(7, dmg[0].Path, mismatch))})
	if r.Counts["fallbacks"] != 1 || r.Counts["damaged-bit-flip"] != 1 {
		t.Fatalf("counts %v", r.Counts)
	}
}
