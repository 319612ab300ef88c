package client

import (
	"sort"
	"time"
)

// The stall detector's defaults: a leader that commits nothing for StallThreshold while
// clients wait is stalled; while it stays stalled, the JobMasters are dumped again every
// StallRedumpEvery, at most StallMaxDumps times per stall.
const (
	StallThreshold   = 10 * time.Second
	StallRedumpEvery = 30 * time.Second
	StallMaxDumps    = 3
)

// StallSample is what the detector sees at one poll: every JM's ClusterStatus answer (or its
// failure) and how many client operations are open (invoked, not completed).
type StallSample struct {
	Time    time.Time
	Round   []Observation
	OpenOps int
}

// StallAction is what the detector asks its caller to do after a sample.
type StallAction int

// The actions. Dump (a stall begins, or goes on past the redump interval): take goroutine dumps
// of every JM. End: the stall is over (the leader commits again, another leader took over, or
// the run ends).
const (
	StallNone StallAction = iota
	StallDump
	StallEnd
)

func (a StallAction) String() string {
	switch a {
	case StallDump:
		return "dump"
	case StallEnd:
		return "end"
	}
	return "none"
}

// StallConfig bounds the detector; zero fields take the defaults above.
type StallConfig struct {
	Threshold   time.Duration
	RedumpEvery time.Duration
	MaxDumps    int
}

// StallDetector decides, from one poll after another, when the leader has stalled: the same
// leader (node and epoch) has not moved its Raft commit index or its applied index for
// Threshold, and clients have operations waiting. It is a pure state machine over the samples
// it is given (no clock, no I/O), so a table test drives it.
//
// The leader is the node that says it leads with the highest epoch; when no node says so (the
// leader does not answer its ClusterStatus in time, as in the 110 s stall, whose leader the
// nemesis could not find), the leader the answering followers name. Its indexes are its own
// answer's; when it does not answer, the highest the followers naming it report (they learn the
// commit index from it). A round in which no leader can be made out changes nothing: an
// election is not a stall of a live leader, and a new leader starts a new watch.
type StallDetector struct {
	cfg StallConfig

	leader     string
	epoch      uint64
	commit     uint64
	applied    uint64
	commitAt   time.Time // when commit last rose (or the watch of this leader began)
	appliedAt  time.Time
	stalled    bool
	dumps      int
	lastDumpAt time.Time
}

// NewStallDetector returns a detector with cfg's bounds (zero: the defaults).
func NewStallDetector(cfg StallConfig) *StallDetector {
	if cfg.Threshold <= 0 {
		cfg.Threshold = StallThreshold
	}
	if cfg.RedumpEvery <= 0 {
		cfg.RedumpEvery = StallRedumpEvery
	}
	if cfg.MaxDumps <= 0 {
		cfg.MaxDumps = StallMaxDumps
	}
	return &StallDetector{cfg: cfg}
}

// StallView is the detector's view of the leader after a sample.
type StallView struct {
	Leader  string
	Epoch   uint64
	Commit  uint64
	Applied uint64
	// Since is when the leader last committed and applied: the older of the two last rises.
	Since time.Time
	// Answered: the leader itself answered this round (else its indexes are its followers').
	Answered bool
}

// Stalled reports whether a stall is in progress.
func (d *StallDetector) Stalled() bool { return d.stalled }

// Observe takes one sample and returns the action due and the leader as the detector sees it.
func (d *StallDetector) Observe(s StallSample) (StallAction, StallView) {
	leader, epoch, commit, applied, answered, ok := leaderOf(s.Round)
	if !ok {
		return StallNone, d.view(false)
	}
	// A new epoch is a new term; a lower one is a follower that has not applied the leader's
	// epoch yet, not a change.
	if leader != d.leader || epoch > d.epoch {
		wasStalled := d.stalled
		*d = StallDetector{cfg: d.cfg, leader: leader, epoch: epoch, commit: commit, applied: applied,
			commitAt: s.Time, appliedAt: s.Time}
		if wasStalled {
			return StallEnd, d.view(answered)
		}
		return StallNone, d.view(answered)
	}
	if commit > d.commit {
		d.commit, d.commitAt = commit, s.Time
	}
	if applied > d.applied {
		d.applied, d.appliedAt = applied, s.Time
	}
	stuck := s.Time.Sub(d.since()) >= d.cfg.Threshold
	switch {
	case d.stalled && !stuck:
		d.stalled, d.dumps = false, 0
		return StallEnd, d.view(answered)
	case !d.stalled && stuck && s.OpenOps > 0:
		d.stalled, d.dumps, d.lastDumpAt = true, 1, s.Time
		return StallDump, d.view(answered)
	case d.stalled && d.dumps < d.cfg.MaxDumps && s.Time.Sub(d.lastDumpAt) >= d.cfg.RedumpEvery:
		d.dumps++
		d.lastDumpAt = s.Time
		return StallDump, d.view(answered)
	}
	return StallNone, d.view(answered)
}

// since is when the leader last made progress: the older of its last commit and last apply.
func (d *StallDetector) since() time.Time {
	if d.appliedAt.Before(d.commitAt) {
		return d.appliedAt
	}
	return d.commitAt
}

func (d *StallDetector) view(answered bool) StallView {
	return StallView{Leader: d.leader, Epoch: d.epoch, Commit: d.commit, Applied: d.applied, Since: d.since(), Answered: answered}
}

// leaderOf makes out the leader of one round and its indexes (see StallDetector).
func leaderOf(round []Observation) (leader string, epoch, commit, applied uint64, answered, ok bool) {
	for _, o := range round {
		if o.IsLeader() && (!ok || o.Epoch > epoch) {
			leader, epoch, commit, applied, answered, ok = o.Node, o.Epoch, o.Commit, o.Applied, true, true
		}
	}
	if ok {
		return
	}
	named := map[string]int{}
	for _, o := range round {
		if o.Err == "" && o.LeaderID != "" && o.LeaderID != o.Node {
			named[o.LeaderID]++
		}
	}
	if len(named) == 0 {
		return "", 0, 0, 0, false, false
	}
	names := make([]string, 0, len(named))
	for n := range named {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		if named[names[i]] != named[names[j]] {
			return named[names[i]] > named[names[j]]
		}
		return names[i] < names[j]
	})
	leader = names[0]
	for _, o := range round {
		if o.Err == "" && o.LeaderID == leader {
			epoch = max(epoch, o.Epoch)
			commit = max(commit, o.Commit)
			applied = max(applied, o.Applied)
		}
	}
	return leader, epoch, commit, applied, false, true
}
