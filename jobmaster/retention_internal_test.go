package jobmaster

import (
	"slices"
	"testing"
	"time"
)

// TestExpiredJobs: the retention removes every terminal job older than the age and, of the
// rest, every one beyond the newest keep; oldest first, at most limit per round.
func TestExpiredJobs(t *testing.T) {
	const now = 100_000
	jobs := []terminalJob{
		{id: "a", endedAt: now - 50_000, create: 1}, // past the age
		{id: "b", endedAt: now - 9_000, create: 2},
		{id: "c", endedAt: now - 8_000, create: 3},
		{id: "d", endedAt: now - 1_000, create: 4},
		{id: "e", endedAt: now - 1_000, create: 5}, // same end as d, submitted later: newer
	}
	cases := []struct {
		name  string
		keep  int
		age   time.Duration
		limit int
		want  []string
	}{
		{"age only", 100, 10 * time.Second, 1000, []string{"a"}},
		{"count only", 2, time.Hour, 1000, []string{"a", "b", "c"}},
		{"count and age", 3, 10 * time.Second, 1000, []string{"a", "b"}},
		{"count ties broken by creation", 1, time.Hour, 1000, []string{"a", "b", "c", "d"}},
		{"limited per round", 1, time.Hour, 2, []string{"a", "b"}},
		{"nothing to remove", 10, time.Hour, 1000, nil},
	}
	for _, c := range cases {
		got := expiredJobs(jobs, now, c.keep, c.age, c.limit)
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	if got := expiredJobs(nil, now, 1, time.Second, 10); got != nil {
		t.Errorf("no jobs: %v", got)
	}
}
