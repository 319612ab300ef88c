package checker

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/jmcluster/jmcluster/internal/pipelinecheck"
)

// PipelineRow is one window result the pipeline committed: a row of its PostgreSQL table or a
// message of its JetStream output stream (ID its Nats-Msg-Id; "" for a row).
type PipelineRow struct {
	User    string `json:"user"`
	Start   int64  `json:"start"`
	Count   int64  `json:"count"`
	Sum     int64  `json:"sum"`
	Ordinal int64  `json:"ordinal"`
	ID      string `json:"id,omitempty"`
}

// PipelineInput is what the pipeline checkers read: the clicks the server acknowledged (the
// closing clicks left out: their windows never close), the window size, and what one sink
// committed, read at the end.
type PipelineInput struct {
	WindowMs  int64
	Published []pipelinecheck.Click
	// Unacked counts publishes that failed for good: each may or may not be in the stream.
	Unacked int
	Rows    []PipelineRow
	// Unparsed are the sink's results that are not window results (stream messages).
	Unparsed []string
	// ReadErr is why the sink could not be read ("" when it was).
	ReadErr string
	// DeadLetters are the job's committed dead letters, each "<tm>: <the click's JSON>": a late
	// click there is what the window must do with it; any other is a click left out of its
	// window.
	DeadLetters []string
	// LatePublished counts the late clicks acknowledged (pipelinecheck.Click.Late): in no
	// window's total, so a row of their window is an unexpected window.
	LatePublished int
	// LateStored is the lineage of every late click the clicks stream holds, acknowledged or
	// not (nil: not known): each must be in DeadLetters exactly once.
	LateStored []pipelinecheck.Lineage
	// Restarts is the pipeline job's restart count at the end (-1: unknown); reported only.
	Restarts int
}

// PipelineTable checks the pipeline's PostgreSQL table against the published clicks: every
// window of them (user, window start) exactly once with their count and amount, no row of a
// window nothing was published in, and each user's ordinals (the WebAssembly function's
// numbering, kept in its keyed state) 1, 2, ... in window order.
func PipelineTable(in PipelineInput) Result {
	return checkPipeline("pipeline-table", "rows", in)
}

// PipelineStream checks the output stream of the pipeline's JetStream sink as PipelineTable
// checks the table, and that no message id is there twice (the stream deduplicates by id
// within its window; a second id would be a message published twice under two names).
func PipelineStream(in PipelineInput) Result {
	r := checkPipeline("pipeline-stream", "messages", in)
	ids := map[string]int{}
	for _, row := range in.Rows {
		if row.ID == "" {
			r.problem("the result of %s %d has no message id", row.User, row.Start)
			continue
		}
		ids[row.ID]++
	}
	for _, id := range sortedStrings(ids) {
		if ids[id] > 1 {
			r.problem("message id %s %d times", id, ids[id])
		}
	}
	for _, u := range in.Unparsed {
		r.problem("%s", u)
	}
	return r
}

func checkPipeline(name, unit string, in PipelineInput) Result {
	r := newResult(name)
	if in.ReadErr != "" {
		r.problem("could not read the %s: %s", unit, in.ReadErr)
		r.Summary = "unreadable: " + in.ReadErr
		return *r
	}
	want := pipelinecheck.Totals(in.Published, in.WindowMs)
	got := map[pipelinecheck.WindowKey][]pipelinecheck.Total{}
	for _, row := range in.Rows {
		k := pipelinecheck.WindowKey{User: row.User, Start: row.Start}
		got[k] = append(got[k], pipelinecheck.Total{Count: row.Count, Sum: row.Sum})
	}
	clicks, amount := pipelinecheck.Sums(want)
	r.Counts["published"] = int(clicks)
	r.Counts["windows"] = len(want)
	r.Counts[unit] = len(in.Rows)
	if in.Unacked > 0 {
		r.Counts["unacknowledged"] = in.Unacked
	}
	for _, p := range pipelinecheck.CompareTotals(want, got) {
		r.problem("%s", p)
	}
	late := 0
	inDL := map[pipelinecheck.Lineage]int{}
	for _, l := range in.DeadLetters {
		lin, hasLineage, ok := LateClick(l)
		if !ok {
			r.problem("dead letter: %s", l)
			continue
		}
		late++
		if hasLineage {
			inDL[lin]++
		}
	}
	lineages := make([]pipelinecheck.Lineage, 0, len(inDL))
	for lin := range inDL {
		lineages = append(lineages, lin)
	}
	sortLineages(lineages)
	for _, lin := range lineages {
		if n := inDL[lin]; n > 1 {
			r.problem("late click (origin %d, seq %d) in the committed dead letters %d times", lin.Origin, lin.Seq, n)
		}
	}
	if in.LateStored != nil {
		stored := map[pipelinecheck.Lineage]bool{}
		for _, lin := range in.LateStored {
			stored[lin] = true
		}
		for _, lin := range lineages {
			if !stored[lin] {
				r.problem("a dead letter of a late click (origin %d, seq %d) the clicks stream does not hold as late", lin.Origin, lin.Seq)
			}
		}
		missing := slices.Clone(in.LateStored)
		sortLineages(missing)
		for _, lin := range missing {
			if inDL[lin] == 0 {
				r.problem("late click (origin %d, seq %d) of the clicks stream not in the committed dead letters", lin.Origin, lin.Seq)
			}
		}
		r.Counts["late-stored"] = len(in.LateStored)
	}
	r.Counts["dead-letters"] = len(in.DeadLetters) - late
	r.Counts["late-published"] = in.LatePublished
	r.Counts["late-dropped"] = late
	if in.Restarts >= 0 {
		r.Counts["job-restarts"] = in.Restarts
	}
	// Ordinals: the rank of each row's window among its user's published windows.
	starts := map[string][]int64{}
	for k := range want {
		starts[k.User] = append(starts[k.User], k.Start)
	}
	rank := map[pipelinecheck.WindowKey]int64{}
	for u, ss := range starts {
		sort.Slice(ss, func(i, j int) bool { return ss[i] < ss[j] })
		for i, s := range ss {
			rank[pipelinecheck.WindowKey{User: u, Start: s}] = int64(i + 1)
		}
	}
	bad := 0
	for _, row := range in.Rows {
		want, ok := rank[pipelinecheck.WindowKey{User: row.User, Start: row.Start}]
		if ok && row.Ordinal != want {
			bad++
			r.problem("%s %d: ordinal %d, want %d (the user's window %d of %d)", row.User, row.Start, row.Ordinal, want, want, len(starts[row.User]))
		}
	}
	r.Counts["wrong-ordinal"] = bad
	var gc, ga int64
	for _, row := range in.Rows {
		gc += row.Count
		ga += row.Sum
	}
	r.Summary = fmt.Sprintf("%d clicks in %d windows of %d users published (amount %d); %d %s hold %d clicks, amount %d",
		clicks, len(want), len(starts), amount, len(in.Rows), unit, gc, ga)
	if in.Restarts >= 0 {
		r.Summary += fmt.Sprintf("; the job restarted %d times", in.Restarts)
	}
	if in.LatePublished > 0 || late > 0 {
		r.Summary += fmt.Sprintf("; %d late clicks published, %d in the dead letters", in.LatePublished, late)
	}
	if r.Verdict == Fail {
		r.Summary += fmt.Sprintf("; %d problems", len(r.Problems)+r.Truncated)
	}
	return *r
}

// LateClick reports whether a dead letter ("<tm>: <dead letter>") is a late click the window
// refused as late: the dead letter's JSON ({"reason":"late: ...","value":"<the click>",
// "origin":O,"seq":S,...}) or the click itself; and the click's lineage when the dead letter
// carries it.
func LateClick(line string) (lin pipelinecheck.Lineage, hasLineage, late bool) {
	v := line
	if _, after, ok := strings.Cut(line, ": "); ok && strings.HasPrefix(after, "{") {
		v = after
	}
	var dl struct {
		Reason string `json:"reason"`
		Value  string `json:"value"`
		Origin *int32 `json:"origin"`
		Seq    *int64 `json:"seq"`
	}
	if err := json.Unmarshal([]byte(v), &dl); err != nil {
		return lin, false, false
	}
	if dl.Value != "" {
		if !strings.HasPrefix(dl.Reason, "late:") {
			return lin, false, false
		}
		v = dl.Value
		if dl.Origin != nil && dl.Seq != nil {
			lin, hasLineage = pipelinecheck.Lineage{Origin: *dl.Origin, Seq: *dl.Seq}, true
		}
	}
	var c pipelinecheck.Click
	if json.Unmarshal([]byte(v), &c) != nil || !c.Late {
		return pipelinecheck.Lineage{}, false, false
	}
	return lin, hasLineage, true
}

func sortLineages(l []pipelinecheck.Lineage) {
	sort.Slice(l, func(i, j int) bool {
		if l[i].Origin != l[j].Origin {
			return l[i].Origin < l[j].Origin
		}
		return l[i].Seq < l[j].Seq
	})
}
