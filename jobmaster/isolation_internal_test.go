package jobmaster

import (
	"strings"
	"testing"
	"time"
)

// TestIsolationTimingsValidated: the defaults satisfy the rule's margins (the redeploy delay,
// 10 s, exceeds (5 s + 1 s + 1 s) x 1.01 + 0.5 s + 1 s = 8.57 s); a fence timeout the heartbeat
// timeout cannot cover, or one a TM in contact could reach between heartbeats, is refused; an
// unset fence timeout is lowered to what the heartbeat timeout allows.
func TestIsolationTimingsValidated(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("defaults refused: %v", err)
	}
	if got, want := RedeployDelayNeeded(5*time.Second, time.Second, 500*time.Millisecond, time.Second), 8570*time.Millisecond; got != want {
		t.Fatalf("RedeployDelayNeeded = %v, want %v", got, want)
	}
	err := Config{HeartbeatTimeout: 8 * time.Second, FenceTimeout: 5 * time.Second}.Validate()
	if err == nil || !strings.Contains(err.Error(), "must exceed") {
		t.Fatalf("a heartbeat timeout below the margin: %v", err)
	}
	err = Config{FenceTimeout: 2 * time.Second}.Validate()
	if err == nil || !strings.Contains(err.Error(), "two heartbeat intervals") {
		t.Fatalf("a fence timeout within two heartbeats and a query: %v", err)
	}
	c := Config{HeartbeatTimeout: 4 * time.Second}
	c.setDefaults()
	if c.FenceTimeout >= 5*time.Second || c.FenceTimeout <= 0 {
		t.Fatalf("fence timeout %v for a 4 s heartbeat timeout: want it lowered below 5 s", c.FenceTimeout)
	}
	if err := c.Validate(); err != nil && !strings.Contains(err.Error(), "two heartbeat intervals") {
		t.Fatalf("the lowered fence timeout does not satisfy the redeploy margin: %v", err)
	}
}
