package checker

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// ConfigSample is one JM's Raft configuration (its voters) and the leader it names, read at a
// time (OperatorService.RaftPeers), or the error of the read.
type ConfigSample struct {
	Time   time.Time `json:"time"`
	Node   string    `json:"node"`
	Voters []string  `json:"voters,omitempty"`
	Leader string    `json:"leader,omitempty"`
	Err    string    `json:"err,omitempty"`
}

// MembershipInput is what a membership change did and what the JMs said of their
// configurations throughout the run.
type MembershipInput struct {
	// Removed is the JM cut off and removed (at RemovedAt, when `jmnode raft remove`
	// returned); Added the JM started to join, a voter at AddedAt.
	Removed   string    `json:"removed"`
	Added     string    `json:"added"`
	RemovedAt time.Time `json:"removed_at"`
	AddedAt   time.Time `json:"added_at"`
	// HealAt is when the cut healed; RestartedAt when the removed JM was restarted with its
	// old flags and data; RestoreAt and RestoredAt frame the final snapshot save and restore
	// (RestoreErr when it failed).
	HealAt      time.Time `json:"heal_at"`
	RestartedAt time.Time `json:"restarted_at"`
	RestoreAt   time.Time `json:"restore_at"`
	RestoredAt  time.Time `json:"restored_at"`
	RestoreErr  string    `json:"restore_err,omitempty"`
	// Members are the voters the cluster should have after the change: the JMs left and the
	// one added.
	Members []string `json:"members"`
	// Samples are every JM's configuration reads, the removed and the added JM's too.
	Samples []ConfigSample `json:"samples"`
	// Rounds are the final state-hash rounds over Members.
	Rounds []HashRound `json:"rounds,omitempty"`
}

// MembershipChange checks a membership change:
//   - it happened: the removal returned and the added JM became a voter;
//   - the removed JM never became a voter again: once a member's configuration no longer holds
//     it, no later read of that member's configuration holds it (after the heal, after the
//     removed JM's restart, after the restore alike), and every member's last read holds it not
//     (a read counts once the member lists itself: before that the added JM is replaying the
//     configurations of the log from before its addition);
//   - the added JM is a voter in every member's last read, and a final state-hash round where
//     every member answered at one applied index shows it with the others' hash;
//   - the removed JM's elections deposed nobody: the leader the members name does not change
//     between the heal and the restore (a restore establishes a new term by design).
//
// The removed JM's own reads are not judged: cut off during its removal, it never learns of
// it and keeps naming its old configuration.
func MembershipChange(in MembershipInput) Result {
	r := newResult("membership")
	r.Counts["samples"] = len(in.Samples)
	if in.Removed == "" || in.AddedAt.IsZero() {
		r.problem("the membership change did not happen (removed %q, added %q at %v)", in.Removed, in.Added, in.AddedAt)
		r.Summary = "no membership change"
		return *r
	}
	member := map[string]bool{}
	for _, m := range in.Members {
		member[m] = true
	}
	samples := append([]ConfigSample(nil), in.Samples...)
	sort.SliceStable(samples, func(i, j int) bool { return samples[i].Time.Before(samples[j].Time) })

	gone := map[string]time.Time{} // member -> first read without the removed JM
	last := map[string]ConfigSample{}
	readmitted := map[string]bool{}
	for _, s := range samples {
		// A member that does not list itself is catching up the log from before its own
		// addition (the added JM replays the old configurations): not yet its view.
		if !member[s.Node] || s.Err != "" || s.Time.Before(in.RemovedAt) || !slices.Contains(s.Voters, s.Node) {
			continue
		}
		last[s.Node] = s
		has := slices.Contains(s.Voters, in.Removed)
		if !has {
			if _, ok := gone[s.Node]; !ok {
				gone[s.Node] = s.Time
			}
			continue
		}
		if at, ok := gone[s.Node]; ok && !readmitted[s.Node] {
			readmitted[s.Node] = true
			r.Counts["readmitted"]++
			r.problem("%s's configuration holds the removed %s again at %s (%s; it had left it at %s): voters %v",
				s.Node, in.Removed, s.Time.Format("15:04:05.000"), phase(in, s.Time), at.Format("15:04:05.000"), s.Voters)
		}
	}
	for _, m := range in.Members {
		s, ok := last[m]
		switch {
		case !ok:
			r.problem("%s never answered for its configuration after the removal", m)
		case slices.Contains(s.Voters, in.Removed):
			r.problem("%s's last configuration (%s) holds the removed %s: %v", m, s.Time.Format("15:04:05.000"), in.Removed, s.Voters)
		case !slices.Contains(s.Voters, in.Added):
			r.problem("%s's last configuration (%s) lacks the added %s: %v", m, s.Time.Format("15:04:05.000"), in.Added, s.Voters)
		}
	}

	// The leader the members name, in time order, between the heal and the restore.
	end := in.RestoreAt
	if end.IsZero() {
		end = time.Now()
	}
	var leaders []string
	for _, s := range samples {
		if member[s.Node] && s.Err == "" && s.Leader != "" && !s.Time.Before(in.HealAt) && s.Time.Before(end) &&
			(len(leaders) == 0 || leaders[len(leaders)-1] != s.Leader) {
			leaders = append(leaders, s.Leader)
		}
	}
	r.Counts["leader-changes-after-heal"] = max(len(leaders)-1, 0)
	if len(leaders) > 1 {
		r.problem("the leader changed %d times between the heal and the restore: %s", len(leaders)-1, strings.Join(leaders, " -> "))
	}
	if in.RestoreErr != "" {
		r.problem("the final snapshot save and restore failed: %s", in.RestoreErr)
	} else if !in.RestoredAt.IsZero() {
		r.Counts["reads-after-restore"] = countAfter(samples, member, in.RestoredAt)
		if r.Counts["reads-after-restore"] == 0 {
			r.problem("no member's configuration was read after the restore")
		}
	}
	if in.RestartedAt.IsZero() {
		r.problem("the removed %s was never restarted with its old data", in.Removed)
	}

	hashed := false
	for _, rd := range in.Rounds {
		if len(rd.Samples) < len(in.Members) || !sameApplied(rd) {
			continue
		}
		for _, s := range rd.Samples {
			hashed = hashed || s.Node == in.Added && s.Hash == rd.Samples[0].Hash
		}
	}
	if !hashed {
		r.problem("no final state-hash round shows the added %s at the members' applied index with their hash", in.Added)
	}
	r.Summary = fmt.Sprintf("%s removed, %s added; %d configuration reads, %d readmissions, %d leader changes after heal",
		in.Removed, in.Added, len(in.Samples), r.Counts["readmitted"], r.Counts["leader-changes-after-heal"])
	return *r
}

// phase names the part of the run a time falls in, for a problem's message.
func phase(in MembershipInput, t time.Time) string {
	switch {
	case !in.RestoredAt.IsZero() && !t.Before(in.RestoredAt):
		return "after the restore"
	case !in.RestartedAt.IsZero() && !t.Before(in.RestartedAt):
		return "after the removed JM's restart"
	case !in.HealAt.IsZero() && !t.Before(in.HealAt):
		return "after the heal"
	}
	return "during the cut"
}

func countAfter(samples []ConfigSample, member map[string]bool, t time.Time) int {
	n := 0
	for _, s := range samples {
		if member[s.Node] && s.Err == "" && !s.Time.Before(t) {
			n++
		}
	}
	return n
}

// sameApplied reports whether every sample of a round answered, at one applied index.
func sameApplied(rd HashRound) bool {
	for _, s := range rd.Samples {
		if s.Err != "" || s.Applied != rd.Samples[0].Applied {
			return false
		}
	}
	return len(rd.Samples) > 0
}
