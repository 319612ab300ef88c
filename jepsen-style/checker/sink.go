package checker

import (
	"encoding/json"
	"fmt"
	"os"
)

// OriginStat is the checksum sink's record of one source subtask's sequence numbers.
type OriginStat struct {
	Count      int64 `json:"count"`
	FirstSeq   int64 `json:"first_seq"`
	LastSeq    int64 `json:"last_seq"`
	Gaps       int64 `json:"gaps"`
	Duplicates int64 `json:"duplicates"`
}

// Checksum is the JSON document a checksum sink subtask writes under its TM's work dir.
type Checksum struct {
	Job      string                `json:"job"`
	Vertex   string                `json:"vertex"`
	Subtask  int32                 `json:"subtask"`
	Attempts []string              `json:"attempts,omitempty"`
	Count    int64                 `json:"count"`
	Sum      int64                 `json:"sum"`
	Origins  map[string]OriginStat `json:"origins"`
	Finished bool                  `json:"finished"`
	// CommittedCheckpoint and CommittedUnixMs are set in a checkpointed job: the document is
	// the sink's output at that checkpoint's barrier, written (at that time, on its TM's clock)
	// only once the checkpoint completed.
	CommittedCheckpoint uint64 `json:"committed_checkpoint,omitempty"`
	CommittedUnixMs     int64  `json:"committed_unix_ms,omitempty"`
}

// SinkFile is one checksum file as found on disk.
type SinkFile struct {
	Path string   `json:"path"`
	TM   string   `json:"tm"`
	Doc  Checksum `json:"doc"`
}

// ReadChecksum reads one checksum file; ok is false when the file is not a checksum document.
func ReadChecksum(path string) (Checksum, bool) {
	var c Checksum
	b, err := os.ReadFile(path)
	if err != nil || json.Unmarshal(b, &c) != nil || c.Origins == nil || c.Job == "" {
		return c, false
	}
	return c, true
}

// SinkInput is what the sink-continuity checker needs.
type SinkInput struct {
	JobID       string
	Subtasks    int // the sink vertex's parallelism
	JMOnly      bool
	AtHeal, End []SinkFile
}

// SinkContinuity checks, for runs whose faults touched only JMs, that every sink subtask has
// one file written by one attempt, that every origin's sequence has no gap and no duplicate
// (count = last-first+1), and that every origin progressed between heal and the end.
//
// In a checkpointed job (the suite's streaming job) a file is not the sink's live output, kept
// within a flush interval of it: it is written only when a checkpoint completed, and holds the
// output at that checkpoint's barrier. So a subtask has no file before its first completed
// checkpoint (the file at heal may be missing: then only the end is judged), a file lags the
// sink by up to an interval and a completion, and "progressed after heal" means a checkpoint
// completed and was committed after heal. A restarted sink continues the completed
// checkpoint's document, not the file it finds, so a restart shows as a second attempt in the
// file (and a second file when it moved), not as duplicates: the "one attempt" rule still
// catches it. Whether the committed output is exactly once in every run, TM faults included,
// is CommittedExactlyOnce's claim.
func SinkContinuity(in SinkInput) Result {
	r := newResult("sink-continuity")
	if !in.JMOnly {
		return r.skip("faults touched TMs: restarts of affected regions may replay or skip records")
	}
	byKey := func(files []SinkFile) map[string][]SinkFile {
		out := map[string][]SinkFile{}
		for _, f := range files {
			if f.Doc.Job == in.JobID {
				k := fmt.Sprintf("%s/%d", f.Doc.Vertex, f.Doc.Subtask)
				out[k] = append(out[k], f)
			}
		}
		return out
	}
	end, heal := byKey(in.End), byKey(in.AtHeal)
	r.Counts["files"] = 0
	if len(end) != in.Subtasks {
		r.problem("found checksum files for %d sink subtasks, want %d", len(end), in.Subtasks)
	}
	for _, k := range sortedStrings(end) {
		files := end[k]
		r.Counts["files"] += len(files)
		if len(files) > 1 {
			r.problem("%s: %d checksum files (on %s and %s): the sink moved", k, len(files), files[0].TM, files[1].TM)
		}
		doc := files[0].Doc
		if len(doc.Attempts) > 1 {
			r.problem("%s: written by %d attempts %v", k, len(doc.Attempts), doc.Attempts)
		}
		for _, o := range sortedStrings(doc.Origins) {
			st := doc.Origins[o]
			r.Counts["origins"]++
			r.Counts["records"] += int(st.Count)
			r.Counts["gaps"] += int(st.Gaps)
			r.Counts["duplicates"] += int(st.Duplicates)
			if st.Gaps > 0 || st.Duplicates > 0 || st.Count != st.LastSeq-st.FirstSeq+1 {
				r.problem("%s origin %s: count %d, seq %d..%d, %d gaps, %d duplicates", k, o, st.Count, st.FirstSeq, st.LastSeq, st.Gaps, st.Duplicates)
			}
			if h, ok := heal[k]; ok {
				if before, ok := h[0].Doc.Origins[o]; ok && st.LastSeq <= before.LastSeq {
					r.problem("%s origin %s: no progress after heal (last seq %d)", k, o, st.LastSeq)
				}
			}
		}
	}
	r.Summary = fmt.Sprintf("%d records from %d origins, %d gaps, %d duplicates", r.Counts["records"], r.Counts["origins"], r.Counts["gaps"], r.Counts["duplicates"])
	return *r
}
