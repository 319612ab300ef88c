package nemesis

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestGenerateIsDeterministicPerSeed(t *testing.T) {
	var kinds []Kind
	for _, k := range AllKinds() {
		_, fixed := FixedLength(k)
		_, own := KindTiming(k)
		if !fixed && !own && k != StallLeader {
			kinds = append(kinds, k)
		}
	}
	cfg := ScheduleConfig{Kinds: kinds, Seed: 7, Duration: 120 * time.Second, Warmup: 5 * time.Second}
	a, b := Generate(cfg), Generate(cfg)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("same seed, different schedules:\n%v\n%v", a, b)
	}
	cfg.Seed = 8
	if reflect.DeepEqual(a, Generate(cfg)) {
		t.Fatal("different seeds gave the same schedule")
	}
	if len(a) < 3 {
		t.Fatalf("only %d faults in 120s", len(a))
	}
	var prevEnd time.Duration
	for _, f := range a {
		if f.At < 5*time.Second || f.End() > 120*time.Second || f.At < prevEnd || f.Length < 3*time.Second {
			t.Fatalf("fault out of bounds or overlapping: %+v (previous end %s)", f, prevEnd)
		}
		prevEnd = f.End()
	}
}

// TestStallLeaderLengths: a stall-leader schedule stalls for 2, 5 and 15 s in turn, all three
// within the default minute.
func TestStallLeaderLengths(t *testing.T) {
	for seed := int64(1); seed <= 5; seed++ {
		got := Generate(ScheduleConfig{Kinds: []Kind{StallLeader}, Seed: seed, Duration: 60 * time.Second, Warmup: 5 * time.Second})
		if len(got) < len(StallLengths) {
			t.Fatalf("seed %d: %d stalls in a minute: %+v", seed, len(got), got)
		}
		for i, f := range got {
			if f.Length != StallLengths[i%len(StallLengths)] {
				t.Fatalf("seed %d: stall %d lasts %s, want %s", seed, i, f.Length, StallLengths[i%len(StallLengths)])
			}
		}
	}
}

// TestFlapLeaderKillsTenTimesAMinute: flap-leader's faults are short and close together.
func TestFlapLeaderKillsTenTimesAMinute(t *testing.T) {
	for seed := int64(1); seed <= 5; seed++ {
		got := Generate(ScheduleConfig{Kinds: []Kind{FlapLeader}, Seed: seed, Duration: 60 * time.Second, Warmup: 5 * time.Second})
		if len(got) < 10 {
			t.Fatalf("seed %d: %d leader kills in a minute", seed, len(got))
		}
		for i := 1; i < len(got); i++ {
			if gap := got[i].At - got[i-1].End(); gap < 2*time.Second {
				t.Fatalf("seed %d: %s between kills %d and %d leaves no room for an election", seed, gap, i-1, i)
			}
		}
	}
}

// TestTMMajorityCut: with five TMs, three are cut, each from every JM and every other TM; the
// client and the two others keep their links.
func TestTMMajorityCut(t *testing.T) {
	v := View{JMs: []string{"jm1", "jm2", "jm3"}, TMs: []string{"tm1", "tm2", "tm3", "tm4", "tm5"}, Client: "cl", Leader: "jm1"}
	for pick := int64(0); pick < 20; pick++ {
		a, err := Resolve(Fault{Kind: TMMajorityCut, Pick: pick}, v)
		if err != nil {
			t.Fatal(err)
		}
		var cut []string
		for _, tm := range v.TMs {
			if !a.Grudge.Visible(tm, "jm1") {
				cut = append(cut, tm)
			}
		}
		if len(cut) != 3 {
			t.Fatalf("pick %d: cut %v, want three of five", pick, cut)
		}
		for _, tm := range cut {
			for _, n := range v.cluster() {
				if n != tm && (a.Grudge.Visible(tm, n) || a.Grudge.Visible(n, tm)) {
					t.Fatalf("pick %d: %s still linked to %s", pick, tm, n)
				}
			}
			if !a.Grudge.Visible(tm, "cl") {
				t.Fatalf("pick %d: %s cut from the client", pick, tm)
			}
		}
		// Every TM is affected: the two left lose their links to the three cut.
		if got := a.AffectedTMs(v.JMs, v.TMs); !reflect.DeepEqual(got, v.TMs) {
			t.Fatalf("pick %d: affected %v, want every TM", pick, got)
		}
	}
}

// TestSlowDiskAndDiskFullAimAtTheLeader: both touch the leader only, through the target's
// failpoints and its data disk, and heal both.
func TestSlowDiskAndDiskFullAimAtTheLeader(t *testing.T) {
	a, err := Resolve(Fault{Kind: SlowDisk, Pick: 5}, view("jm2"))
	if err != nil {
		t.Fatal(err)
	}
	spec, ok := a.Failpoints["jm2"]
	if len(a.Failpoints) != 1 || !ok || !strings.HasPrefix(spec, "pause(disk-write)=") {
		t.Fatalf("slow-disk = %+v", a)
	}
	d, err := time.ParseDuration(strings.TrimSuffix(strings.TrimPrefix(spec, "pause(disk-write)="), ""))
	if err != nil || d < 50*time.Millisecond || d > 500*time.Millisecond {
		t.Fatalf("slow-disk delay %q (%v)", spec, err)
	}
	b, err := Resolve(Fault{Kind: DiskFull, Pick: 5}, view("jm3"))
	if err != nil || !reflect.DeepEqual(b.FillDisk, []string{"jm3"}) {
		t.Fatalf("disk-full = %+v (%v)", b, err)
	}
	ft := &fakeTarget{}
	e := &Executor{T: ft}
	for _, act := range []Action{a, b} {
		if err := e.Apply(context.Background(), act); err != nil {
			t.Fatal(err)
		}
		if err := e.Heal(context.Background(), act); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"failpoints jm2 " + spec, "failpoints jm2 ", "fill jm3", "free jm3", "revive jm3"}
	var got []string
	for _, c := range ft.calls {
		if !strings.Contains(c, ": ") {
			got = append(got, c)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("calls %v, want %v", got, want)
	}
}

func TestRulesForIsolate(t *testing.T) {
	g := Isolate("jm1", []string{"jm1", "jm2", "tm1"})
	ips := map[string]string{"jm1": "10.77.0.11", "jm2": "10.77.0.12", "tm1": "10.77.0.21"}
	rules, err := Rules(g, func(n string) string { return ips[n] })
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][][]string{
		"jm1": {{"-w", "-A", "JMC", "-s", "10.77.0.12/32", "-j", "DROP"}, {"-w", "-A", "JMC", "-s", "10.77.0.21/32", "-j", "DROP"}},
		"jm2": {{"-w", "-A", "JMC", "-s", "10.77.0.11/32", "-j", "DROP"}},
		"tm1": {{"-w", "-A", "JMC", "-s", "10.77.0.11/32", "-j", "DROP"}},
	}
	if !reflect.DeepEqual(rules, want) {
		t.Fatalf("rules = %v\nwant %v", rules, want)
	}
	if _, err := Rules(g, func(string) string { return "" }); err == nil {
		t.Fatal("missing address accepted")
	}
}

func TestPartitionAndBridge(t *testing.T) {
	g := Partition([]string{"jm1"}, []string{"jm2", "jm3"})
	if g.Visible("jm1", "jm2") || g.Visible("jm3", "jm1") || !g.Visible("jm2", "jm3") || !g.Visible("tm1", "jm1") {
		t.Fatalf("partition grudge wrong: %v", g)
	}
	b := BridgeOf("jm1", "jm2", "jm3")
	if b.Visible("jm1", "jm3") || b.Visible("jm3", "jm1") || !b.Visible("jm2", "jm1") || !b.Visible("jm2", "jm3") {
		t.Fatalf("bridge grudge wrong: %v", b)
	}
}

func TestRingGivesEveryNodeADistinctMajority(t *testing.T) {
	for _, n := range []int{5, 6, 7} {
		nodes := []string{"a", "b", "c", "d", "e", "f", "g"}[:n]
		g := Ring(nodes)
		views := map[string]bool{}
		for _, a := range nodes {
			var view []string
			for _, b := range nodes {
				if g.Visible(a, b) {
					view = append(view, b)
				}
				if g.Visible(a, b) != g.Visible(b, a) {
					t.Fatalf("n=%d: asymmetric link %s-%s", n, a, b)
				}
			}
			if len(view) < n/2+1 || len(view) == n {
				t.Fatalf("n=%d: %s sees %v, want a strict majority", n, a, view)
			}
			key := strings.Join(view, ",")
			if views[key] {
				t.Fatalf("n=%d: two nodes see %s", n, key)
			}
			views[key] = true
		}
	}
}

func view(leader string) View {
	return View{JMs: []string{"jm1", "jm2", "jm3"}, TMs: []string{"tm1", "tm2", "tm3"}, Client: "cl", Leader: leader}
}

func TestResolve(t *testing.T) {
	for _, k := range AllKinds() {
		f := Fault{Kind: k, Pick: 42}
		a, err := Resolve(f, view("jm2"))
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		b, _ := Resolve(f, view("jm2"))
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%s: resolution not deterministic", k)
		}
		if len(a.Nodes()) == 0 {
			t.Fatalf("%s: touches nothing", k)
		}
		jmOnly := len(a.AffectedTMs(view("").JMs, view("").TMs)) == 0
		switch k {
		case KillLeader, PauseLeader, IsolateLeader, MajorityMinority, Bridge, KillMajority, KillJM, Delay, Loss,
			StallLeader, FlapLeader, TransferLeader, SlowDisk, DiskFull, JMOutage:
			if !jmOnly {
				t.Fatalf("%s should touch only JMs: %v", k, a.Nodes())
			}
		case KillTM, RestartTM, MajoritiesRing, TMsFromLeader, TMMajorityCut, TMFromJMs:
			if jmOnly {
				t.Fatalf("%s should touch TMs: %v", k, a.Nodes())
			}
		}
	}
	a, _ := Resolve(Fault{Kind: KillMajority, Pick: 1}, view("jm3"))
	if len(a.Kill) != 2 || (a.Kill[0] != "jm3" && a.Kill[1] != "jm3") {
		t.Fatalf("kill-majority = %v, want the leader and one more", a.Kill)
	}
	a, _ = Resolve(Fault{Kind: IsolateNode, Pick: 3}, View{JMs: []string{"jm1"}, TMs: []string{"tm1", "tm2"}, Client: "cl"})
	if got := a.AffectedTMs([]string{"jm1"}, []string{"tm1", "tm2"}); len(got) == 0 {
		t.Fatalf("isolating %v affects no TM", a.Nodes())
	}
	a, _ = Resolve(Fault{Kind: TMFromJMs, Pick: 2}, view("jm1"))
	if tm := a.Nodes(); len(tm) == 0 {
		t.Fatalf("tm-from-jms cuts nobody: %v", a.Grudge)
	}
	for _, tm := range []string{"tm1", "tm2", "tm3"} {
		cut := !a.Grudge.Visible(tm, "jm1")
		if cut != (!a.Grudge.Visible(tm, "jm2")) || cut != (!a.Grudge.Visible(tm, "jm3")) {
			t.Fatalf("tm-from-jms cuts %s from some JMs only: %v", tm, a.Grudge)
		}
		for _, other := range []string{"tm1", "tm2", "tm3", "cl"} {
			if other != tm && !a.Grudge.Visible(tm, other) {
				t.Fatalf("tm-from-jms cut %s from %s: %v", tm, other, a.Grudge)
			}
		}
	}
	if !a.Grudge.Visible("jm1", "jm2") {
		t.Fatalf("tm-from-jms cut the JMs apart: %v", a.Grudge)
	}
	a, _ = Resolve(Fault{Kind: IsolateLeader}, view("jm1"))
	if a.Grudge.Visible("jm1", "cl") || a.Grudge.Visible("tm3", "jm1") || !a.Grudge.Visible("jm2", "jm3") {
		t.Fatalf("isolate-leader grudge = %v", a.Grudge)
	}
	if _, err := Resolve(Fault{Kind: PauseLeader}, view("")); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("pause without a leader: %v", err)
	}
	if _, err := Resolve(Fault{Kind: "nope"}, view("jm1")); !errors.Is(err, ErrUnknownKind) {
		t.Fatalf("unknown kind: %v", err)
	}
}

func TestNetemArgs(t *testing.T) {
	got := strings.Join(NetemArgs("eth0", Netem{DelayMs: 100, JitterMs: 20, LossPct: 5}), " ")
	if got != "qdisc replace dev eth0 root netem delay 100ms 20ms loss 5%" {
		t.Fatalf("NetemArgs = %q", got)
	}
}

// fakeTarget records what the executor asks for.
type fakeTarget struct{ calls []string }

func (f *fakeTarget) Kill(n string) error { f.calls = append(f.calls, "kill "+n); return nil }
func (f *fakeTarget) Signal(n string, s syscall.Signal) error {
	f.calls = append(f.calls, "signal "+n+" "+s.String())
	return nil
}
func (f *fakeTarget) Revive(_ context.Context, n string) error {
	f.calls = append(f.calls, "revive "+n)
	return nil
}
func (f *fakeTarget) Exec(_ context.Context, n, name string, args ...string) (string, error) {
	f.calls = append(f.calls, n+": "+name+" "+strings.Join(args, " "))
	return "", nil
}
func (f *fakeTarget) IP(n string) string { return "10.0.0." + n[len(n)-1:] }

func TestExecutorApplyAndHeal(t *testing.T) {
	ft := &fakeTarget{}
	e := &Executor{T: ft, Dev: "eth0", NetemAvailable: true}
	a := Action{Kill: []string{"jm1"}, Grudge: Partition([]string{"jm2"}, []string{"jm3"}), Netem: map[string]Netem{"jm3": {DelayMs: 10}}}
	if err := e.Apply(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	want := []string{"kill jm1", "jm2: iptables -w -A JMC -s 10.0.0.3/32 -j DROP", "jm3: iptables -w -A JMC -s 10.0.0.2/32 -j DROP",
		"jm3: tc qdisc replace dev eth0 root netem delay 10ms"}
	if !reflect.DeepEqual(ft.calls, want) {
		t.Fatalf("calls = %q", ft.calls)
	}
	ft.calls = nil
	if err := e.Heal(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(ft.calls, "\n")
	for _, w := range []string{"jm2: iptables -w -F JMC", "jm3: iptables -w -t mangle -F JMC-DELAY", "jm3: tc qdisc del dev eth0 root", "revive jm1"} {
		if !strings.Contains(joined, w) {
			t.Fatalf("heal did not %q:\n%s", w, joined)
		}
	}
}

func (f *fakeTarget) SetFailpoints(n, extra string) error {
	f.calls = append(f.calls, "failpoints "+n+" "+extra)
	return nil
}

func (f *fakeTarget) FillDisk(n string) error { f.calls = append(f.calls, "fill "+n); return nil }

func (f *fakeTarget) FreeDisk(n string) error { f.calls = append(f.calls, "free "+n); return nil }

func TestExecutorUserSpaceDelayNeedsNamespaces(t *testing.T) {
	ft := &fakeTarget{}
	e := &Executor{T: ft, Dev: "eth0"}
	err := e.Apply(context.Background(), Action{Netem: map[string]Netem{"jm3": {DelayMs: 10}}})
	if err == nil || !strings.Contains(err.Error(), "Executor.NetNS") {
		t.Fatalf("user-space delay without namespaces: %v", err)
	}
	e.NetNS = func(n string) string { return "ns-" + n }
	if err := e.Apply(context.Background(), Action{Netem: map[string]Netem{"jm3": {DelayMs: 10}}}); err == nil || !strings.Contains(err.Error(), "not a prepared node") {
		t.Fatalf("user-space delay on a node Prepare did not see: %v", err)
	}
	if len(ft.calls) != 0 {
		t.Fatalf("a rule was added without a queue reader: %q", ft.calls)
	}
	ft.calls = nil
	if err := e.Prepare(context.Background(), []string{"jm1"}); err != nil {
		t.Fatal(err)
	}
	want := []string{"jm1: iptables -w -N JMC", "jm1: iptables -w -I INPUT -j JMC",
		"jm1: iptables -w -t mangle -N JMC-DELAY", "jm1: iptables -w -t mangle -I PREROUTING -i eth0 -j JMC-DELAY"}
	if !reflect.DeepEqual(ft.calls, want) {
		t.Fatalf("prepare calls = %q", ft.calls)
	}
	if got := strings.Join(DelayRuleArgs("-A", "10.0.0.1", 101), " "); got != "-w -t mangle -A JMC-DELAY -s 10.0.0.1/32 -j NFQUEUE --queue-num 101 --queue-bypass" {
		t.Fatalf("DelayRuleArgs = %q", got)
	}
}

func TestShapeIsSeededPerFaultAndNode(t *testing.T) {
	n := Netem{DelayMs: 120, JitterMs: 30, LossPct: 5}
	s := Shape(n, 42, "jm1", "tm1")
	if s.Delay != 120*time.Millisecond || s.Jitter != 30*time.Millisecond || s.LossPct != 5 {
		t.Fatalf("Shape = %+v", s)
	}
	if s != Shape(n, 42, "jm1", "tm1") || s.Seed == Shape(n, 42, "jm2", "tm1").Seed || s.Seed == Shape(n, 42, "jm1", "tm2").Seed ||
		s.Seed == Shape(n, 43, "jm1", "tm1").Seed || s.Seed == Shape(n, 42, "tm1", "jm1").Seed {
		t.Fatal("seed must depend on the pick, the sender and the receiver, and only on them")
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	// Resolve's jitter never exceeds its delay, but a hand-made one is clamped, not refused.
	if got := Shape(Netem{DelayMs: 10, JitterMs: 40}, 1, "jm1", "jm2"); got.Jitter != 10*time.Millisecond {
		t.Fatalf("jitter above the delay: %+v", got)
	}
}
