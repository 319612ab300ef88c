// Package checker holds the verdicts of a run: linearizability of the job API (porcupine), no
// lost acknowledged submission, never two attempts of one ExecutionVertex at once, restarts
// only where faults touched TMs, equal FSM hashes after heal, the streaming job RUNNING after
// the last fault, and sink continuity. Every checker is a pure function of recorded data.
package checker

import (
	"fmt"
	"sort"
)

// Verdict is a checker's outcome.
type Verdict string

// The verdicts. Skipped means the checker does not apply to the run (for example sink
// continuity when faults touched TMs).
const (
	Pass    Verdict = "pass"
	Fail    Verdict = "fail"
	Skipped Verdict = "skipped"
)

// maxProblems bounds the problems a result lists.
const maxProblems = 25

// Result is one checker's verdict with its counts and the first problems found.
type Result struct {
	Name     string         `json:"name"`
	Verdict  Verdict        `json:"verdict"`
	Summary  string         `json:"summary"`
	Counts   map[string]int `json:"counts,omitempty"`
	Problems []string       `json:"problems,omitempty"`
	// Truncated counts problems left out of Problems.
	Truncated int `json:"truncated,omitempty"`
}

func newResult(name string) *Result {
	return &Result{Name: name, Verdict: Pass, Counts: map[string]int{}}
}

func (r *Result) problem(format string, args ...any) {
	r.Verdict = Fail
	if len(r.Problems) >= maxProblems {
		r.Truncated++
		return
	}
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

func (r *Result) skip(why string) Result {
	r.Verdict = Skipped
	r.Summary = why
	return *r
}

// OK reports whether the result does not fail.
func (r Result) OK() bool { return r.Verdict != Fail }

func sortedStrings[T any](m map[string]T) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
