// Package jepsen runs jmcluster under a nemesis in the manner of Jepsen: three JobMasters and
// three TaskManagers as real processes, each in its own network namespace; clients in a
// namespace of their own submit, cancel and read jobs while a streaming job with a checksum sink
// runs throughout; faults follow a seeded schedule; checkers judge the recorded history, the
// TMs' task event logs, the FSM hashes and the sink files; a report is written per run.
package jepsen

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/jmcluster/jmcluster/jepsen-style/nemesis"
	"github.com/jmcluster/jmcluster/jepsen-style/netns"
)

// ErrUnknownScenario is returned for a scenario name not in the matrix.
var ErrUnknownScenario = errors.New("jepsen: unknown scenario")

// Scenario is one row of the fault matrix: the fault kinds its schedule draws from.
type Scenario struct {
	Name        string
	Kinds       []nemesis.Kind
	Description string
	// MinDuration: the fault phase is at least this long (a fault of fixed length must fit).
	MinDuration time.Duration
	// TMs is the number of TaskManagers (0: netns.DefaultTMs).
	TMs int
	// ExpectInvalid, when set, is why the scenario may be invalid by design: it is not in
	// the set that must be valid, and `jepsen matrix` reports it apart.
	ExpectInvalid string
}

func (s Scenario) tms() int {
	if s.TMs > 0 {
		return s.TMs
	}
	return netns.DefaultTMs
}

// needsDataDisk: a kind of the scenario fills a JM's disk, so each JM gets one of its own.
func (s Scenario) needsDataDisk() bool {
	for _, k := range s.Kinds {
		if nemesis.NeedsTmpfs(k) {
			return true
		}
	}
	return false
}

// scenarioTMs: the kinds whose scenario runs with more TaskManagers than the default.
var scenarioTMs = map[nemesis.Kind]int{nemesis.TMMajorityCut: 5}

// Scenarios is the fault matrix: one scenario per fault kind, plus "mixed" drawing from all.
func Scenarios() []Scenario {
	desc := map[nemesis.Kind]string{
		nemesis.KillJM:           "kill -9 one JM (seeded pick), restart it",
		nemesis.KillLeader:       "kill -9 the leader JM, restart it",
		nemesis.KillTM:           "kill -9 one TM, restart it",
		nemesis.RestartTM:        "kill -9 one TM and start it again at once, before the leader can prove it dead: its old attempts are failed when the new process registers",
		nemesis.KillMajority:     "kill -9 the leader and a second JM, restart both",
		nemesis.PauseLeader:      "SIGSTOP the leader, SIGCONT it",
		nemesis.IsolateNode:      "cut one node (JM or TM) from every other node",
		nemesis.IsolateLeader:    "cut the leader from every other node",
		nemesis.MajorityMinority: "split the JMs 2|1; TMs and clients still reach every JM",
		nemesis.Bridge:           "JMs a-b-c: a and c cannot talk, b talks to both",
		nemesis.MajoritiesRing:   "all six nodes on a ring, each seeing a different majority",
		nemesis.TMsFromLeader:    "cut every TM from the leader; the JMs stay connected",
		nemesis.TMFromJMs:        "cut one TM from every JM; it still reaches the other TMs (the pool tells it the leader lives)",
		nemesis.JMOutage:         "kill -9 every JM for 60 s, restart them all: tasks survive, zero restarts",
		nemesis.TMMajorityCut:    "five TMs: three of them, each cut from every JM and every other TM for 30 s; the leader (heartbeats from a minority of the pool) must not redeploy their attempts, and they stop them",
		nemesis.StallLeader:      "SIGSTOP the leader for 2, 5 and 15 s in turn (the last longer than the TM heartbeat timeout): no TM lost, zero restarts",
		nemesis.FlapLeader:       "kill -9 the leader every 4-5 s, restarting each: more than ten leader kills a minute, zero restarts",
		nemesis.TransferLeader:   "the leader hands leadership to another voter (jmnode raft transfer-leadership) every 2.5-3.5 s: about twenty transfers a minute under load, zero restarts",
		nemesis.SlowDisk:         "every Raft log, stable-store and snapshot write of the leader delayed 50-500 ms for 10-15 s (a slow disk)",
		nemesis.DiskFull:         "the leader's data disk (a tmpfs of its own) filled to the last byte, freed 8-12 s later: errors, never a false acknowledgement",
		nemesis.Delay:            "tc netem delay (50-200 ms, jitter) on every JM",
		nemesis.Loss:             "tc netem loss (10-30%) on one JM",
		nemesis.CorruptRaftLog:   "kill -9 one JM, damage its raft.db (a bit flipped, the file truncated or a chunk copied within it: all three in turn), start it: it refuses naming the file; the heal is the documented repair (raft remove, data moved away, started to join)",
		nemesis.CorruptSnapshot:  "snapshots every 128 entries; kill -9 one JM, damage its newest snapshot's state.bin or meta.json (bit flip, truncation, copied chunk in turn), start it: it refuses naming the file; the heal is the documented repair",
		nemesis.LostUnsynced:     "one JM's disk lies (disk-lose-unsynced: writes acknowledged, written 1-2 s later); at the fault's end it and the leader are killed and started again: may lose acknowledged entries (invalid by design if it does)",

		// A damaged checkpoint (nemesis/corruptckpt.go).
		nemesis.CorruptCheckpoint: "kill -9 one TM; while it is down, flip a bit of, truncate or copy a chunk within the state file of its source task in the stream job's newest completed checkpoint; restart it: the region's restore refuses the file and falls back to the previous checkpoint, committed output still exactly once",
		nemesis.ThrottleLeader:    "the leader's process in a cgroup with a CPU quota of 5-10 % of one core for 30 s: no TM fenced or declared lost because the leader was slow (a starved leader hands leadership over), zero restarts",
		nemesis.ClockStepTM:       "one TM's wall clock stepped by +30 s or -30 s for 10-20 s (failpoint clock-offset): event time, timeouts and checkpoints unaffected, zero restarts",
		nemesis.MembershipChange:  "one JM (seeded pick, may be the leader) cut from the others, removed from the Raft configuration (jmnode raft remove against the majority) and a new JM, jm4, started with --join and added while the cut lasts; the cut heals, the removed JM runs on, is restarted with its old flags and data, and the final phase saves and restores a snapshot: it is never a voter again, and the final checks compare the new three",
	}
	var out, mixed []Scenario
	var mixedKinds []nemesis.Kind
	for _, k := range nemesis.AllKinds() {
		s := Scenario{Name: string(k), Kinds: []nemesis.Kind{k}, Description: desc[k], TMs: scenarioTMs[k], ExpectInvalid: expectInvalid[k]}
		if l, fixed := nemesis.FixedLength(k); fixed {
			s.MinDuration = l + 20*time.Second // the warmup, and room after the fault
		} else if k != nemesis.FlapLeader && !storeKind(k) {
			// A minute-long fault would crowd out the rest; flap-leader is kill-leader again.
			mixedKinds = append(mixedKinds, k)
		}
		out = append(out, s)
	}
	mixed = append(mixed, Scenario{Name: "mixed", Kinds: mixedKinds, Description: "every fault kind of variable length, one after another"})
	return append(out, mixed...)
}

// ShortScenarios are the scenarios of `jepsen short` (and `make jepsen-short`).
func ShortScenarios() []string {
	return []string{"kill-leader", "pause-leader", "isolate-leader", "majority-minority"}
}

// LookupScenario finds a scenario by name.
func LookupScenario(name string) (Scenario, error) {
	for _, s := range Scenarios() {
		if s.Name == name {
			return s, nil
		}
	}
	var names []string
	for _, s := range Scenarios() {
		names = append(names, s.Name)
	}
	sort.Strings(names)
	return Scenario{}, fmt.Errorf("%w %q (known: %v)", ErrUnknownScenario, name, names)
}
