package checker

import (
	"fmt"
	"time"

	"github.com/jmcluster/jmcluster/jepsen-style/history"
)

// FinalRead is the outcome of the consistent read of one job id after heal.
type FinalRead struct {
	Found  bool   `json:"found"`
	Status string `json:"status,omitempty"`
	Err    string `json:"err,omitempty"` // the read could not be done
	// At is when the read was answered; Attempts the state the graph records for each
	// attempt of the job it still holds (current and history), without EXECUTION_STATE_.
	At       time.Time         `json:"at,omitzero"`
	Attempts map[string]string `json:"attempts,omitempty"`
	// Ended is when the graph recorded each terminal attempt's terminal state (the leader's
	// timestamp).
	Ended map[string]time.Time `json:"ended,omitempty"`
}

// NoLostSubmissions checks that every acknowledged submission is visible to a consistent read
// after heal. Indeterminate submissions are counted but may go either way.
func NoLostSubmissions(calls []history.Call, final map[string]FinalRead) Result {
	r := newResult("no-lost-submissions")
	for _, c := range calls {
		if c.F != history.Submit {
			continue
		}
		fr, read := final[c.JobID]
		switch c.Type {
		case history.OK:
			r.Counts["acknowledged"]++
			switch {
			case !read || fr.Err != "":
				r.Counts["unverified"]++
				r.problem("job %s: acknowledged, final read failed: %s", c.JobID, fr.Err)
			case !fr.Found:
				r.Counts["lost"]++
				r.problem("job %s: acknowledged at %d, not found after heal", c.JobID, c.Complete)
			default:
				r.Counts["found"]++
			}
		case history.Info:
			r.Counts["indeterminate"]++
			if read && fr.Found {
				r.Counts["indeterminate-found"]++
			}
		}
	}
	r.Summary = fmt.Sprintf("%d acknowledged, %d found, %d lost, %d unverified",
		r.Counts["acknowledged"], r.Counts["found"], r.Counts["lost"], r.Counts["unverified"])
	return *r
}
