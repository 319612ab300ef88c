package setting

import (
	"errors"
	"testing"
	"time"
)

var errKind = errors.New("invalid thing config")

// TestRefusalsNameTheFieldThenTheFlag: a refusal names the field, the value and the rule and
// wraps its package's sentinel; Named puts the flag in the field's place and leaves any other
// error alone.
func TestRefusalsNameTheFieldThenTheFlag(t *testing.T) {
	err := New(errKind, "Slots", 1025, "must be in [%d, %d]", 1, 1024)
	if got, want := err.Error(), "invalid thing config: Slots 1025: must be in [1, 1024]"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, errKind) {
		t.Fatal("the refusal does not wrap its kind")
	}
	named := Named(err, map[string]string{"Slots": "--slots"})
	if got, want := named.Error(), "--slots 1025: must be in [1, 1024]"; got != want {
		t.Fatalf("Named = %q, want %q", got, want)
	}
	if other := errors.New("x"); Named(other, map[string]string{"Slots": "--slots"}) != other {
		t.Fatal("Named changed an error that is not a refusal")
	}
	if Named(err, map[string]string{}) != error(err) {
		t.Fatal("Named changed a refusal of a field it has no name for")
	}
	if Named(nil, nil) != nil {
		t.Fatal("Named(nil) is not nil")
	}
}

// TestWithinNamesTheSection: a refusal held in a larger configuration names the section and
// the field, keeps its kind, and is renamed as one field; any other error is left alone.
func TestWithinNamesTheSection(t *testing.T) {
	err := Within(New(errKind, "Slots", 0, "must be in [1, 1024]"), "TM")
	if got, want := err.Error(), "invalid thing config: TM.Slots 0: must be in [1, 1024]"; got != want {
		t.Fatalf("Within = %q, want %q", got, want)
	}
	if !errors.Is(err, errKind) {
		t.Fatal("Within dropped the kind")
	}
	if got, want := Named(err, map[string]string{"TM.Slots": "--slots"}).Error(), "--slots 0: must be in [1, 1024]"; got != want {
		t.Fatalf("Named(Within) = %q, want %q", got, want)
	}
	if other := errors.New("x"); Within(other, "TM") != other || Within(nil, "TM") != nil {
		t.Fatal("Within changed an error that is not a refusal")
	}
}

func TestHostPortAndNonNegative(t *testing.T) {
	for _, c := range []struct {
		addr    string
		minPort int
		ok      bool
	}{
		{"127.0.0.1:7000", 1, true}, {"127.0.0.1:0", 0, true}, {"127.0.0.1:0", 1, false},
		{"[::1]:65535", 1, true}, {"host:65536", 0, false}, {"nohost", 0, false}, {"a:b:c", 0, false},
		{":7000", 0, true}, {"host:http", 0, false},
	} {
		err := HostPort(errKind, "Addr", c.addr, c.minPort)
		if (err == nil) != c.ok {
			t.Errorf("HostPort(%q, %d) = %v, want ok %v", c.addr, c.minPort, err, c.ok)
		}
	}
	if NonNegative(errKind, "D", -time.Second) == nil || NonNegative(errKind, "D", 0) != nil {
		t.Fatal("NonNegative")
	}
}
