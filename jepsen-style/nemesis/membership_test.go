package nemesis

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestMembershipChangeIsOneFaultPerRun(t *testing.T) {
	for seed := int64(1); seed <= 3; seed++ {
		s := Generate(ScheduleConfig{Kinds: []Kind{MembershipChange}, Seed: seed, Duration: MembershipChangeLength + 20*time.Second, Warmup: 5 * time.Second})
		if len(s) != 1 || s[0].Length != MembershipChangeLength {
			t.Fatalf("seed %d: schedule %+v, want one fault of %s", seed, s, MembershipChangeLength)
		}
	}
}

func TestResolveMembershipChange(t *testing.T) {
	v := View{JMs: []string{"jm1", "jm2", "jm3"}, TMs: []string{"tm1", "tm2", "tm3"}, Client: "cl", Leader: "jm2"}
	picked := map[string]bool{}
	for pick := int64(0); pick < 40; pick++ {
		f := Fault{Kind: MembershipChange, Pick: pick}
		a, err := Resolve(f, v)
		if err != nil {
			t.Fatal(err)
		}
		again, _ := Resolve(f, v)
		if again.Remove != a.Remove {
			t.Fatalf("pick %d resolved to %s, then %s", pick, a.Remove, again.Remove)
		}
		picked[a.Remove] = true
		if a.Add != SpareJM {
			t.Fatalf("adds %q, want %s", a.Add, SpareJM)
		}
		for _, n := range append(append([]string{SpareJM}, v.JMs...), append(v.TMs, v.Client)...) {
			cut := n != a.Remove && (strings.HasPrefix(n, "jm"))
			if a.Grudge.Visible(a.Remove, n) == cut || a.Grudge.Visible(n, a.Remove) == cut {
				t.Fatalf("pick %d removes %s: link with %s cut=%v, want %v (grudge %v)", pick, a.Remove, n,
					!a.Grudge.Visible(a.Remove, n), cut, a.Grudge)
			}
		}
		if got := strings.Join(a.majority(), ","); strings.Contains(got, a.Remove) || strings.Contains(got, SpareJM) || len(a.majority()) != 2 {
			t.Fatalf("pick %d: majority %s", pick, got)
		}
	}
	if len(picked) != 3 {
		t.Fatalf("picks chose only %v; every JM, the leader too, must be a candidate", picked)
	}
}

type memberTarget struct {
	fakeTarget
}

func (m *memberTarget) ChangeMembership(_ context.Context, via []string, remove, add string) error {
	m.calls = append(m.calls, "change via "+strings.Join(via, ",")+" remove "+remove+" add "+add)
	return nil
}

func (m *memberTarget) RestartRemoved(_ context.Context, removed string, _ time.Time) error {
	m.calls = append(m.calls, "restart "+removed)
	return nil
}

func TestExecutorMembershipChange(t *testing.T) {
	removedWatch = time.Millisecond
	defer func() { removedWatch = RemovedWatch }()
	tg := &memberTarget{}
	e := &Executor{T: tg, Dev: "eth0"}
	a, err := Resolve(Fault{Kind: MembershipChange, Pick: 7}, View{JMs: []string{"jm1", "jm2", "jm3"}, TMs: []string{"tm1"}, Client: "cl"})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Apply(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	calls := strings.Join(tg.calls, "\n")
	change := "change via " + strings.Join(a.majority(), ",") + " remove " + a.Remove + " add jm4"
	if !strings.HasSuffix(calls, change) || !strings.Contains(calls, "-j DROP") {
		t.Fatalf("apply: %s\nwant the DROP rules, then %q", calls, change)
	}
	tg.calls = nil
	if err := e.Heal(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	calls = strings.Join(tg.calls, "\n")
	if !strings.HasSuffix(calls, "restart "+a.Remove) || !strings.Contains(calls, a.Remove+": iptables -w -F JMC") {
		t.Fatalf("heal: %s\nwant the cut flushed on %s, then its restart", calls, a.Remove)
	}
	// A target that cannot change the membership refuses the fault.
	if err := (&Executor{T: &fakeTarget{}}).Apply(context.Background(), a); err == nil {
		t.Fatal("a target without MembershipChanger applied a membership change")
	}
}
