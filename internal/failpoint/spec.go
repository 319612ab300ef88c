package failpoint

import (
	"fmt"
	"strings"
	"time"
)

// EnvVar is the environment variable jmnode reads its failpoints from at start-up.
const EnvVar = "JMNODE_FAILPOINTS"

// retiredEnv are the variables that set the switches before this package existed. They are no
// longer read; FromEnv refuses them, so that a build meant to be broken never runs intact.
var retiredEnv = map[string]string{
	"JMNODE_UNSAFE_EARLY_GATE":             EarlyGate.name,
	"JMNODE_UNSAFE_RESTART_ON_FAILOVER":    RestartOnFailover.name,
	"JMNODE_UNSAFE_STUCK_RECONCILING":      StuckReconciling.name,
	"JMNODE_UNSAFE_ACK_BEFORE_COMMIT":      AckBeforeCommit.name,
	"JMNODE_UNSAFE_NONDETERMINISTIC_APPLY": NondeterministicApply.name,
	"JMNODE_UNSAFE_DISABLE_FENCING":        DisableFencing.name,
}

// Spec is a parsed setting: which failpoints are on, and how each hook pauses.
type Spec struct{ terms []term }

type term struct {
	p     *point
	bound time.Duration // a hook's bound (0: until released), or a value's duration
}

func (t term) String() string {
	if t.p.kind == KindSwitch {
		return t.p.name
	}
	if t.p.kind == KindValue {
		return t.p.name + "=" + t.bound.String()
	}
	if t.bound > 0 {
		return "pause(" + t.p.name + ")=" + t.bound.String()
	}
	return "pause(" + t.p.name + ")"
}

// String renders the spec in canonical form, in the order it was written.
func (s Spec) String() string {
	out := make([]string, 0, len(s.terms))
	for _, t := range s.terms {
		out = append(out, t.String())
	}
	return strings.Join(out, ",")
}

// Empty reports whether the spec sets nothing.
func (s Spec) Empty() bool { return len(s.terms) == 0 }

// Parse reads a spec: comma-separated terms, each one of
//
//	NAME               turn a switch on
//	pause(NAME)        each pass through a hook blocks until it is released (tests) or its
//	                   caller's context ends
//	pause(NAME)=DUR    each pass blocks at most DUR (a Go duration above 0, e.g. 2s): a delay
//	NAME=DUR           a value (clock-offset=30s, clock-offset=-30s): a Go duration, not 0
//
// Spaces around terms are ignored; an empty spec sets nothing. An unknown name, a name written
// as the wrong kind, a name given twice or a bad duration is an error naming the term.
func Parse(spec string) (Spec, error) {
	var s Spec
	seen := map[string]bool{}
	for i, raw := range strings.Split(spec, ",") {
		text := strings.TrimSpace(raw)
		if text == "" {
			continue
		}
		t, err := parseTerm(text)
		if err != nil {
			return Spec{}, fmt.Errorf("failpoint term %d %q: %w", i+1, text, err)
		}
		if seen[t.p.name] {
			return Spec{}, fmt.Errorf("failpoint term %d %q: %s is set twice", i+1, text, t.p.name)
		}
		seen[t.p.name] = true
		s.terms = append(s.terms, t)
	}
	return s, nil
}

func parseTerm(text string) (term, error) {
	inner, isPause := strings.CutPrefix(text, "pause(")
	if !isPause {
		if name, value, isValue := strings.Cut(text, "="); isValue {
			return parseValue(strings.TrimSpace(name), strings.TrimSpace(value))
		}
		p, err := lookup(text)
		if err != nil {
			return term{}, err
		}
		if p.kind == KindValue {
			return term{}, fmt.Errorf("%s takes a value: write %s=DUR (a Go duration such as 30s or -30s)", p.name, p.name)
		}
		if p.kind != KindSwitch {
			return term{}, fmt.Errorf("%s is a hook: write pause(%s) or pause(%s)=DUR", p.name, p.name, p.name)
		}
		return term{p: p}, nil
	}
	name, rest, ok := strings.Cut(inner, ")")
	if !ok {
		return term{}, fmt.Errorf("missing ')': write pause(NAME) or pause(NAME)=DUR")
	}
	p, err := lookup(strings.TrimSpace(name))
	if err != nil {
		return term{}, err
	}
	if p.kind == KindValue {
		return term{}, fmt.Errorf("%s is a value: write %s=DUR, without pause(...)", p.name, p.name)
	}
	if p.kind != KindHook {
		return term{}, fmt.Errorf("%s is a switch: write it bare, without pause(...)", p.name)
	}
	t := term{p: p}
	if rest == "" {
		return t, nil
	}
	durText, ok := strings.CutPrefix(rest, "=")
	if !ok {
		return term{}, fmt.Errorf("unexpected %q after ')': write pause(%s) or pause(%s)=DUR", rest, p.name, p.name)
	}
	d, err := time.ParseDuration(strings.TrimSpace(durText))
	if err != nil {
		return term{}, fmt.Errorf("pause duration %q: %v", durText, err)
	}
	if d <= 0 {
		return term{}, fmt.Errorf("pause duration %s: must be above 0 (leave out =DUR to pause until released)", d)
	}
	t.bound = d
	return t, nil
}

// parseValue reads NAME=DUR for a value failpoint.
func parseValue(name, value string) (term, error) {
	p, err := lookup(name)
	if err != nil {
		return term{}, err
	}
	switch p.kind {
	case KindSwitch:
		return term{}, fmt.Errorf("%s is a switch: write it bare, without =%s", p.name, value)
	case KindHook:
		return term{}, fmt.Errorf("%s is a hook: write pause(%s)=%s", p.name, p.name, value)
	}
	d, err := time.ParseDuration(value)
	if err != nil {
		return term{}, fmt.Errorf("%s value %q: %v (a Go duration such as 30s or -30s)", p.name, value, err)
	}
	if d == 0 {
		return term{}, fmt.Errorf("%s value 0 sets nothing: leave the term out", p.name)
	}
	return term{p: p, bound: d}, nil
}

func lookup(name string) (*point, error) {
	p, ok := byName[name]
	if !ok {
		return nil, fmt.Errorf("unknown failpoint %q (known: %s; `jmnode failpoints` describes them)", name, names())
	}
	return p, nil
}

// FromEnv configures the failpoints from EnvVar in environ (os.Environ's form) and returns the
// canonical setting ("" when none). A retired JMNODE_UNSAFE_* variable set to 1 is refused
// with the failpoint that replaces it; on any error nothing is set.
func FromEnv(environ []string) (string, error) {
	spec := ""
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		if k == EnvVar {
			spec = v
		}
		if name, retired := retiredEnv[k]; retired && v == "1" {
			return "", fmt.Errorf("%s is no longer read: set %s=%s instead", k, EnvVar, name)
		}
	}
	s, err := Parse(spec)
	if err != nil {
		return "", fmt.Errorf("%s: %w", EnvVar, err)
	}
	Apply(s)
	return s.String(), nil
}

// TB is the part of testing.TB that Set uses.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// Set makes spec the whole setting for the rest of a test and resets every failpoint when the
// test ends. The setting is process-wide: tests that set failpoints must not run in parallel.
func Set(t TB, spec string) {
	t.Helper()
	if err := Configure(spec); err != nil {
		t.Fatalf("failpoint.Set: %v", err)
	}
	t.Cleanup(Reset)
}
