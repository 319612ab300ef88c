package checker

import (
	"encoding/json"
	"fmt"
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
	for _, l := range in.DeadLetters {
		if isLateClick(l) {
			late++
			continue
		}
		r.problem("dead letter: %s", l)
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

// isLateClick reports whether a dead letter ("<tm>: <dead letter>") is a late click the
// window refused as late: the dead letter's JSON ({"reason":"late: ...","value":"<the
// click>",...}) or the click itself.
func isLateClick(line string) bool {
	v := line
	if _, after, ok := strings.Cut(line, ": "); ok && strings.HasPrefix(after, "{") {
		v = after
	}
	var dl struct {
		Reason string `json:"reason"`
		Value  string `json:"value"`
	}
	if err := json.Unmarshal([]byte(v), &dl); err != nil {
		return false
	}
	if dl.Value != "" {
		if !strings.HasPrefix(dl.Reason, "late:") {
			return false
		}
		v = dl.Value
	}
	var c pipelinecheck.Click
	return json.Unmarshal([]byte(v), &c) == nil && c.Late
}
