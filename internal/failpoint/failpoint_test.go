package failpoint

import (
	"context"
	"strings"
	"testing"
	"time"
)

// waitFor polls cond until it holds or the deadline passes, then fails with what it last saw.
func waitFor(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	last := ""
	for {
		ok, seen := cond()
		if ok {
			return
		}
		last = seen
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s; last seen: %s", d, what, last)
		}
		<-tick.C
	}
}

func TestParse(t *testing.T) {
	good := map[string]string{
		"":                                   "",
		" , ":                                "",
		"early-gate":                         "early-gate",
		" ack-before-commit , early-gate ":   "ack-before-commit,early-gate",
		"pause(before-submit-task)":          "pause(before-submit-task)",
		"pause(before-submit-task)=2000ms":   "pause(before-submit-task)=2s",
		"pause( before-cancel-task )= 1m30s": "pause(before-cancel-task)=1m30s",
		"ack-before-commit,pause(before-submit-task)=2s,disable-fencing": "ack-before-commit,pause(before-submit-task)=2s,disable-fencing",
	}
	for spec, want := range good {
		s, err := Parse(spec)
		if err != nil {
			t.Errorf("Parse(%q): %v", spec, err)
			continue
		}
		if s.String() != want || s.Empty() != (want == "") {
			t.Errorf("Parse(%q) = %q (empty %v), want %q", spec, s.String(), s.Empty(), want)
		}
	}
	bad := map[string][]string{
		"early-gat":                                              {`term 1 "early-gat"`, `unknown failpoint "early-gat"`, "known: ack-before-commit,"},
		"early-gate,pause(nope)=1s":                              {`term 2 "pause(nope)=1s"`, `unknown failpoint "nope"`},
		"pause(early-gate)":                                      {"early-gate is a switch"},
		"before-submit-task":                                     {"before-submit-task is a hook", "pause(before-submit-task)=DUR"},
		"pause(before-submit-task":                               {"missing ')'"},
		"pause(before-submit-task)2s":                            {`unexpected "2s"`},
		"pause(before-submit-task)=soon":                         {`pause duration "soon"`},
		"pause(before-submit-task)=0s":                           {"must be above 0"},
		"pause(before-submit-task)=-1s":                          {"must be above 0"},
		"early-gate,early-gate":                                  {`term 2 "early-gate": early-gate is set twice`},
		"pause(before-submit-task),pause(before-submit-task)=1s": {"before-submit-task is set twice"},
	}
	for spec, wants := range bad {
		_, err := Parse(spec)
		if err == nil {
			t.Errorf("Parse(%q) accepted", spec)
			continue
		}
		for _, w := range wants {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Parse(%q) = %q, want it to contain %q", spec, err, w)
			}
		}
	}
}

func TestConfigureReplacesTheWholeSettingAndAnErrorChangesNothing(t *testing.T) {
	t.Cleanup(Reset)
	if err := Configure("early-gate,disable-fencing"); err != nil {
		t.Fatal(err)
	}
	if !Enabled(EarlyGate) || !Enabled(DisableFencing) || Enabled(AckBeforeCommit) {
		t.Fatalf("after early-gate,disable-fencing: %q", Current())
	}
	if err := Configure("ack-before-commit,nope"); err == nil {
		t.Fatal("unknown name accepted")
	}
	if Current() != "early-gate,disable-fencing" || Enabled(AckBeforeCommit) {
		t.Fatalf("a refused spec changed the setting to %q", Current())
	}
	if err := Configure("ack-before-commit"); err != nil {
		t.Fatal(err)
	}
	if Enabled(EarlyGate) || Enabled(DisableFencing) || !Enabled(AckBeforeCommit) || Current() != "ack-before-commit" {
		t.Fatalf("Configure did not replace the setting: %q", Current())
	}
	Reset()
	for _, p := range registry {
		if p.on.Load() || p.pause.Load() != nil {
			t.Fatalf("%s still set after Reset", p.name)
		}
	}
	if Current() != "" {
		t.Fatalf("Current after Reset = %q", Current())
	}
}

func TestInjectWithNothingSetReturnsAtOnce(t *testing.T) {
	Reset()
	Inject(context.Background(), BeforeSubmitTask) // would block forever if it paused
	if Hits(BeforeSubmitTask) != 0 || Waiting(BeforeSubmitTask) != 0 {
		t.Fatalf("hits %d waiting %d with nothing set", Hits(BeforeSubmitTask), Waiting(BeforeSubmitTask))
	}
}

func TestPauseBlocksUntilReleased(t *testing.T) {
	Set(t, "pause(before-submit-task)")
	done := make(chan struct{})
	for range 3 {
		go func() { Inject(context.Background(), BeforeSubmitTask); done <- struct{}{} }()
	}
	waitFor(t, 10*time.Second, "three passes blocked", func() (bool, string) {
		return Waiting(BeforeSubmitTask) == 3, Current()
	})
	Inject(context.Background(), BeforeCancelTask) // another hook is not paused
	select {
	case <-done:
		t.Fatal("a pass went on before the release")
	default:
	}
	Release(BeforeSubmitTask)
	for range 3 {
		<-done
	}
	if Hits(BeforeSubmitTask) != 3 || Waiting(BeforeSubmitTask) != 0 || Current() != "" {
		t.Fatalf("hits %d waiting %d current %q after release", Hits(BeforeSubmitTask), Waiting(BeforeSubmitTask), Current())
	}
	Inject(context.Background(), BeforeSubmitTask) // released: off
}

func TestBoundedPauseEnds(t *testing.T) {
	Set(t, "pause(before-cancel-task)=20ms")
	start := time.Now()
	Inject(context.Background(), BeforeCancelTask)
	if waited := time.Since(start); waited < 20*time.Millisecond {
		t.Fatalf("a 20ms pause returned after %v", waited)
	}
	if Current() != "pause(before-cancel-task)=20ms" {
		t.Fatalf("a bounded pause stays set; current %q", Current())
	}
}

func TestPauseEndsWithTheCallersContext(t *testing.T) {
	Set(t, "pause(before-submit-task)")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { Inject(ctx, BeforeSubmitTask); close(done) }()
	waitFor(t, 10*time.Second, "the pass blocked", func() (bool, string) { return Waiting(BeforeSubmitTask) == 1, "" })
	cancel()
	<-done
}

func TestResetAndReconfigureReleaseBlockedPasses(t *testing.T) {
	for _, next := range []func(){Reset, func() { _ = Configure("early-gate") }} {
		Set(t, "pause(before-submit-task)")
		done := make(chan struct{})
		go func() { Inject(context.Background(), BeforeSubmitTask); close(done) }()
		waitFor(t, 10*time.Second, "the pass blocked", func() (bool, string) { return Waiting(BeforeSubmitTask) == 1, "" })
		next()
		<-done
	}
}

func TestSetResetsWhenTheTestEnds(t *testing.T) {
	t.Run("inner", func(t *testing.T) {
		Set(t, "stuck-reconciling,pause(before-cancel-task)")
		if !Enabled(StuckReconciling) {
			t.Fatal("Set did not set")
		}
	})
	if Current() != "" || Enabled(StuckReconciling) {
		t.Fatalf("still set after the test ended: %q", Current())
	}
}

func TestFromEnv(t *testing.T) {
	t.Cleanup(Reset)
	spec, err := FromEnv([]string{"HOME=/root", EnvVar + "=early-gate", EnvVar + "=pause(before-submit-task)=1s, ack-before-commit"})
	if err != nil {
		t.Fatal(err)
	}
	if spec != "pause(before-submit-task)=1s,ack-before-commit" || Enabled(EarlyGate) || !Enabled(AckBeforeCommit) {
		t.Fatalf("the last %s should win: spec %q, current %q", EnvVar, spec, Current())
	}
	if spec, err := FromEnv([]string{"JMNODE_UNSAFE_EARLY_GATE=0"}); err != nil || spec != "" {
		t.Fatalf("a retired variable set to 0 (no effect before either): %q, %v", spec, err)
	}
	for env, want := range map[string]string{
		"JMNODE_UNSAFE_DISABLE_FENCING=1":        "JMNODE_UNSAFE_DISABLE_FENCING is no longer read: set JMNODE_FAILPOINTS=disable-fencing instead",
		"JMNODE_UNSAFE_NONDETERMINISTIC_APPLY=1": "JMNODE_FAILPOINTS=nondeterministic-apply",
		EnvVar + "=early-gate,nope":              `JMNODE_FAILPOINTS: failpoint term 2 "nope": unknown failpoint "nope"`,
	} {
		Reset()
		_ = Configure("stuck-reconciling")
		_, err := FromEnv([]string{env})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("FromEnv(%s) = %v, want %q", env, err, want)
		}
		if Current() != "stuck-reconciling" {
			t.Errorf("FromEnv(%s) refused but changed the setting to %q", env, Current())
		}
	}
}

func TestRetiredVariablesNameDistinctSwitches(t *testing.T) {
	named := map[string]bool{}
	for env, name := range retiredEnv {
		if p := byName[name]; p == nil || p.kind != KindSwitch || named[name] {
			t.Errorf("%s names %q: want a switch no other retired variable names", env, name)
		}
		named[name] = true
	}
}

func TestTableRows(t *testing.T) {
	list := List()
	if len(list) != len(registry) || len(list) < 8 {
		t.Fatalf("List has %d rows, registry %d", len(list), len(registry))
	}
	for _, p := range list {
		if !validName(p.Name) || p.Description == "" || strings.ContainsAny(p.Description, "\n\t") {
			t.Errorf("row %+v: want a lower-case dashed name and a one-line description", p)
		}
		if p.Kind != KindSwitch && p.Kind != KindHook && p.Kind != KindValue {
			t.Errorf("row %s: kind %v", p.Name, p.Kind)
		}
	}
	for _, n := range []string{"", "-a", "a-", "a--b", "A", "a_b", "a b"} {
		if validName(n) {
			t.Errorf("validName(%q) = true", n)
		}
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a duplicate registration did not panic")
		}
	}()
	register(&point{name: EarlyGate.Name(), kind: KindSwitch})
}
