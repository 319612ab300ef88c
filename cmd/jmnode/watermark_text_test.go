package main

import (
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/operator"
)

// TestWatermarkText: the watermark column reads at a glance: the time of day with its lag in
// milliseconds or tenths of a second, the date and days when it is far behind, "end of input"
// after every input ended.
func TestWatermarkText(t *testing.T) {
	at := time.Date(2026, 12, 6, 10, 0, 0, 250e6, time.UTC).UnixMilli()
	for _, c := range []struct {
		wm   int64
		lag  time.Duration
		want string
	}{
		{at, 0, "10:00:00.250 (0s)"},
		{at, 350 * time.Millisecond, "10:00:00.250 (350ms)"},
		{at, 2345 * time.Millisecond, "10:00:00.250 (2.3s)"},
		{at, 3*time.Hour + 20*time.Second, "10:00:00.250 (3h0m0s)"},
		{at, 26814*time.Hour + 24*time.Minute, "2026-12-06 10:00:00 (1117d)"},
		{operator.MaxWatermark, 0, "end of input"},
	} {
		if got := watermarkText(c.wm, c.lag); got != c.want {
			t.Errorf("watermarkText(%d, %s) = %q, want %q", c.wm, c.lag, got, c.want)
		}
	}
}
