package membership

import (
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/memberlist"
)

func TestMetaRoundTrip(t *testing.T) {
	cases := []Meta{
		{Role: RoleJobMaster, ID: "jm-1"},
		{Role: RoleJobMaster, ID: "jm-2", GRPCAddr: "10.0.0.2:9000", Version: "1.2.3", Epoch: 1<<64 - 1, Leader: true, Leaving: true},
		tm("tm-1", 8),
	}
	for _, want := range cases {
		b, err := want.Encode()
		if err != nil {
			t.Fatalf("Encode(%+v): %v", want, err)
		}
		got, err := ParseMeta(b)
		if err != nil {
			t.Fatalf("ParseMeta(%s): %v", b, err)
		}
		if got != want {
			t.Fatalf("round trip: got %+v, want %+v (wire %s)", got, want, b)
		}
	}
}

func TestMetaRealisticMaximumFits(t *testing.T) {
	host := strings.Repeat("h", 63) + ".example.internal"
	m := Meta{
		Role: RoleTaskManager, ID: strings.Repeat("i", 64),
		GRPCAddr: host + ":65535", DataAddr: host + ":65535",
		Slots: 1 << 30, Version: strings.Repeat("v", 40), Epoch: 1<<64 - 1, Leader: true,
	}
	b, err := m.Encode()
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	if len(b) > memberlist.MetaMaxSize {
		t.Fatalf("encoded %d bytes, limit %d", len(b), memberlist.MetaMaxSize)
	}
}

func TestMetaEncodeErrors(t *testing.T) {
	cases := []struct {
		name string
		meta Meta
		want error
	}{
		{"missing id", Meta{Role: RoleJobMaster}, ErrMissingID},
		{"unknown role", Meta{Role: "scheduler", ID: "x"}, ErrUnknownRole},
		{"empty role", Meta{ID: "x"}, ErrUnknownRole},
		{"negative slots", Meta{Role: RoleTaskManager, ID: "x", Slots: -1}, ErrMalformedMeta},
		{"oversized", Meta{Role: RoleJobMaster, ID: "x", Version: strings.Repeat("v", memberlist.MetaMaxSize)}, ErrMetaTooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.meta.Encode()
			if !errors.Is(err, c.want) {
				t.Fatalf("Encode error = %v, want %v", err, c.want)
			}
		})
	}
}

func TestParseMetaErrors(t *testing.T) {
	cases := []struct {
		name string
		wire string
		want error
	}{
		{"empty", "", ErrMalformedMeta},
		{"blank", "  \n", ErrMalformedMeta},
		{"not json", "role=jobmaster", ErrMalformedMeta},
		{"truncated", `{"v":1,"r":"jobmaster","id":"j`, ErrMalformedMeta},
		{"wrong type", `{"v":1,"r":"jobmaster","id":"j","s":"four"}`, ErrMalformedMeta},
		{"no version", `{"r":"jobmaster","id":"j"}`, ErrMalformedMeta},
		{"future version", `{"v":2,"r":"jobmaster","id":"j"}`, ErrUnsupportedMetaVersion},
		{"unknown role", `{"v":1,"r":"resourcemanager","id":"j"}`, ErrUnknownRole},
		{"missing id", `{"v":1,"r":"taskmanager"}`, ErrMissingID},
		{"negative slots", `{"v":1,"r":"taskmanager","id":"t","s":-2}`, ErrMalformedMeta},
		{"oversized", `{"v":1,"r":"jobmaster","id":"j","bv":"` + strings.Repeat("v", memberlist.MetaMaxSize) + `"}`, ErrMetaTooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseMeta([]byte(c.wire))
			if !errors.Is(err, c.want) {
				t.Fatalf("ParseMeta(%q) error = %v, want %v", c.wire, err, c.want)
			}
		})
	}
}

func TestParseMetaIgnoresUnknownFields(t *testing.T) {
	got, err := ParseMeta([]byte(`{"v":1,"r":"taskmanager","id":"t","s":3,"zone":"b"}`))
	if err != nil {
		t.Fatalf("ParseMeta: %v", err)
	}
	if got.ID != "t" || got.Slots != 3 {
		t.Fatalf("got %+v", got)
	}
}
