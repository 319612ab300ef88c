package nemesis

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// throttleTarget is a fake target that can throttle.
type throttleTarget struct{ *fakeTarget }

func (f throttleTarget) Throttle(n string, quotaUs int) error {
	f.calls = append(f.calls, fmt.Sprintf("throttle %s %d", n, quotaUs))
	return nil
}

func (f throttleTarget) Unthrottle(n string) error {
	f.calls = append(f.calls, "unthrottle "+n)
	return nil
}

// TestThrottleLeaderAimsAtTheLeaderFor30s: the leader, a seeded quota of 5-10 % of a core, a
// fixed 30 s; applied and healed through the Throttler, and heal-all releases every node.
func TestThrottleLeaderAimsAtTheLeaderFor30s(t *testing.T) {
	if l, ok := FixedLength(ThrottleLeader); !ok || l != 30*time.Second {
		t.Fatalf("throttle-leader length %v (fixed %v), want 30s", l, ok)
	}
	seen := map[int]bool{}
	for pick := int64(0); pick < 50; pick++ {
		a, err := Resolve(Fault{Kind: ThrottleLeader, Pick: pick}, view("jm2"))
		if err != nil {
			t.Fatal(err)
		}
		q, ok := a.Throttle["jm2"]
		if len(a.Throttle) != 1 || !ok || q < ThrottleMinQuotaUs || q > ThrottleMaxQuotaUs {
			t.Fatalf("pick %d: throttle = %v, want jm2 with %d-%d µs", pick, a.Throttle, ThrottleMinQuotaUs, ThrottleMaxQuotaUs)
		}
		again, _ := Resolve(Fault{Kind: ThrottleLeader, Pick: pick}, view("jm2"))
		if !reflect.DeepEqual(a, again) {
			t.Fatalf("pick %d resolved twice differently: %v, %v", pick, a, again)
		}
		seen[q] = true
		if got := a.Nodes(); !reflect.DeepEqual(got, []string{"jm2"}) {
			t.Fatalf("nodes %v", got)
		}
		if tms := a.AffectedTMs([]string{"jm1", "jm2", "jm3"}, []string{"tm1", "tm2", "tm3"}); len(tms) != 0 {
			t.Fatalf("a throttled JM affects TMs %v", tms)
		}
	}
	if len(seen) < 10 {
		t.Fatalf("50 picks drew only %d quotas", len(seen))
	}
	if _, err := Resolve(Fault{Kind: ThrottleLeader, Pick: 1}, view("")); err == nil {
		t.Fatal("throttle-leader resolved without a leader")
	}
	a, _ := Resolve(Fault{Kind: ThrottleLeader, Pick: 3}, view("jm1"))
	ft := throttleTarget{&fakeTarget{}}
	e := &Executor{T: ft}
	if err := e.Apply(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	if err := e.Heal(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range ft.calls {
		if !strings.Contains(c, ": ") {
			got = append(got, c)
		}
	}
	if want := []string{fmt.Sprintf("throttle jm1 %d", a.Throttle["jm1"]), "unthrottle jm1"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("calls %v, want %v", got, want)
	}
	ft.calls = nil
	if err := e.HealAll(context.Background(), nil, []string{"jm1", "tm1"}); err != nil {
		t.Fatal(err)
	}
	if j := strings.Join(ft.calls, "\n"); !strings.Contains(j, "unthrottle jm1") || !strings.Contains(j, "unthrottle tm1") {
		t.Fatalf("heal-all did not release every node:\n%s", j)
	}
	if err := (&Executor{T: &fakeTarget{}}).Apply(context.Background(), a); err == nil {
		t.Fatal("a target that cannot throttle applied throttle-leader")
	}
}

// TestClockStepTMSetsAnOffsetOnOneTM: one TM, +30 s or -30 s from the pick (both signs drawn),
// through its failpoints; nothing counts as touching a TM's tasks.
func TestClockStepTMSetsAnOffsetOnOneTM(t *testing.T) {
	signs := map[string]bool{}
	for pick := int64(0); pick < 20; pick++ {
		a, err := Resolve(Fault{Kind: ClockStepTM, Pick: pick}, view(""))
		if err != nil {
			t.Fatal(err)
		}
		if len(a.Failpoints) != 1 {
			t.Fatalf("clock-step-tm = %+v", a)
		}
		for n, spec := range a.Failpoints {
			if !strings.HasPrefix(n, "tm") || (spec != "clock-offset=30s" && spec != "clock-offset=-30s") {
				t.Fatalf("clock-step-tm sets %s: %q", n, spec)
			}
			signs[spec] = true
		}
	}
	if len(signs) != 2 {
		t.Fatalf("20 picks drew only %v", signs)
	}
}
