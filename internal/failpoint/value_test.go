package failpoint

import (
	"strings"
	"testing"
	"time"
)

// TestValueTerms: a value is written NAME=DUR, a Go duration that may be negative and is not
// 0; every other way of writing it, or a switch or hook written with =DUR, is refused with an
// error that says how to write it.
func TestValueTerms(t *testing.T) {
	for _, c := range []struct{ spec, canonical string }{
		{"clock-offset=30s", "clock-offset=30s"},
		{" clock-offset = -30s ", "clock-offset=-30s"},
		{"early-gate,clock-offset=1m30s,pause(disk-write)=200ms", "early-gate,clock-offset=1m30s,pause(disk-write)=200ms"},
	} {
		s, err := Parse(c.spec)
		if err != nil || s.String() != c.canonical {
			t.Errorf("Parse(%q) = %q, %v; want %q", c.spec, s.String(), err, c.canonical)
		}
	}
	for _, c := range []struct{ spec, want string }{
		{"clock-offset", "clock-offset takes a value: write clock-offset=DUR"},
		{"clock-offset=0s", "value 0 sets nothing"},
		{"clock-offset=soon", `clock-offset value "soon"`},
		{"clock-offset=", `clock-offset value ""`},
		{"pause(clock-offset)=1s", "clock-offset is a value: write clock-offset=DUR"},
		{"early-gate=1s", "early-gate is a switch: write it bare"},
		{"disk-write=1s", "disk-write is a hook: write pause(disk-write)=1s"},
		{"no-such=1s", `unknown failpoint "no-such"`},
		{"clock-offset=30s,clock-offset=-30s", "clock-offset is set twice"},
	} {
		_, err := Parse(c.spec)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) error %v, want one containing %q", c.spec, err, c.want)
		}
	}
}

// TestClockOffsetStepsNow: with clock-offset set, Now reads the host's clock moved by the
// offset, without a monotonic reading (durations measured with it jump like a stepped
// clock's); unset, Now is the host's clock with its monotonic reading. Current lists it.
func TestClockOffsetStepsNow(t *testing.T) {
	if _, ok := Duration(ClockOffset); ok {
		t.Fatal("clock-offset set before any setting")
	}
	if now := Now(); now.Round(0) == now {
		t.Fatal("Now without an offset has no monotonic reading")
	}
	for _, d := range []time.Duration{30 * time.Second, -30 * time.Second} {
		Set(t, "clock-offset="+d.String())
		if got, ok := Duration(ClockOffset); !ok || got != d {
			t.Fatalf("Duration = %v, %v; want %v", got, ok, d)
		}
		if Current() != "clock-offset="+d.String() {
			t.Fatalf("Current = %q", Current())
		}
		before := time.Now()
		stepped := Now()
		after := time.Now()
		if stepped.Round(0) != stepped {
			t.Fatal("a stepped Now keeps a monotonic reading")
		}
		if stepped.Before(before.Add(d).Round(0)) || stepped.After(after.Add(d).Round(0)) {
			t.Fatalf("Now = %v, want between %v and %v", stepped, before.Add(d), after.Add(d))
		}
		Reset()
	}
	if _, ok := Duration(ClockOffset); ok || Current() != "" {
		t.Fatalf("Reset left clock-offset set (%q)", Current())
	}
	for _, p := range List() {
		if p.Name == ClockOffset.Name() && (p.Kind != KindValue || !p.Fault || p.Kind.String() != "value") {
			t.Fatalf("clock-offset listed as %+v: want a value that injects a fault", p)
		}
	}
}
