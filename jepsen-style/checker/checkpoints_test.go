package checker

import (
	"strings"
	"testing"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// ckRow is checkpoint id triggered in epoch 1 at id*1000 ms; a completed or aborted one ended
// 50 ms later.
func ckRow(id uint64, status string) CheckpointRow {
	row := CheckpointRow{ID: id, Status: status, Epoch: 1, TriggerMs: int64(id) * 1000}
	if ended(status) {
		row.EndMs = row.TriggerMs + 50
	}
	return row
}

// ckView is a view at modify index idx: the counts are derived from the rows and the ids below
// the first row (all completed), so the view is consistent unless a test changes it.
func ckView(idx uint64, next uint64, rows ...CheckpointRow) CheckpointView {
	v := CheckpointView{Time: at(float64(idx)), Node: "jm1", ModifyIndex: idx, NextID: next, Rows: rows}
	listed := uint64(0)
	for _, r := range rows {
		listed++
		switch r.Status {
		case CheckpointCompleted:
			v.CompletedCount++
		case CheckpointAborted:
			v.AbortedCount++
		}
	}
	v.CompletedCount += next - 1 - listed // older ones, completed and dropped
	return v
}

// history is a clean run: 1 and 2 complete, 3 is aborted, 4 completes (retained 2).
func ckHistory() []CheckpointView {
	return []CheckpointView{
		ckView(10, 2, ckRow(1, CheckpointPending)),
		ckView(12, 2, ckRow(1, CheckpointCompleted)),
		ckView(15, 3, ckRow(1, CheckpointCompleted), ckRow(2, CheckpointPending)),
		ckView(18, 3, ckRow(1, CheckpointCompleted), ckRow(2, CheckpointCompleted)),
		ckView(21, 4, ckRow(1, CheckpointCompleted), ckRow(2, CheckpointCompleted), ckRow(3, CheckpointAborted)),
		ckView(25, 5, ckRow(2, CheckpointCompleted), ckRow(3, CheckpointAborted), ckRow(4, CheckpointCompleted)),
	}
}

func wantFail(t *testing.T, what string, r Result, substr string) {
	t.Helper()
	if r.Verdict != Fail {
		t.Fatalf("%s was not caught: %v %s", what, r.Verdict, r.Summary)
	}
	for _, p := range r.Problems {
		if strings.Contains(p, substr) {
			return
		}
	}
	t.Fatalf("%s: no problem says %q: %v", what, substr, r.Problems)
}

func TestCheckpointIDs(t *testing.T) {
	good := ckHistory()
	r := CheckpointIDs(good)
	if r.Verdict != Pass || r.Counts["completed"] != 3 || r.Counts["aborted"] != 1 || r.Counts["never-seen-ended"] != 0 {
		t.Fatalf("a clean history failed: %v %s %v", r.Verdict, r.Summary, r.Problems)
	}
	// The views may come in any order and from any replica: the modify index orders them.
	shuffled := []CheckpointView{good[4], good[1], good[5], good[0], good[3], good[2]}
	if r := CheckpointIDs(shuffled); r.Verdict != Pass {
		t.Fatalf("views out of time order failed: %v", r.Problems)
	}
	// A view repeated by another replica at the same index is the same record.
	again := good[3]
	again.Node = "jm2"
	if r := CheckpointIDs(append(append([]CheckpointView(nil), good...), again)); r.Verdict != Pass {
		t.Fatalf("a second replica's view at the same index failed: %v", r.Problems)
	}
	if r := CheckpointIDs(nil); r.Verdict != Fail {
		t.Fatalf("no view at all passed: %+v", r)
	}

	// complete-twice: the second completion of 4 lists it twice and counts it twice.
	twice := append([]CheckpointView(nil), good...)
	v := ckView(27, 5, ckRow(3, CheckpointAborted), ckRow(4, CheckpointCompleted), ckRow(4, CheckpointCompleted))
	v.CompletedCount = good[5].CompletedCount + 1
	twice = append(twice, v)
	r = CheckpointIDs(twice)
	wantFail(t, "a checkpoint completed twice", r, "listed COMPLETED twice")
	wantFail(t, "a checkpoint completed twice", r, "a checkpoint ended twice, or never")
	if r.Counts["completed-twice"] != 1 || r.Counts["miscounted-views"] != 1 {
		t.Fatalf("counts: %v", r.Counts)
	}
	// Counted twice with retained 1 (the list shows it once): the counts still tell.
	v = ckView(27, 5, ckRow(4, CheckpointCompleted))
	v.CompletedCount, v.AbortedCount = 4, 1
	wantFail(t, "a checkpoint counted twice", CheckpointIDs(append(append([]CheckpointView(nil), good...), v)), "a checkpoint ended twice, or never")
	// A second completion with its own timestamp, seen in two views.
	v = good[5]
	v.ModifyIndex, v.Rows = 27, append([]CheckpointRow(nil), v.Rows...)
	v.Rows[2].EndMs += 300
	wantFail(t, "a completion time that changed", CheckpointIDs(append(append([]CheckpointView(nil), good...), v)), "it ended twice")

	for name, tc := range map[string]struct {
		change func([]CheckpointView) []CheckpointView
		says   string
	}{
		"completed and aborted": {func(h []CheckpointView) []CheckpointView {
			v := ckView(27, 5, ckRow(3, CheckpointAborted), ckRow(4, CheckpointCompleted))
			v.Rows[0].Status = CheckpointCompleted
			v.CompletedCount, v.AbortedCount = 4, 0
			return append(h, v)
		}, "is COMPLETED, seen ABORTED before"},
		"both in one view": {func(h []CheckpointView) []CheckpointView {
			v := ckView(27, 5, ckRow(3, CheckpointAborted), ckRow(4, CheckpointCompleted), ckRow(4, CheckpointAborted))
			v.CompletedCount, v.AbortedCount = 3, 1
			return append(h, v)
		}, "listed COMPLETED and ABORTED"},
		"id at the next id": {func(h []CheckpointView) []CheckpointView {
			h[5].NextID = 4
			h[5].CompletedCount--
			return h
		}, "is not below the next id 4"},
		"next id went back": {func(h []CheckpointView) []CheckpointView {
			return append(h, ckView(30, 4, ckRow(2, CheckpointCompleted), ckRow(3, CheckpointAborted)))
		}, "went back"},
		"reused id": {func(h []CheckpointView) []CheckpointView {
			row := ckRow(4, CheckpointCompleted)
			row.TriggerMs += 9000
			return append(h, ckView(30, 5, ckRow(3, CheckpointAborted), row))
		}, "first seen triggered"},
		"id below an older epoch": {func(h []CheckpointView) []CheckpointView {
			for i := range h {
				for j := range h[i].Rows {
					if h[i].Rows[j].ID == 1 {
						h[i].Rows[j].Epoch = 2
					}
				}
			}
			return h
		}, "below the epoch 2 of checkpoint 1"},
		"id triggered earlier than a lower one": {func(h []CheckpointView) []CheckpointView {
			for i := range h {
				for j := range h[i].Rows {
					if h[i].Rows[j].ID == 2 {
						h[i].Rows[j].TriggerMs, h[i].Rows[j].EndMs = 500, 550
					}
				}
			}
			return h
		}, "ms before checkpoint 1"},
		"dropped and back": {func(h []CheckpointView) []CheckpointView {
			return append(h, ckView(30, 5, ckRow(1, CheckpointCompleted), ckRow(3, CheckpointAborted), ckRow(4, CheckpointCompleted)))
		}, "again after a view without it"},
		"two views at one index": {func(h []CheckpointView) []CheckpointView {
			other := h[3]
			other.CompletedCount++
			other.Node = "jm3"
			return append(h, other)
		}, "two views at one index differ"},
	} {
		h := ckHistory()
		wantFail(t, name, CheckpointIDs(tc.change(h)), tc.says)
	}
}

// sinkDoc is sink subtask sub's committed document of checkpoint id, written at ms, holding
// origin sub's seqs 0..last.
func sinkDoc(tm string, sub int32, id uint64, ms int64, last int64) SinkFile {
	return SinkFile{TM: tm, Path: tm + "/checksum.json", Doc: Checksum{Job: "j", Vertex: "sink", Subtask: sub, Count: last + 1, Sum: last * 7,
		Origins:             map[string]OriginStat{string(rune('0' + sub)): {Count: last + 1, FirstSeq: 0, LastSeq: last}},
		CommittedCheckpoint: id, CommittedUnixMs: ms}}
}

func TestCommittedExactlyOnce(t *testing.T) {
	views := ckHistory()
	final := ckView(30, 6, ckRow(3, CheckpointAborted), ckRow(4, CheckpointCompleted), ckRow(5, CheckpointPending))
	final.Consistent = true
	// Checkpoint 2 completed at 2050, 4 at 4050.
	heal := []SinkFile{sinkDoc("tm1", 0, 2, 2060, 100), sinkDoc("tm2", 1, 2, 2061, 100)}
	end := []SinkFile{sinkDoc("tm1", 0, 4, 4051, 300), sinkDoc("tm2", 1, 4, 4050, 300),
		sinkDoc("tm3", 1, 2, 2070, 100)} // an older one left where the region ran before it moved
	in := CommittedInput{JobID: "j", Subtasks: 2, Contiguous: true, Views: views, Final: &final, AtHeal: heal, End: end}
	r := CommittedExactlyOnce(in)
	if r.Verdict != Pass || r.Counts["verified"] != 5 || r.Counts["records"] != 602 {
		t.Fatalf("clean documents failed: %v %s %v", r.Verdict, r.Summary, r.Problems)
	}
	// A document naming a checkpoint no view showed ended (it left the retained ones between
	// two polls) is counted unverified, not failed.
	in.End = append(end[:2:2], sinkDoc("tm3", 1, 1, 1060, 50))
	in.Views = []CheckpointView{views[5]}
	if r := CommittedExactlyOnce(in); r.Verdict != Pass || r.Counts["unverified"] != 1 {
		t.Fatalf("an unverifiable document: %v %v %v", r.Verdict, r.Counts, r.Problems)
	}
	in.Views = views

	for name, tc := range map[string]struct {
		end  []SinkFile
		says string
	}{
		// commit-before-complete: written at the barrier, before the completion.
		"committed before the completion": {[]SinkFile{sinkDoc("tm1", 0, 4, 4020, 300), end[1]}, "30 ms before checkpoint 4 completed"},
		"committed while pending":         {[]SinkFile{sinkDoc("tm1", 0, 5, 5010, 400), end[1]}, "still PENDING in the final view"},
		"aborted checkpoint":              {[]SinkFile{sinkDoc("tm1", 0, 3, 3010, 200), end[1]}, "was ABORTED"},
		"never triggered":                 {[]SinkFile{sinkDoc("tm1", 0, 9, 9010, 900), end[1]}, "never triggered"},
		"no checkpoint":                   {[]SinkFile{sinkDoc("tm1", 0, 0, 9010, 900), end[1]}, "without a committed checkpoint"},
		"missing subtask":                 {[]SinkFile{end[0]}, "of 1 sink subtasks at the end, want 2"},
		"went back":                       {[]SinkFile{end[0], end[1], sinkDoc("tm3", 0, 4, 4100, 250)}, "two documents of one checkpoint differ"},
		"count below an older one":        {[]SinkFile{sinkDoc("tm1", 0, 4, 4051, 90), end[1]}, "below the 101"},
	} {
		in.End = tc.end
		wantFail(t, name, CommittedExactlyOnce(in), tc.says)
	}
	in.End = end

	dup := sinkDoc("tm1", 0, 4, 4051, 300)
	dup.Doc.Origins["0"] = OriginStat{Count: 303, FirstSeq: 0, LastSeq: 300, Duplicates: 2}
	in.End = []SinkFile{dup, end[1]}
	wantFail(t, "a duplicate", CommittedExactlyOnce(in), "2 duplicates")
	gap := sinkDoc("tm1", 0, 4, 4051, 300)
	gap.Doc.Origins["0"] = OriginStat{Count: 290, FirstSeq: 0, LastSeq: 300, Gaps: 1}
	in.End = []SinkFile{gap, end[1]}
	wantFail(t, "a gap", CommittedExactlyOnce(in), "1 gaps")
	// Where origins are split over the subtasks (a keyed exchange), gaps are expected.
	in.Contiguous = false
	if r := CommittedExactlyOnce(in); r.Verdict != Pass {
		t.Fatalf("a gap behind a keyed exchange failed: %v", r.Problems)
	}
	in.Contiguous = true
	// A finished sink commits the end of its input, not a checkpoint.
	fin := sinkDoc("tm1", 0, 5, 5010, 400)
	fin.Doc.Finished = true
	in.End = []SinkFile{fin, end[1]}
	if r := CommittedExactlyOnce(in); r.Verdict != Pass || r.Counts["finished"] != 1 {
		t.Fatalf("a finished sink's document failed: %v", r.Problems)
	}
	// Without the final view, a pending checkpoint is not known pending.
	in.End, in.Final = []SinkFile{sinkDoc("tm1", 0, 5, 5010, 400), end[1]}, nil
	if r := CommittedExactlyOnce(in); r.Verdict != Pass || r.Counts["unverified"] != 1 {
		t.Fatalf("without a final view: %v %v", r.Counts, r.Problems)
	}
}

func TestForwardOnly(t *testing.T) {
	fwd := func(a, b string, d pb.Distribution) *pb.JobEdge {
		return &pb.JobEdge{Source: a, Target: b, Distribution: d}
	}
	g := &pb.JobGraph{Edges: []*pb.JobEdge{fwd("source", "map", pb.Distribution_DISTRIBUTION_FORWARD), fwd("map", "sink", pb.Distribution_DISTRIBUTION_FORWARD),
		fwd("other", "sink2", pb.Distribution_DISTRIBUTION_ALL_TO_ALL)}}
	if !ForwardOnly(g, "sink") || ForwardOnly(g, "sink2") {
		t.Fatal("ForwardOnly")
	}
	g.Edges[0].Distribution = pb.Distribution_DISTRIBUTION_ALL_TO_ALL
	if ForwardOnly(g, "sink") {
		t.Fatal("a keyed exchange upstream of the map was not seen")
	}
}
