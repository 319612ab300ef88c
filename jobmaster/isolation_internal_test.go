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
	// A heartbeat timeout too short for any fence timeout names the heartbeat timeout, not the
	// fence timeout derived from it (which the user never set).
	err = Config{HeartbeatTimeout: time.Second}.Validate()
	if err == nil || !strings.Contains(err.Error(), "HeartbeatTimeout 1s") || !strings.Contains(err.Error(), "raise --heartbeat-timeout") {
		t.Fatalf("a heartbeat timeout that leaves no fence timeout: %v", err)
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

// TestRedeployOutsidePoolRule: a silent TM that is not a pool member knows no pool, so it
// cancels its tasks at its first pool check once its last leader contact is older than
// F + H + R (taskmanager poolCheck). Its attempts may be redeployed once the redeploy delay has
// passed since the latest moment it can have had contact: the term's start, this leader's last
// answer to it, the end of this JobMaster's last call to it; never while a call is in flight.
func TestRedeployOutsidePoolRule(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	const d = 10 * time.Second
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	for _, c := range []struct {
		name   string
		c      outsidePool
		now    time.Time
		ok     bool
		reason string // in why when !ok
	}{
		{"no contact in this term: the delay from the term's start", outsidePool{begun: t0}, at(10.001), true, ""},
		{"no contact in this term: the delay has not run", outsidePool{begun: t0}, at(9.9), false, "100ms to run"},
		{"a call ended later: the delay counts from its end", outsidePool{begun: t0, callEnd: at(4)}, at(12), false, "2s to run"},
		{"a call ended later, the delay has run", outsidePool{begun: t0, callEnd: at(4)}, at(14.001), true, ""},
		{"an answer to a heartbeat of a TM the leader does not know counts", outsidePool{begun: t0, answered: at(6), callEnd: at(4)}, at(15), false, "1s to run"},
		{"contact before the term's start counts from the start", outsidePool{begun: at(5), answered: at(1), callEnd: at(2)}, at(15.001), true, ""},
		{"a call in flight holds it, however old the rest", outsidePool{begun: t0, callEnd: at(1), inFlight: true}, at(100), false, "in flight"},
		{"exactly at the delay: redeployable", outsidePool{begun: t0}, at(10), true, ""},
	} {
		ok, why := mayRedeployOutsidePool(c.c, c.now, d)
		if ok != c.ok || (!ok && !strings.Contains(why, c.reason)) || (ok && why != "") {
			t.Errorf("%s: ok=%v why=%q, want ok=%v with %q", c.name, ok, why, c.ok, c.reason)
		}
		if !ok && !strings.Contains(why, "outside the pool") {
			t.Errorf("%s: why %q does not say the TM is outside the pool", c.name, why)
		}
	}
}

// TestRedeployDelayCoversAPoolLessTM: for every configuration Validate accepts (the defaults
// and a fast one), a TM with no pool whose last contact was at L has cancelled its tasks by
// L + the redeploy delay: it decides once (F + H + R) has passed on a clock up to ClockDrift
// slow, and checks every Q.
func TestRedeployDelayCoversAPoolLessTM(t *testing.T) {
	for _, c := range []Config{{}, {HeartbeatInterval: 200 * time.Millisecond, HeartbeatTimeout: 4 * time.Second}} {
		c.setDefaults()
		if err := c.Validate(); err != nil {
			t.Fatalf("%+v refused: %v", c, err)
		}
		decide := time.Duration(float64(c.FenceTimeout+c.HeartbeatInterval+c.PoolQueryTimeout)*(1+ClockDrift)) + c.PoolQueryInterval
		if decide >= c.HeartbeatTimeout {
			t.Errorf("fence %v, heartbeat %v, query %v/%v: a pool-less TM stops by %v after its contact, not within the redeploy delay %v",
				c.FenceTimeout, c.HeartbeatInterval, c.PoolQueryInterval, c.PoolQueryTimeout, decide, c.HeartbeatTimeout)
		}
	}
}

// TestHeldRegionsSummaryIsBounded: 10,000 regions held by one TM and 50 TMs holding one each
// give a line of a few hundred bytes, not one naming every region.
func TestHeldRegionsSummaryIsBounded(t *testing.T) {
	var holds []action
	for r := 0; r < 10_000; r++ {
		holds = append(holds, action{kind: actHold, region: r, heldTM: "tm1", heldWhy: "its pool is not known"})
	}
	for i := 0; i < 50; i++ {
		holds = append(holds, action{kind: actHold, region: 10_000 + i, heldTM: "tm-" + strings.Repeat("x", i%3) + string(rune('a'+i%26)) + string(rune('0'+i/26)), heldWhy: "the redeploy delay (10s) has 3s to run"})
	}
	text, key := summariseHolds(holds)
	if len(text) > 1024 || !strings.Contains(text, "regions 0, 1, 2, 3, 4 and 9995 more (10000 in all) wait for TaskManager tm1: its pool is not known") {
		t.Fatalf("summary of %d bytes: %.300s", len(text), text)
	}
	if !strings.Contains(text, "and 46 more (51 in all)") {
		t.Fatalf("the TMs are not summarised: %.300s", text)
	}
	if again, key2 := summariseHolds(holds[:10_000]); key2 == key || !strings.HasPrefix(text, again) {
		t.Fatalf("key %q for all, %q for tm1 alone; texts %q / %q", key, key2, again, text[:80])
	}
}
