// Package report assembles the outcome of a run (seed, faults, operations, checker verdicts,
// elections, unavailability, time to healthy) and writes it as report.json and report.html.
package report

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/jmcluster/jmcluster/jepsen-style/checker"
	"github.com/jmcluster/jmcluster/jepsen-style/client"
	"github.com/jmcluster/jmcluster/jepsen-style/history"
)

// FaultRecord is one fault as it happened.
type FaultRecord struct {
	Index       int       `json:"index"`
	Kind        string    `json:"kind"`
	Start       time.Time `json:"start"`
	End         time.Time `json:"end"`
	Nodes       []string  `json:"nodes,omitempty"`
	Leader      string    `json:"leader,omitempty"`
	AffectedTMs []string  `json:"affected_tms,omitempty"`
	Detail      string    `json:"detail,omitempty"`
	Error       string    `json:"error,omitempty"`
}

// Election is a new leader epoch, first seen at Time.
type Election struct {
	Time   time.Time `json:"time"`
	Leader string    `json:"leader"`
	Epoch  uint64    `json:"epoch"`
}

// Latency is one completed operation.
type Latency struct {
	Time time.Time    `json:"time"` // invocation
	Ms   float64      `json:"ms"`
	F    history.F    `json:"f"`
	Type history.Type `json:"type"`
}

// Window is a stretch of time.
type Window struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	Ms    int64     `json:"ms"`
}

// Stall is one stall of the leader the suite's stall watch saw (jepsen-style/stall.go): the
// leader committed or applied nothing for the detector's threshold while clients waited.
type Stall struct {
	Leader string `json:"leader"`
	Epoch  uint64 `json:"epoch"`
	// Commit and Applied are the leader's indexes when the stall was detected; Since is when
	// it last made progress (committed and applied).
	Commit   uint64    `json:"commit"`
	Applied  uint64    `json:"applied"`
	Since    time.Time `json:"since"`
	Detected time.Time `json:"detected"`
	// End is when the stall ended (zero: it lasted until the run ended), EndedBy why:
	// "progress", "leader changed" or "run ended".
	End     time.Time `json:"end,omitempty"`
	EndedBy string    `json:"ended_by,omitempty"`
	OpenOps int       `json:"open_ops"`
	// LeaderAnswered: the leader answered its ClusterStatus when the stall was detected (else
	// its indexes are those its followers reported).
	LeaderAnswered bool `json:"leader_answered"`
	// Seen is every JM's answer in the round that detected the stall.
	Seen []client.Observation `json:"seen,omitempty"`
	// Dumps are the goroutine dumps taken, relative to the run directory; Errors the dumps
	// that could not be taken.
	Dumps  []string `json:"dumps,omitempty"`
	Errors []string `json:"errors,omitempty"`
}

// Report is everything a run produced.
type Report struct {
	RunID    string `json:"run_id"`
	Scenario string `json:"scenario"`
	Seed     int64  `json:"seed"`
	// Failpoints is the JMNODE_FAILPOINTS every jmnode ran with ("" for an intact build).
	Failpoints string    `json:"failpoints,omitempty"`
	Start      time.Time `json:"start"`
	End        time.Time `json:"end"`
	HealAt     time.Time `json:"heal_at"`
	JMOnly     bool      `json:"jm_only"`

	Faults       []FaultRecord             `json:"faults"`
	FaultsByKind map[string]int            `json:"faults_by_kind"`
	OpsByOutcome map[string]map[string]int `json:"ops_by_outcome"`
	Checkers     []checker.Result          `json:"checkers"`
	Valid        bool                      `json:"valid"`

	Elections             []Election             `json:"elections"`
	LongestUnavailability Window                 `json:"longest_unavailability"`
	TimeToHealthyMs       int64                  `json:"time_to_healthy_ms"`
	JobStates             []checker.StatusSample `json:"job_states"`
	Latencies             []Latency              `json:"latencies,omitempty"`
	Visualization         string                 `json:"linearizability_visualization,omitempty"`
	Notes                 []string               `json:"notes,omitempty"`
	// Stalls are the stalls of the leader the stall watch saw (none: the leader never stood
	// still while clients waited).
	Stalls []Stall `json:"stalls"`
}

// Finish fills the derived fields: counts by kind and outcome, validity, elections, job state
// changes, latencies and the longest unavailability.
func (r *Report) Finish(calls []history.Call, obs []client.Observation, statuses []checker.StatusSample) {
	r.FaultsByKind = map[string]int{}
	for _, f := range r.Faults {
		r.FaultsByKind[f.Kind]++
	}
	r.OpsByOutcome = OpsByOutcome(calls)
	r.Valid = true
	for _, c := range r.Checkers {
		if !c.OK() {
			r.Valid = false
		}
	}
	r.Elections = Elections(obs)
	r.JobStates = StateChanges(statuses)
	r.Latencies = Latencies(calls)
	r.LongestUnavailability = LongestUnavailability(calls, r.Start, r.End)
}

// OpsByOutcome counts operations per function and outcome.
func OpsByOutcome(calls []history.Call) map[string]map[string]int {
	out := map[string]map[string]int{}
	for _, c := range calls {
		if out[string(c.F)] == nil {
			out[string(c.F)] = map[string]int{}
		}
		out[string(c.F)][string(c.Type)]++
	}
	return out
}

// Elections returns each new epoch with the leader that claimed it, in the order first seen.
func Elections(obs []client.Observation) []Election {
	sorted := append([]client.Observation(nil), obs...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Time.Before(sorted[j].Time) })
	var out []Election
	var max uint64
	for _, o := range sorted {
		if o.IsLeader() && o.Epoch > max {
			max = o.Epoch
			out = append(out, Election{Time: o.Time, Leader: o.Node, Epoch: o.Epoch})
		}
	}
	return out
}

// StateChanges keeps the samples where the job status changed.
func StateChanges(s []checker.StatusSample) []checker.StatusSample {
	var out []checker.StatusSample
	for _, x := range s {
		if len(out) == 0 || out[len(out)-1].Status != x.Status {
			out = append(out, x)
		}
	}
	return out
}

// Latencies lists every completed operation's latency.
func Latencies(calls []history.Call) []Latency {
	out := make([]Latency, 0, len(calls))
	for _, c := range calls {
		out = append(out, Latency{Time: time.Unix(0, c.Invoke), Ms: float64(c.Complete-c.Invoke) / 1e6, F: c.F, Type: c.Type})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	return out
}

// LongestUnavailability is the longest stretch inside [start, end] with no successful write
// (an ok submit or cancel) completing.
func LongestUnavailability(calls []history.Call, start, end time.Time) Window {
	var ts []int64
	for _, c := range calls {
		if c.Type == history.OK && c.F != history.Read {
			ts = append(ts, c.Complete)
		}
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
	prev := start.UnixNano()
	var best Window
	consider := func(t int64) {
		if t-prev > best.End.Sub(best.Start).Nanoseconds() {
			best = Window{Start: time.Unix(0, prev), End: time.Unix(0, t)}
		}
		prev = t
	}
	for _, t := range ts {
		if t >= prev {
			consider(t)
		}
	}
	if !end.IsZero() && end.UnixNano() > prev {
		consider(end.UnixNano())
	}
	best.Ms = best.End.Sub(best.Start).Milliseconds()
	return best
}

// WriteJSON writes report.json into dir.
func (r *Report) WriteJSON(dir string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "report.json"), b, 0o644)
}

// ReadJSON reads a report.json.
func ReadJSON(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Report
	return &r, json.Unmarshal(b, &r)
}

// TimeToHealthy is the time from heal until the cluster was first seen healthy: every JM
// answering (its latest answer after heal), all naming one leader, none reconciling, and the
// streaming job's latest status after heal RUNNING.
func TimeToHealthy(obs []client.Observation, statuses []checker.StatusSample, healAt time.Time, jms int) (time.Duration, bool) {
	type ev struct {
		t      time.Time
		o      *client.Observation
		status string
	}
	var evs []ev
	for i := range obs {
		if !obs[i].Time.Before(healAt) {
			evs = append(evs, ev{t: obs[i].Time, o: &obs[i]})
		}
	}
	for _, s := range statuses {
		if !s.Time.Before(healAt) {
			evs = append(evs, ev{t: s.Time, status: s.Status})
		}
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].t.Before(evs[j].t) })
	latest := map[string]client.Observation{}
	job := ""
	for _, e := range evs {
		if e.o != nil {
			latest[e.o.Node] = *e.o
		} else {
			job = e.status
		}
		if len(latest) < jms || job != "JOB_STATUS_RUNNING" {
			continue
		}
		leader, healthy := "", true
		for _, o := range latest {
			if o.Err != "" || o.Reconciling || o.LeaderID == "" || (leader != "" && o.LeaderID != leader) {
				healthy = false
				break
			}
			leader = o.LeaderID
		}
		if healthy {
			return e.t.Sub(healAt), true
		}
	}
	return 0, false
}
