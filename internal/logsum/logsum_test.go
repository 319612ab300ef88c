package logsum

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestListNamesTheFirstFewAndCounts(t *testing.T) {
	for _, c := range []struct {
		name  string
		items []int
		want  string
	}{
		{"empty", nil, ""},
		{"one", []int{7}, "7"},
		{"at the limit", []int{1, 2, 3, 4, 5}, "1, 2, 3, 4, 5"},
		{"one over", []int{1, 2, 3, 4, 5, 6}, "1, 2, 3, 4, 5 and 1 more (6 in all)"},
	} {
		if got := List(c.items); got != c.want {
			t.Errorf("%s: List = %q, want %q", c.name, got, c.want)
		}
	}
	if got, want := Joined([]string{"a", "b"}, "; "), "a; b"; got != want {
		t.Errorf("Joined = %q, want %q", got, want)
	}
}

func TestSummaryDoesNotGrowWithTheList(t *testing.T) {
	small := make([]string, 10)
	big := make([]string, 100_000)
	for i := range big {
		big[i] = "region-with-a-long-name"
	}
	copy(small, big)
	if a, b := len(List(small)), len(List(big)); b > a+8 {
		t.Errorf("List of 100,000 is %d bytes, of 10 is %d: it grows with the list", b, a)
	}
	if a, b := len(Joined(small, "; ")), len(Joined(big, "; ")); b > a+8 {
		t.Errorf("Joined of 100,000 is %d bytes, of 10 is %d", b, a)
	}
}

func TestTextClipsOnARuneBoundary(t *testing.T) {
	if got := Text("short"); got != "short" {
		t.Errorf("Text(short) = %q", got)
	}
	long := strings.Repeat("é", MaxText) // 2 bytes each
	got := Text(long)
	if len(got) > MaxText+64 || !utf8.ValidString(got) || !strings.Contains(got, "bytes in all") {
		t.Errorf("Text(long) = %d bytes, valid UTF-8 %v: %q...", len(got), utf8.ValidString(got), got[:40])
	}
}
