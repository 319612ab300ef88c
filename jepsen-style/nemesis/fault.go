// Package nemesis injects faults into a running cluster: kill -9 and restart, SIGSTOP and
// SIGCONT, network partitions as grudges turned into iptables DROP rules inside the node
// namespaces, and tc netem delay and loss. Faults follow a schedule generated from a seed.
package nemesis

import (
	"errors"
	"fmt"
	"time"
)

// Kind names a fault.
type Kind string

// The faults of the matrix.
const (
	KillJM           Kind = "kill-jm"           // kill -9 one JM (seeded pick), restart at the end
	KillLeader       Kind = "kill-leader"       // kill -9 the current leader, restart at the end
	KillTM           Kind = "kill-tm"           // kill -9 one TM, restart at the end
	RestartTM        Kind = "restart-tm"        // kill -9 one TM and start it again at once
	KillMajority     Kind = "kill-majority"     // kill -9 the leader and one more JM
	PauseLeader      Kind = "pause-leader"      // SIGSTOP the leader, SIGCONT at the end
	IsolateNode      Kind = "isolate-node"      // one node (JM or TM) cut from every other node
	IsolateLeader    Kind = "isolate-leader"    // the leader cut from every other node
	MajorityMinority Kind = "majority-minority" // JM plane split 2|1; TMs and client reach all JMs
	Bridge           Kind = "bridge"            // JM plane a - b - c: a and c cannot talk, b sees both
	MajoritiesRing   Kind = "majorities-ring"   // all six nodes; each sees a different majority
	TMsFromLeader    Kind = "tms-from-leader"   // every TM cut from the leader, JMs intact
	TMFromJMs        Kind = "tm-from-jms"       // one TM cut from every JM; it still reaches the other TMs
	JMOutage         Kind = "jm-outage"         // kill -9 every JM for JMOutageLength, restart them all
	TMMajorityCut    Kind = "tm-majority-cut"   // a strict majority of the TMs, each cut from every JM and TM
	StallLeader      Kind = "stall-leader"      // SIGSTOP the leader for 2, 5 and 15 s in turn
	FlapLeader       Kind = "flap-leader"       // kill -9 the leader every few seconds: ten kills a minute
	TransferLeader   Kind = "transfer-leader"   // the leader hands leadership over (raft transfer-leadership), every few seconds
	SlowDisk         Kind = "slow-disk"         // every Raft write of the leader delayed 50-500 ms
	DiskFull         Kind = "disk-full"         // the leader's data disk (a tmpfs) filled to the last byte
	Delay            Kind = "netem-delay"       // tc netem delay on every JM
	Loss             Kind = "netem-loss"        // tc netem loss on one JM

	// MembershipChange: one JM cut from the others, removed from the Raft configuration from
	// the majority side and a new JM added while the cut lasts (membership.go).
	MembershipChange Kind = "membership-change"
)

// The store faults of a JobMaster (corrupt.go).
const (
	CorruptRaftLog  Kind = "corrupt-raft-log"     // a killed JM's raft.db damaged, the JM started again
	CorruptSnapshot Kind = "corrupt-snapshot"     // a killed JM's newest snapshot damaged, the JM started again
	LostUnsynced    Kind = "lost-unsynced-writes" // one JM's disk lies about fsync; it and the leader are killed
)

// A damaged checkpoint (corruptckpt.go).
const (
	// CorruptCheckpoint: kill -9 one TM; while it is down, damage the state file of one of its
	// stream tasks in the newest completed checkpoint (a bit flip, a truncation or a chunk
	// copied within the file); restart it at the end.
	CorruptCheckpoint Kind = "corrupt-checkpoint"
)

// The starved and skewed nodes (throttle.go, clock.go).
const (
	ThrottleLeader Kind = "throttle-leader" // the leader's process under a CPU quota of 5-10 % of a core for 30 s
	ClockStepTM    Kind = "clock-step-tm"   // one TM's wall clock stepped by +30 s or -30 s (failpoint clock-offset)
)

// AllKinds lists every fault kind, in matrix order.
func AllKinds() []Kind {
	return []Kind{KillJM, KillLeader, KillTM, RestartTM, KillMajority, PauseLeader, IsolateNode, IsolateLeader,
		MajorityMinority, Bridge, MajoritiesRing, TMsFromLeader, TMFromJMs, JMOutage, TMMajorityCut,
		StallLeader, FlapLeader, TransferLeader, SlowDisk, DiskFull, Delay, Loss,
		CorruptRaftLog, CorruptSnapshot, LostUnsynced,
		CorruptCheckpoint,
		ThrottleLeader, ClockStepTM,
		MembershipChange}
}

// JMOutageLength is how long a jm-outage keeps every JobMaster down: long enough that every
// TaskManager is past its fence timeout and must ask its pool (tasks are to survive it).
const JMOutageLength = 60 * time.Second

// TMMajorityCutLength is how long a tm-majority-cut lasts: well past the TMs' fence timeout
// and pool query, so the cut TMs must decide, and short of the leader grace, so the leader
// (heartbeats from a minority of the pool) must not redeploy their attempts meanwhile.
const TMMajorityCutLength = 30 * time.Second

// StallLengths are the lengths of a stall-leader's faults, in turn: shorter than an election,
// about an election, and longer than the JMs' TM heartbeat timeout.
var StallLengths = []time.Duration{2 * time.Second, 5 * time.Second, 15 * time.Second}

// fixedLength is the length of the faults whose length is not drawn from the schedule's range.
var fixedLength = map[Kind]time.Duration{JMOutage: JMOutageLength, TMMajorityCut: TMMajorityCutLength,
	ThrottleLeader:   ThrottleLength,
	MembershipChange: MembershipChangeLength,
}

// FixedLength reports the fixed length of a fault kind, if it has one.
func FixedLength(k Kind) (time.Duration, bool) {
	d, ok := fixedLength[k]
	return d, ok
}

// Timing is the range a kind's fault lengths and the healthy gaps after them are drawn from,
// where a kind needs other than the schedule's.
type Timing struct{ MinFault, MaxFault, MinGap, MaxGap time.Duration }

// timings: flap-leader kills a leader every 4-5 s (over ten a minute: each kill lasts until the
// killed JM is restarted, and the gap leaves room for the next election); a slow disk lasts long
// enough for many commits.
//
// restart-tm starts the killed TM again after 10-30 ms: the new process binds its port before
// the leader can prove the old one dead (refused connections spanning 300 ms), so the leader
// learns of the restart from the new process's registration, and the gaps leave room for
// several restarts in a run.
var timings = map[Kind]Timing{
	// transfer-leader: a transfer every 2.5-3.5 s, about twenty a minute.
	TransferLeader: {MinFault: 100 * time.Millisecond, MaxFault: 200 * time.Millisecond, MinGap: 2500 * time.Millisecond, MaxGap: 3500 * time.Millisecond},
	RestartTM:      {MinFault: 10 * time.Millisecond, MaxFault: 30 * time.Millisecond, MinGap: 4 * time.Second, MaxGap: 6 * time.Second},
	FlapLeader:     {MinFault: 2 * time.Second, MaxFault: 2500 * time.Millisecond, MinGap: 2 * time.Second, MaxGap: 2500 * time.Millisecond},
	SlowDisk:       {MinFault: 10 * time.Second, MaxFault: 15 * time.Second},
	DiskFull:       {MinFault: 8 * time.Second, MaxFault: 12 * time.Second},
	// Store faults: room for the damaged JM to refuse (or start), then for the repaired one
	// to join again; the lying disk holds writes for 1-2 s, so a kill 5-8 s in loses some.
	CorruptRaftLog:  {MinFault: 8 * time.Second, MaxFault: 12 * time.Second, MinGap: 6 * time.Second, MaxGap: 10 * time.Second},
	CorruptSnapshot: {MinFault: 8 * time.Second, MaxFault: 12 * time.Second, MinGap: 6 * time.Second, MaxGap: 10 * time.Second},
	LostUnsynced:    {MinFault: 5 * time.Second, MaxFault: 8 * time.Second, MinGap: 4 * time.Second, MaxGap: 6 * time.Second},
	// corrupt-checkpoint: the TM down 2-4 s (its region restores elsewhere meanwhile), then
	// gaps long enough for checkpoints to complete again after the fallback.
	CorruptCheckpoint: {MinFault: 2 * time.Second, MaxFault: 4 * time.Second, MinGap: 6 * time.Second, MaxGap: 9 * time.Second},
	// clock-step-tm: a step held 10-20 s, several checkpoints and heartbeats long.
	ClockStepTM: {MinFault: 10 * time.Second, MaxFault: 20 * time.Second},
}

// KindTiming reports the timing of a kind that has its own.
func KindTiming(k Kind) (Timing, bool) {
	t, ok := timings[k]
	return t, ok
}

// NeedsTmpfs reports whether a kind needs every JM's data directory on a tmpfs of its own.
func NeedsTmpfs(k Kind) bool { return k == DiskFull }

// Errors of the nemesis.
var (
	ErrUnknownKind = errors.New("nemesis: unknown fault kind")
	ErrNoLeader    = errors.New("nemesis: no leader found")
)

// ParseKind returns the kind with the given name.
func ParseKind(s string) (Kind, error) {
	for _, k := range AllKinds() {
		if string(k) == s {
			return k, nil
		}
	}
	return "", fmt.Errorf("%w: %q", ErrUnknownKind, s)
}

// Fault is one scheduled fault: it starts At after the run began and is healed Length later.
type Fault struct {
	Index  int           `json:"index"`
	Kind   Kind          `json:"kind"`
	At     time.Duration `json:"at"`
	Length time.Duration `json:"length"`
	// Pick seeds every choice the fault makes when it is resolved (which node, which split).
	Pick int64 `json:"pick"`
}

// End is when the fault is healed, relative to the run's start.
func (f Fault) End() time.Duration { return f.At + f.Length }

// Netem is a tc netem setting for one node's interface.
type Netem struct {
	DelayMs  int `json:"delay_ms,omitempty"`
	JitterMs int `json:"jitter_ms,omitempty"`
	LossPct  int `json:"loss_pct,omitempty"`
}

// Action is a fault resolved against the cluster as it is when the fault starts.
type Action struct {
	Fault  Fault            `json:"fault"`
	Kill   []string         `json:"kill,omitempty"`
	Pause  []string         `json:"pause,omitempty"`
	Grudge Grudge           `json:"grudge,omitempty"`
	Netem  map[string]Netem `json:"netem,omitempty"`
	// Failpoints maps a JM to the failpoint terms it runs with during the fault (on top of the
	// run's own): a slow disk.
	Failpoints map[string]string `json:"failpoints,omitempty"`
	// FillDisk lists the JMs whose data disk is filled.
	FillDisk []string `json:"fill_disk,omitempty"`
	// Transfer is the leader asked to hand leadership to another voter.
	Transfer string `json:"transfer,omitempty"`
	// Leader is the leader when the fault was resolved ("" when none was found).
	Leader string `json:"leader,omitempty"`
	// Corrupt is the store fault: a JM killed, a file of it damaged, the JM started again
	// (corrupt.go).
	Corrupt *Corruption `json:"corrupt,omitempty"`
	// KillAtHeal lists the JMs killed when the fault ends, then started again (lost-unsynced-writes).
	KillAtHeal []string `json:"kill_at_heal,omitempty"`
	// CorruptCheckpoint: once the TMs of Kill are down, a state file of one of their stream
	// tasks in the newest completed checkpoint is damaged (corruptckpt.go).
	CorruptCheckpoint *CheckpointDamage `json:"corrupt_checkpoint,omitempty"`
	// Throttle maps a node to the CPU quota its process runs under during the fault, in µs of
	// CPU per netns.CgroupPeriodUs (throttle.go).
	Throttle map[string]int `json:"throttle,omitempty"`
	// Remove is the JM a membership change cuts off and removes from the Raft configuration;
	// Add the spare JM it starts to join as a voter (membership.go).
	Remove string `json:"remove,omitempty"`
	Add    string `json:"add,omitempty"`
}

// Nodes lists every node the action touches, sorted.
func (a Action) Nodes() []string {
	set := map[string]bool{}
	for _, n := range a.Kill {
		set[n] = true
	}
	for _, n := range a.Pause {
		set[n] = true
	}
	for n, from := range a.Grudge {
		set[n] = true
		for _, m := range from {
			set[m] = true
		}
	}
	for n := range a.Netem {
		set[n] = true
	}
	for n := range a.Failpoints {
		set[n] = true
	}
	for _, n := range a.FillDisk {
		set[n] = true
	}
	if a.Transfer != "" {
		set[a.Transfer] = true
	}
	if a.Corrupt != nil {
		set[a.Corrupt.Node] = true
	}
	for _, n := range a.KillAtHeal {
		set[n] = true
	}
	for n := range a.Throttle {
		set[n] = true
	}
	return sortedKeys(set)
}

// AffectedTMs lists the TMs the action touches: killed, paused or slowed TMs, TMs cut from
// another TM, and TMs cut from a JM that still sees a majority of JMs (so may be, or become, the
// leader). A TM cut only from JMs that lost their majority is not affected: the leader it
// needs is elected on its side. A fault with no affected TM touches only JMs.
func (a Action) AffectedTMs(jms, tms []string) []string {
	set := map[string]bool{}
	isTM := map[string]bool{}
	for _, tm := range tms {
		isTM[tm] = true
	}
	for _, n := range append(append(append([]string(nil), a.Kill...), a.Pause...), sortedNetem(a.Netem)...) {
		if isTM[n] {
			set[n] = true
		}
	}
	for n := range a.Throttle { // a throttled TM is slowed
		if isTM[n] {
			set[n] = true
		}
	}
	linked := func(x, y string) bool { return a.Grudge.Visible(x, y) && a.Grudge.Visible(y, x) }
	quorate := func(jm string) bool {
		seen := 0
		for _, other := range jms {
			if linked(jm, other) {
				seen++
			}
		}
		return seen >= len(jms)/2+1
	}
	for _, tm := range tms {
		for _, other := range tms {
			if !linked(tm, other) {
				set[tm] = true
			}
		}
		for _, jm := range jms {
			if !linked(tm, jm) && quorate(jm) {
				set[tm] = true
			}
		}
	}
	return sortedKeys(set)
}
