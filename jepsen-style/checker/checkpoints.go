package checker

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// The statuses of a CheckpointRow.
const (
	CheckpointPending   = "PENDING"
	CheckpointCompleted = "COMPLETED"
	CheckpointAborted   = "ABORTED"
)

// CheckpointRow is one checkpoint of a job's checkpoint view (GetJob, JOB_VIEW_CHECKPOINTS):
// the FSM's record of it.
type CheckpointRow struct {
	ID        uint64 `json:"id"`
	Status    string `json:"status"`
	Epoch     uint64 `json:"epoch"`
	TriggerMs int64  `json:"trigger_unix_ms"`
	// EndMs is when it completed (complete_unix_ms) or was aborted; 0 while pending.
	EndMs int64 `json:"end_unix_ms,omitempty"`
}

// CheckpointView is a job's checkpoint record as one JobMaster served it: the next id, the
// counts since the job was submitted, and a row for each pending, retained completed and
// recently aborted checkpoint.
type CheckpointView struct {
	Time time.Time `json:"time"`
	Node string    `json:"node"`
	// ModifyIndex is the job record's modify index: the Raft index of the last command that
	// changed it (every checkpoint command that changes the record sets it). Views ordered by
	// it are the FSM's states in log order, whichever replica served them and whenever.
	ModifyIndex uint64 `json:"modify_index"`
	// Consistent: served by the leader after it confirmed its leadership.
	Consistent     bool            `json:"consistent,omitempty"`
	NextID         uint64          `json:"next_checkpoint_id"`
	CompletedCount uint64          `json:"completed_count"`
	AbortedCount   uint64          `json:"aborted_count"`
	Rows           []CheckpointRow `json:"rows,omitempty"`
}

func (v CheckpointView) where() string {
	return fmt.Sprintf("view at modify index %d (%s, %s)", v.ModifyIndex, v.Node, v.Time.Format("15:04:05.000"))
}

// sameRecord: two views show the same checkpoint record.
func (v CheckpointView) sameRecord(o CheckpointView) bool {
	return v.NextID == o.NextID && v.CompletedCount == o.CompletedCount && v.AbortedCount == o.AbortedCount && slices.Equal(v.Rows, o.Rows)
}

// sortViews orders views by modify index (log order), then by time.
func sortViews(views []CheckpointView) []CheckpointView {
	out := append([]CheckpointView(nil), views...)
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].ModifyIndex != out[j].ModifyIndex {
			return out[i].ModifyIndex < out[j].ModifyIndex
		}
		return out[i].Time.Before(out[j].Time)
	})
	return out
}

func ended(status string) bool { return status == CheckpointCompleted || status == CheckpointAborted }

// checkpointHistory is what the views showed of one checkpoint id.
type checkpointHistory struct {
	first  CheckpointRow // as first seen
	status string        // the latest status seen
	endMs  int64         // when it ended, as first seen ended
	gone   bool          // it was seen, then a later view no longer listed it
}

// CheckpointIDs checks the checkpoint record of a job over time, from its views (polled during
// the run, and the final one) ordered by modify index: in every view each id is below the next
// id and listed once, and the counts account for every triggered id exactly once (completed +
// aborted + pending = next id - 1: an id completed twice, or ended twice, breaks it); from view
// to view the next id and the counts never go back, an ended checkpoint never changes its
// status or its end time, one that left the view never comes back, and two views at one index
// agree; over all views the ids rise with their epochs and trigger times (one host clock), and
// completed_count is the number of distinct ids seen completed when every id was seen ended.
func CheckpointIDs(views []CheckpointView) Result {
	r := newResult("checkpoint-ids")
	if len(views) == 0 {
		r.problem("no checkpoint view of the job was read")
		r.Summary = "no views"
		return *r
	}
	sorted := sortViews(views)
	ids := map[uint64]*checkpointHistory{}
	var prev *CheckpointView
	for i := range sorted {
		v := sorted[i]
		r.Counts["views"]++
		if prev != nil && prev.ModifyIndex == v.ModifyIndex {
			// The same state of the log: equal, and judged once.
			if !prev.sameRecord(v) {
				r.problem("%s and %s: two views at one index differ (next id %d/%d, completed %d/%d, aborted %d/%d, %d/%d rows)", prev.where(), v.where(),
					prev.NextID, v.NextID, prev.CompletedCount, v.CompletedCount, prev.AbortedCount, v.AbortedCount, len(prev.Rows), len(v.Rows))
			}
			continue
		}
		listed := map[uint64]string{}
		pending := uint64(0)
		for _, row := range v.Rows {
			if row.ID == 0 || row.ID >= v.NextID {
				r.problem("%s: checkpoint %d is not below the next id %d", v.where(), row.ID, v.NextID)
			}
			if was, dup := listed[row.ID]; dup {
				if was == CheckpointCompleted && row.Status == CheckpointCompleted {
					r.Counts["completed-twice"]++
					r.problem("%s: checkpoint %d is listed COMPLETED twice", v.where(), row.ID)
				} else {
					r.problem("%s: checkpoint %d is listed %s and %s", v.where(), row.ID, was, row.Status)
				}
			}
			listed[row.ID] = row.Status
			if row.Status == CheckpointPending {
				pending++
			}
		}
		if v.CompletedCount+v.AbortedCount+pending != v.NextID-1 {
			r.Counts["miscounted-views"]++
			r.problem("%s: %d completed + %d aborted + %d pending = %d, but %d checkpoints were triggered (next id %d): a checkpoint ended twice, or never",
				v.where(), v.CompletedCount, v.AbortedCount, pending, v.CompletedCount+v.AbortedCount+pending, v.NextID-1, v.NextID)
		}
		if prev != nil && (v.NextID < prev.NextID || v.CompletedCount < prev.CompletedCount || v.AbortedCount < prev.AbortedCount) {
			r.problem("%s: next id %d, completed %d, aborted %d went back from %d, %d, %d (%s)", v.where(), v.NextID, v.CompletedCount, v.AbortedCount,
				prev.NextID, prev.CompletedCount, prev.AbortedCount, prev.where())
		}
		for _, row := range v.Rows {
			h := ids[row.ID]
			if h == nil {
				h = &checkpointHistory{first: row, status: row.Status}
				if ended(row.Status) {
					h.endMs = row.EndMs
				}
				ids[row.ID] = h
				continue
			}
			if h.gone {
				r.problem("%s: checkpoint %d is listed %s again after a view without it", v.where(), row.ID, row.Status)
				h.gone = false
			}
			if row.Epoch != h.first.Epoch || row.TriggerMs != h.first.TriggerMs {
				r.problem("%s: checkpoint %d triggered in epoch %d at %d, first seen triggered in epoch %d at %d", v.where(), row.ID, row.Epoch, row.TriggerMs, h.first.Epoch, h.first.TriggerMs)
			}
			switch {
			case ended(h.status) && row.Status != h.status:
				r.problem("%s: checkpoint %d is %s, seen %s before", v.where(), row.ID, row.Status, h.status)
			case ended(h.status) && row.EndMs != h.endMs:
				r.problem("%s: checkpoint %d %s at %d, seen %s at %d before: it ended twice", v.where(), row.ID, row.Status, row.EndMs, h.status, h.endMs)
			case !ended(h.status) && ended(row.Status):
				h.status, h.endMs = row.Status, row.EndMs
			}
		}
		if prev != nil {
			for _, row := range prev.Rows {
				if _, still := listed[row.ID]; !still {
					ids[row.ID].gone = true
				}
			}
		}
		prev = &sorted[i]
	}

	order := sortedIDs(ids)
	for i := 1; i < len(order); i++ {
		a, b := ids[order[i-1]].first, ids[order[i]].first
		if b.Epoch < a.Epoch {
			r.problem("checkpoint %d was triggered in epoch %d, below the epoch %d of checkpoint %d", b.ID, b.Epoch, a.Epoch, a.ID)
		}
		if b.TriggerMs < a.TriggerMs {
			r.problem("checkpoint %d was triggered at %d, %d ms before checkpoint %d", b.ID, b.TriggerMs, a.TriggerMs-b.TriggerMs, a.ID)
		}
	}
	last := sorted[len(sorted)-1]
	var completed, aborted, seenEnded uint64
	for _, id := range order {
		h := ids[id]
		switch h.status {
		case CheckpointCompleted:
			completed++
		case CheckpointAborted:
			aborted++
		}
		if id < last.NextID && ended(h.status) {
			seenEnded++
		}
	}
	var pendingLast uint64
	for _, row := range last.Rows {
		if row.Status == CheckpointPending {
			pendingLast++
		}
	}
	unseen := int64(last.NextID-1) - int64(seenEnded) - int64(pendingLast)
	if completed > last.CompletedCount {
		r.problem("%d distinct checkpoints were seen completed, but the last view counts %d", completed, last.CompletedCount)
	}
	if unseen <= 0 && (completed != last.CompletedCount || aborted != last.AbortedCount) {
		r.problem("every checkpoint was seen ended, %d completed and %d aborted, but the last view counts %d completed and %d aborted", completed, aborted, last.CompletedCount, last.AbortedCount)
	}
	r.Counts["triggered"] = int(last.NextID - 1)
	r.Counts["completed"] = int(last.CompletedCount)
	r.Counts["aborted"] = int(last.AbortedCount)
	r.Counts["never-seen-ended"] = int(max(unseen, 0))
	r.Summary = fmt.Sprintf("%d views: %d checkpoints triggered, %d completed, %d aborted (%d never seen ended)", len(sorted),
		last.NextID-1, last.CompletedCount, last.AbortedCount, max(unseen, 0))
	if r.Counts["completed-twice"]+r.Counts["miscounted-views"] > 0 {
		r.Summary += fmt.Sprintf("; %d views list a checkpoint completed twice, %d whose counts do not add up to the ids triggered", r.Counts["completed-twice"], r.Counts["miscounted-views"])
	}
	return *r
}

func sortedIDs[T any](m map[uint64]T) []uint64 {
	out := make([]uint64, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// ForwardOnly reports whether every edge on a path into vertex is FORWARD: each of its subtasks
// then reads one origin, whose sequence numbers arrive in order, so a gap is a lost record (a
// keyed (ALL_TO_ALL) exchange splits an origin's sequence over the subtasks).
func ForwardOnly(g *pb.JobGraph, vertex string) bool {
	seen := map[string]bool{}
	todo := []string{vertex}
	for len(todo) > 0 {
		v := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if seen[v] {
			continue
		}
		seen[v] = true
		for _, e := range g.GetEdges() {
			if e.GetTarget() != v {
				continue
			}
			if e.GetDistribution() != pb.Distribution_DISTRIBUTION_FORWARD {
				return false
			}
			todo = append(todo, e.GetSource())
		}
	}
	return true
}

// CommittedInput is what the committed-exactly-once checker needs: the sink's committed
// documents and what the FSM recorded of the checkpoints they name.
type CommittedInput struct {
	JobID    string
	Subtasks int // the sink vertex's parallelism
	// Contiguous: the sink's origins arrive through FORWARD edges only (ForwardOnly), so an
	// origin's sequence must have no gap.
	Contiguous bool
	// Views: every checkpoint view read (polled, and the final one).
	Views []CheckpointView
	// Final is the consistent view read after the last documents were read; nil when that
	// read failed.
	Final       *CheckpointView
	AtHeal, End []SinkFile
	// ClockSteps are the TMs' stepped wall clocks (clock-step-tm): a commit stamp written
	// under one is read back through it (clocksteps.go).
	ClockSteps []ClockStep
}

// committedDoc is one committed document with where it was found.
type committedDoc struct {
	tm, path string
	doc      Checksum
}

func (d committedDoc) String() string {
	return fmt.Sprintf("%s/%d on %s (checkpoint %d)", d.doc.Vertex, d.doc.Subtask, d.tm, d.doc.CommittedCheckpoint)
}

// CommittedExactlyOnce checks the output a checkpointed job's checksum sinks committed: every
// document found (at heal and at the end, on every TM) names a checkpoint the FSM completed,
// was written no earlier than its completion (one host clock: the leader stamps the completion
// before it commits it, the TM stamps the document after it was told), counts each record of
// every origin once (no duplicate; no gap where the origins arrive contiguous), and the
// documents of one subtask, ordered by checkpoint, never go back (count and every origin's last
// seq; two of the same checkpoint are equal). A document of a finished sink commits the end of
// its input, which no checkpoint completes: it is checked for its counts only.
func CommittedExactlyOnce(in CommittedInput) Result {
	r := newResult("committed-exactly-once")
	type fate struct {
		status string
		endMs  int64
	}
	fates := map[uint64]fate{}
	views := in.Views
	if in.Final != nil {
		views = append(append([]CheckpointView(nil), views...), *in.Final)
	}
	for _, v := range views {
		for _, row := range v.Rows {
			f, ok := fates[row.ID]
			switch {
			case row.Status == CheckpointAborted:
				fates[row.ID] = fate{status: CheckpointAborted, endMs: row.EndMs}
			case row.Status == CheckpointCompleted && (!ok || f.status == CheckpointPending):
				fates[row.ID] = fate{status: CheckpointCompleted, endMs: row.EndMs}
			case !ok:
				fates[row.ID] = fate{status: row.Status}
			}
		}
	}
	finalStatus := map[uint64]string{}
	if in.Final != nil {
		for _, row := range in.Final.Rows {
			finalStatus[row.ID] = row.Status
		}
	}

	bySubtask := map[string][]committedDoc{}
	seen := map[string]bool{}
	for _, files := range [][]SinkFile{in.AtHeal, in.End} {
		for _, f := range files {
			if f.Doc.Job != in.JobID {
				continue
			}
			k := fmt.Sprintf("%s/%d", f.Doc.Vertex, f.Doc.Subtask)
			id := fmt.Sprintf("%s|%s|%d|%d", f.TM, f.Path, f.Doc.CommittedCheckpoint, f.Doc.CommittedUnixMs)
			if seen[id] {
				continue // the same file read at heal and at the end, unchanged
			}
			seen[id] = true
			bySubtask[k] = append(bySubtask[k], committedDoc{tm: f.TM, path: f.Path, doc: f.Doc})
		}
	}
	endSubtasks := map[string]bool{}
	for _, f := range in.End {
		if f.Doc.Job == in.JobID {
			endSubtasks[fmt.Sprintf("%s/%d", f.Doc.Vertex, f.Doc.Subtask)] = true
		}
	}
	if len(endSubtasks) < in.Subtasks {
		r.problem("committed documents of %d sink subtasks at the end, want %d (no checkpoint completed for the others?)", len(endSubtasks), in.Subtasks)
	}

	var newest []uint64
	for _, k := range sortedStrings(bySubtask) {
		docs := bySubtask[k]
		for _, d := range docs {
			r.Counts["documents"]++
			c := d.doc
			for _, o := range sortedStrings(c.Origins) {
				st := c.Origins[o]
				if st.Duplicates > 0 {
					r.Counts["duplicates"] += int(st.Duplicates)
					r.problem("%s origin %s: %d duplicates (count %d, seq %d..%d)", d, o, st.Duplicates, st.Count, st.FirstSeq, st.LastSeq)
				}
				if in.Contiguous && (st.Gaps > 0 || st.Count != st.LastSeq-st.FirstSeq+1) {
					r.Counts["gaps"] += int(max(st.Gaps, 1))
					r.problem("%s origin %s: %d gaps (count %d, seq %d..%d)", d, o, st.Gaps, st.Count, st.FirstSeq, st.LastSeq)
				}
			}
			if c.Finished {
				r.Counts["finished"]++
				continue
			}
			id := c.CommittedCheckpoint
			if id == 0 {
				r.problem("%s: written without a committed checkpoint", d)
				continue
			}
			if in.Final != nil && id >= in.Final.NextID {
				r.problem("%s: checkpoint %d was never triggered (the next id is %d)", d, id, in.Final.NextID)
				continue
			}
			if finalStatus[id] == CheckpointPending {
				r.Counts["before-completion"]++
				r.problem("%s: committed at %d, but checkpoint %d was still PENDING in the final view, read after the document", d, c.CommittedUnixMs, id)
				continue
			}
			f, known := fates[id]
			switch {
			case known && f.status == CheckpointAborted:
				r.Counts["aborted-committed"]++
				r.problem("%s: checkpoint %d was ABORTED (at %d), yet its output is committed", d, id, f.endMs)
			case known && f.status == CheckpointCompleted:
				r.Counts["verified"]++
				if c.CommittedUnixMs < f.endMs && steppedAfter(in.ClockSteps, d.tm, c.CommittedUnixMs, f.endMs) {
					r.Counts["clock-stepped"]++
				} else if c.CommittedUnixMs < f.endMs {
					r.Counts["before-completion"]++
					r.problem("%s: committed at %d, %d ms before checkpoint %d completed (at %d)", d, c.CommittedUnixMs, f.endMs-c.CommittedUnixMs, id, f.endMs)
				}
			default:
				r.Counts["unverified"]++ // no view listed it ended: it left the retained ones unseen
			}
		}

		sort.SliceStable(docs, func(i, j int) bool {
			a, b := docs[i].doc, docs[j].doc
			if a.CommittedCheckpoint != b.CommittedCheckpoint {
				return a.CommittedCheckpoint < b.CommittedCheckpoint
			}
			return a.CommittedUnixMs < b.CommittedUnixMs
		})
		for i := 1; i < len(docs); i++ {
			a, b := docs[i-1], docs[i]
			if a.doc.Finished {
				continue
			}
			if a.doc.CommittedCheckpoint == b.doc.CommittedCheckpoint && !b.doc.Finished {
				if a.doc.Count != b.doc.Count || a.doc.Sum != b.doc.Sum || !sameOrigins(a.doc.Origins, b.doc.Origins) {
					r.problem("%s and %s: two documents of one checkpoint differ (count %d and %d, sum %d and %d)", a, b, a.doc.Count, b.doc.Count, a.doc.Sum, b.doc.Sum)
				}
				continue
			}
			if b.doc.Count < a.doc.Count {
				r.problem("%s: count %d, below the %d of %s", b, b.doc.Count, a.doc.Count, a)
			}
			for _, o := range sortedStrings(a.doc.Origins) {
				sa := a.doc.Origins[o]
				sb, ok := b.doc.Origins[o]
				switch {
				case !ok:
					r.problem("%s: origin %s is gone (it is in %s)", b, o, a)
				case sb.FirstSeq != sa.FirstSeq || sb.LastSeq < sa.LastSeq:
					r.problem("%s origin %s: seq %d..%d, went back from %d..%d in %s", b, o, sb.FirstSeq, sb.LastSeq, sa.FirstSeq, sa.LastSeq, a)
				}
			}
		}
		top := docs[len(docs)-1].doc
		newest = append(newest, top.CommittedCheckpoint)
		r.Counts["records"] += int(top.Count)
	}
	r.Summary = fmt.Sprintf("%d committed documents of %d subtasks (newest checkpoints %v): %d checked against a completion, %d unverified; %d records committed, %d duplicates, %d gaps",
		r.Counts["documents"], len(bySubtask), newest, r.Counts["verified"], r.Counts["unverified"], r.Counts["records"], r.Counts["duplicates"], r.Counts["gaps"])
	if n := r.Counts["before-completion"] + r.Counts["aborted-committed"]; n > 0 {
		r.Summary += fmt.Sprintf("; %d committed before their checkpoint completed, %d of an aborted one", r.Counts["before-completion"], r.Counts["aborted-committed"])
	}
	return *r
}

func sameOrigins(a, b map[string]OriginStat) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
