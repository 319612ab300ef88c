package nemesis

import (
	"fmt"
	"math/rand"
	"sort"
)

// View is what the nemesis knows of the cluster when a fault starts.
type View struct {
	JMs    []string // jm1..jm3
	TMs    []string // tm1..tm3
	Client string   // the client node; it is cut only by faults that isolate a node from all
	Leader string   // current leader, "" when unknown
	// SourceTMs are the TMs running a source task of the stream job, sorted (read only for
	// corrupt-checkpoint, which kills one of them so that its region restores).
	SourceTMs []string
	// PipelineTMs are the TMs running a task of the pipeline job, sorted, when the run aims
	// kill-tm and restart-tm at them (nil otherwise: they pick among every TM).
	PipelineTMs []string
}

func (v View) cluster() []string { return append(append([]string(nil), v.JMs...), v.TMs...) }

func (v View) all() []string {
	out := v.cluster()
	if v.Client != "" {
		out = append(out, v.Client)
	}
	return out
}

// Resolve turns a scheduled fault into concrete targets. Every choice comes from f.Pick, so the
// same fault and view always resolve the same way. Faults aimed at the leader need v.Leader.
func Resolve(f Fault, v View) (Action, error) {
	rng := rand.New(rand.NewSource(f.Pick))
	a := Action{Fault: f, Leader: v.Leader}
	pickOf := func(list []string) string { return list[rng.Intn(len(list))] }
	needLeader := func() (string, error) {
		if v.Leader == "" {
			return "", fmt.Errorf("%w: %s", ErrNoLeader, f.Kind)
		}
		return v.Leader, nil
	}
	others := func(except string) []string {
		var out []string
		for _, n := range v.JMs {
			if n != except {
				out = append(out, n)
			}
		}
		return out
	}
	if ok, err := resolveStore(&a, rng, v); ok {
		return a, err
	}
	switch f.Kind {
	case KillJM:
		a.Kill = []string{pickOf(v.JMs)}
	case KillLeader:
		l, err := needLeader()
		if err != nil {
			return a, err
		}
		a.Kill = []string{l}
	case KillTM, RestartTM:
		a.Kill = []string{pickOf(orTMs(v.PipelineTMs, v.TMs))}
	case KillMajority:
		l, err := needLeader()
		if err != nil {
			return a, err
		}
		a.Kill = []string{l, pickOf(others(l))}
		sort.Strings(a.Kill)
	case PauseLeader:
		l, err := needLeader()
		if err != nil {
			return a, err
		}
		a.Pause = []string{l}
	case IsolateNode:
		a.Grudge = Isolate(pickOf(v.cluster()), v.all())
	case IsolateLeader:
		l, err := needLeader()
		if err != nil {
			return a, err
		}
		a.Grudge = Isolate(l, v.all())
	case MajorityMinority:
		jms := shuffled(rng, v.JMs)
		minority := jms[:len(jms)/2]
		a.Grudge = Partition(minority, jms[len(jms)/2:])
	case Bridge:
		jms := shuffled(rng, v.JMs)
		if len(jms) < 3 {
			return a, fmt.Errorf("nemesis: bridge needs three JMs, have %d", len(jms))
		}
		a.Grudge = BridgeOf(jms[0], jms[1], jms[2])
	case MajoritiesRing:
		a.Grudge = Ring(shuffled(rng, v.cluster()))
	case TMsFromLeader:
		l, err := needLeader()
		if err != nil {
			return a, err
		}
		a.Grudge = Partition([]string{l}, v.TMs)
	case JMOutage:
		a.Kill = append([]string(nil), v.JMs...)
	case TMMajorityCut:
		cut := shuffled(rng, v.TMs)[:len(v.TMs)/2+1]
		sort.Strings(cut)
		a.Grudge = Grudge{}
		for _, tm := range cut {
			for _, n := range v.cluster() {
				a.Grudge.cut(tm, n)
			}
		}
	case StallLeader:
		l, err := needLeader()
		if err != nil {
			return a, err
		}
		a.Pause = []string{l}
	case FlapLeader:
		l, err := needLeader()
		if err != nil {
			return a, err
		}
		a.Kill = []string{l}
	case SlowDisk:
		l, err := needLeader()
		if err != nil {
			return a, err
		}
		a.Failpoints = map[string]string{l: fmt.Sprintf("pause(disk-write)=%dms", 50+rng.Intn(451))}
	case TransferLeader:
		l, err := needLeader()
		if err != nil {
			return a, err
		}
		a.Transfer = l
	case DiskFull:
		l, err := needLeader()
		if err != nil {
			return a, err
		}
		a.FillDisk = []string{l}
	case TMFromJMs:
		a.Grudge = Partition([]string{pickOf(v.TMs)}, v.JMs)
	case Delay:
		a.Netem = map[string]Netem{}
		d := Netem{DelayMs: 50 + rng.Intn(150), JitterMs: 10 + rng.Intn(40)}
		for _, n := range v.JMs {
			a.Netem[n] = d
		}
	case Loss:
		a.Netem = map[string]Netem{pickOf(v.JMs): {LossPct: 10 + rng.Intn(21)}}
	case CorruptCheckpoint:
		a.Kill, a.CorruptCheckpoint = []string{pickOf(orTMs(v.SourceTMs, v.TMs))}, resolveDamage(rng)
	case ThrottleLeader:
		l, err := needLeader()
		if err != nil {
			return a, err
		}
		a.Throttle = resolveThrottle(rng, l)
	case ClockStepTM:
		a.Failpoints = resolveClockStep(rng, v.TMs)
	case MembershipChange:
		return resolveMembership(a, rng, v)
	default:
		return a, fmt.Errorf("%w: %q", ErrUnknownKind, f.Kind)
	}
	return a, nil
}

func shuffled(rng *rand.Rand, in []string) []string {
	out := append([]string(nil), in...)
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

func sortedKeys(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
