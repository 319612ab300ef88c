package checker

import (
	"testing"
	"time"
)

// TestCommittedExactlyOnceReadsAStampThroughItsClockStep: a document stamped by a TM whose
// clock was stepped 30 s back passes once the step is known (and fails without it, or with
// the step on another TM); a document committed early is caught under a step too.
func TestCommittedExactlyOnceReadsAStampThroughItsClockStep(t *testing.T) {
	views := ckHistory()
	final := ckView(30, 6, ckRow(3, CheckpointAborted), ckRow(4, CheckpointCompleted), ckRow(5, CheckpointPending))
	final.Consistent = true
	back := int64(30_000)
	// Checkpoint 4 completed at 4050; tm1 wrote its document at 4051 on a clock 30 s behind.
	end := []SinkFile{sinkDoc("tm1", 0, 4, 4051-back, 300), sinkDoc("tm2", 1, 4, 4050, 300)}
	step := ClockStep{TM: "tm1", Offset: -30 * time.Second, From: time.UnixMilli(3000), To: time.UnixMilli(5000)}
	in := CommittedInput{JobID: "j", Subtasks: 2, Contiguous: true, Views: views, Final: &final, End: end, ClockSteps: []ClockStep{step}}
	if r := CommittedExactlyOnce(in); r.Verdict != Pass || r.Counts["clock-stepped"] != 1 {
		t.Fatalf("a stamp under a known step failed: %v %v %v", r.Verdict, r.Counts, r.Problems)
	}
	in.ClockSteps = nil
	wantFail(t, "unknown step", CommittedExactlyOnce(in), "ms before checkpoint 4 completed")
	other := step
	other.TM = "tm2"
	in.ClockSteps = []ClockStep{other}
	wantFail(t, "step on another TM", CommittedExactlyOnce(in), "ms before checkpoint 4 completed")
	in.ClockSteps = []ClockStep{step}
	in.End = []SinkFile{sinkDoc("tm1", 0, 4, 4020-back, 300), end[1]}
	wantFail(t, "early under the step", CommittedExactlyOnce(in), "ms before checkpoint 4 completed")
	// Taking the offset off must land inside the step's window.
	in.End = end
	late := step
	late.From, late.To = time.UnixMilli(10_000), time.UnixMilli(20_000)
	in.ClockSteps = []ClockStep{late}
	wantFail(t, "outside the step's window", CommittedExactlyOnce(in), "ms before checkpoint 4 completed")
}
