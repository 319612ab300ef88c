package jepsen

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/jepsen-style/nemesis"
)

func TestScenariosCoverEveryKind(t *testing.T) {
	covered := map[nemesis.Kind]bool{}
	for _, s := range Scenarios() {
		if s.Description == "" || len(s.Kinds) == 0 {
			t.Fatalf("scenario %q incomplete", s.Name)
		}
		if len(s.Kinds) == 1 {
			covered[s.Kinds[0]] = true
		}
	}
	for _, k := range nemesis.AllKinds() {
		if !covered[k] {
			t.Errorf("no scenario for %s", k)
		}
	}
	for _, name := range ShortScenarios() {
		if _, err := LookupScenario(name); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := LookupScenario("nope"); !errors.Is(err, ErrUnknownScenario) {
		t.Fatalf("unknown scenario: %v", err)
	}
}

func TestValidate(t *testing.T) {
	cfg := Config{Scenario: "kill-leader", Seed: 4, JMNode: "scenario.go"}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.Duration <= 0 || cfg.Grace <= 0 || cfg.RunID == "" || cfg.Progress == nil {
		t.Fatalf("defaults not filled: %+v", cfg)
	}
	bad := Config{Scenario: "kill-leader", JMNode: "scenario.go", Failpoints: "early-gate,nope"}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), `unknown failpoint "nope"`) {
		t.Fatalf("unknown failpoint: got %v, want an error naming it", err)
	}
	missing := Config{Scenario: "kill-leader", JMNode: "no-such-binary"}
	if err := missing.Validate(); err == nil {
		t.Fatal("missing binary accepted")
	}
	fp := Config{Scenario: "kill-leader", JMNode: "scenario.go", Failpoints: " early-gate , pause(before-submit-task)=2000ms"}
	if err := fp.Validate(); err != nil {
		t.Fatal(err)
	}
	if fp.Failpoints != "early-gate,pause(before-submit-task)=2s" {
		t.Fatalf("failpoints = %q", fp.Failpoints)
	}
}

// TestPhaseEnd: with a settle time the fault phase ends that long after the last fault's end
// when that is sooner than the duration; without one, or without faults, at the duration.
func TestPhaseEnd(t *testing.T) {
	s := []nemesis.Fault{{At: 5 * time.Second, Length: 6 * time.Second}, {At: 2 * time.Second, Length: time.Second}}
	for _, c := range []struct {
		schedule         []nemesis.Fault
		duration, settle time.Duration
		want             time.Duration
	}{
		{s, 20 * time.Second, 0, 20 * time.Second},
		{s, 20 * time.Second, 4 * time.Second, 15 * time.Second},
		{s, 14 * time.Second, 4 * time.Second, 14 * time.Second},
		{nil, 20 * time.Second, 4 * time.Second, 20 * time.Second},
	} {
		if got := phaseEnd(c.schedule, c.duration, c.settle); got != c.want {
			t.Errorf("phaseEnd(%d faults, %s, settle %s) = %s, want %s", len(c.schedule), c.duration, c.settle, got, c.want)
		}
	}
}
