package main

import (
	"testing"

	"github.com/jmcluster/jmcluster/internal/failpoint"
)

// TestEveryPlantedBugHasABrokenBuild: every switch of the failpoint table but the injected
// faults has a row of brokenBuilds (or an entry of notCaught with its reason), every row names a
// planted bug, and every hook a row adds parses.
func TestEveryPlantedBugHasABrokenBuild(t *testing.T) {
	if missing := uncovered(brokenBuilds); len(missing) > 0 {
		t.Fatalf("planted bugs without a broken build: %v", missing)
	}
	planted := map[string]bool{}
	for _, name := range plantedBugs() {
		planted[name] = true
	}
	for _, name := range []string{"disk-fail-before-write", "disk-fail-after-write", "disk-panic-mid-write"} {
		if planted[name] {
			t.Errorf("%s is an injected fault, not a planted bug", name)
		}
	}
	for _, b := range brokenBuilds {
		if !planted[b.bug] {
			t.Errorf("row %q: not a planted bug of the failpoint table", b.bug)
		}
		if notCaught[b.bug] != "" {
			t.Errorf("%q has a row and is listed as not caught", b.bug)
		}
		if _, err := failpoint.Parse(b.failpoints()); err != nil {
			t.Errorf("row %q: %v", b.bug, err)
		}
		if b.scenario == "" || b.seed == 0 || len(b.anyOf) == 0 {
			t.Errorf("row %q: scenario, seed and checkers are required", b.bug)
		}
	}
	for name := range notCaught {
		if !planted[name] {
			t.Errorf("notCaught %q: not a planted bug", name)
		}
	}
}

// TestSelftestStartsThePipelineOnlyWhereItsCheckersCatch: a broken build runs with the pipeline
// workload exactly when one of its checkers reads it; the four planted bugs of the records'
// path do, the Raft and checkpoint bugs do not.
func TestSelftestStartsThePipelineOnlyWhereItsCheckersCatch(t *testing.T) {
	want := map[string]bool{"window-state-unchecked": true, "postgres-commit-at-barrier": true,
		"wasm-state-lost": true, "watermark-regress": true, "restart-on-failover": false, "restore-unverified": false}
	seen := map[string]bool{}
	for _, b := range brokenBuilds {
		w, ok := want[b.bug]
		if !ok {
			continue
		}
		seen[b.bug] = true
		if got := b.pipeline(); got != w {
			t.Errorf("row %q (checkers %v): pipeline %v, want %v", b.bug, b.anyOf, got, w)
		}
	}
	for name := range want {
		if !seen[name] {
			t.Errorf("no row for %q", name)
		}
	}
}
