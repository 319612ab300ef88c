package checker

import (
	"fmt"
	"time"
)

// HashSample is one JM's StateHash answer.
type HashSample struct {
	Node    string `json:"node"`
	Hash    string `json:"hash,omitempty"`
	Applied uint64 `json:"applied"`
	Err     string `json:"err,omitempty"`
}

// HashRound is one poll of every JM.
type HashRound struct {
	Time    time.Time    `json:"time"`
	Samples []HashSample `json:"samples"`
}

// StateHashes checks the FSMs after heal: in every round where all JMs answered at the same
// applied index their hashes must be equal, and at least one such round must exist.
func StateHashes(rounds []HashRound, jms int) Result {
	r := newResult("state-hash")
	r.Counts["rounds"] = len(rounds)
	for _, rd := range rounds {
		if len(rd.Samples) < jms {
			continue
		}
		same := true
		for _, s := range rd.Samples {
			if s.Err != "" || s.Applied != rd.Samples[0].Applied {
				same = false
			}
		}
		if !same {
			continue
		}
		r.Counts["comparable-rounds"]++
		for _, s := range rd.Samples[1:] {
			if s.Hash != rd.Samples[0].Hash {
				r.problem("at applied index %d %s has hash %s, %s has %s", s.Applied, rd.Samples[0].Node, rd.Samples[0].Hash, s.Node, s.Hash)
			}
		}
	}
	if r.Counts["comparable-rounds"] == 0 {
		last := "no answer"
		if n := len(rounds); n > 0 {
			last = fmt.Sprint(rounds[n-1].Samples)
		}
		r.problem("applied indexes never matched across %d JMs; last seen %s", jms, last)
	}
	r.Summary = fmt.Sprintf("%d rounds, %d at a common applied index", r.Counts["rounds"], r.Counts["comparable-rounds"])
	return *r
}

// StatusSample is the streaming job's status as seen at a time.
type StatusSample struct {
	Time   time.Time `json:"time"`
	Status string    `json:"status"`
	Node   string    `json:"node,omitempty"`
}

// RunningAfterHeal checks that the streaming job is RUNNING within grace after the last fault
// was healed: the first RUNNING sample at or after healAt must come before healAt+grace.
func RunningAfterHeal(samples []StatusSample, healAt time.Time, grace time.Duration) Result {
	r := newResult("running-after-heal")
	var last StatusSample
	for _, s := range samples {
		if s.Time.Before(healAt) {
			continue
		}
		last = s
		if s.Status == "JOB_STATUS_RUNNING" {
			took := s.Time.Sub(healAt)
			r.Counts["ms-to-running"] = int(took.Milliseconds())
			if took > grace {
				r.problem("RUNNING only %s after heal (grace %s)", took.Round(time.Millisecond), grace)
			}
			r.Summary = fmt.Sprintf("RUNNING %s after heal (grace %s)", took.Round(time.Millisecond), grace)
			return *r
		}
	}
	r.problem("not RUNNING within %s after heal; last seen %q", grace, last.Status)
	r.Summary = "not RUNNING after heal"
	return *r
}
