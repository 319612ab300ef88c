package jepsen

import (
	"errors"
	"strings"
	"testing"

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
