// Package benchgoal prints the goal lines `make bench-short` ends with:
// `GOAL <name> <measured> <target> met|missed` (docs/benchmarks.md).
package benchgoal

import (
	"fmt"
	"os"
	"testing"
)

// Enabled reports whether the goal tests run (JMC_GOALS set); a goal test skips itself
// otherwise, with Skip.
func Enabled() bool { return os.Getenv("JMC_GOALS") != "" }

// Full reports whether the goals run at full size (`make bench`: JMC_GOALS=full), not with the
// reduced trials of `make bench-short` (JMC_GOALS=1).
func Full() bool { return os.Getenv("JMC_GOALS") == "full" }

// Trials is short under `make bench-short` and full under `make bench`.
func Trials(short, full int) int {
	if Full() {
		return full
	}
	return short
}

// Skip skips t unless the goal tests run.
func Skip(t *testing.T) {
	t.Helper()
	if !Enabled() {
		t.Skip("a benchmark goal (make bench-short): set JMC_GOALS=1")
	}
}

// Report logs and prints one goal line: measured against target, both in unit, met or missed.
// A goal is a report, not an assertion: a missed goal does not fail the test.
func Report(t *testing.T, name string, measured, target float64, met bool, unit string) {
	t.Helper()
	verdict := "missed"
	if met {
		verdict = "met"
	}
	line := fmt.Sprintf("GOAL %s %.2f%s %.2f%s %s", name, measured, unit, target, unit, verdict)
	t.Log(line)
	fmt.Println(line)
}
