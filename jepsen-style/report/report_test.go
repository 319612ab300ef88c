package report

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/jepsen-style/checker"
	"github.com/jmcluster/jmcluster/jepsen-style/client"
	"github.com/jmcluster/jmcluster/jepsen-style/history"
)

var t0 = time.Unix(1_700_000_000, 0)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func sampleReport() (*Report, []history.Call, []client.Observation, []checker.StatusSample) {
	r := &Report{RunID: "kill-leader-s1-1", Scenario: "kill-leader", Seed: 1, Start: at(0), End: at(30), HealAt: at(20),
		Faults: []FaultRecord{{Index: 0, Kind: "kill-leader", Start: at(5), End: at(10), Nodes: []string{"jm1"}, Leader: "jm1"}},
		Checkers: []checker.Result{{Name: "linearizable", Verdict: checker.Pass, Summary: "ok <script>"},
			{Name: "restarts", Verdict: checker.Fail, Summary: "bad", Problems: []string{"map/0 restarted"}}}}
	calls := []history.Call{
		{Process: 0, F: history.Submit, JobID: "a", Invoke: at(1).UnixNano(), Complete: at(1.1).UnixNano(), Type: history.OK},
		{Process: 0, F: history.Submit, JobID: "b", Invoke: at(5).UnixNano(), Complete: at(8).UnixNano(), Type: history.Info},
		{Process: 1, F: history.Cancel, JobID: "a", Invoke: at(9).UnixNano(), Complete: at(9.5).UnixNano(), Type: history.OK},
		{Process: 1, F: history.Read, JobID: "a", Invoke: at(10).UnixNano(), Complete: at(10.2).UnixNano(), Type: history.OK},
	}
	obs := []client.Observation{
		{Time: at(1), Node: "jm1", RaftState: "Leader", LeaderID: "jm1", Epoch: 1},
		{Time: at(1), Node: "jm2", RaftState: "Follower", LeaderID: "jm1", Epoch: 1},
		{Time: at(7), Node: "jm2", RaftState: "Leader", LeaderID: "jm2", Epoch: 2},
		{Time: at(20.5), Node: "jm1", LeaderID: "jm2", Epoch: 2},
		{Time: at(20.5), Node: "jm2", RaftState: "Leader", LeaderID: "jm2", Epoch: 2},
		{Time: at(20.6), Node: "jm3", LeaderID: "jm2", Epoch: 2, Reconciling: true},
		{Time: at(21), Node: "jm3", LeaderID: "jm2", Epoch: 2},
	}
	st := []checker.StatusSample{{Time: at(1), Status: "JOB_STATUS_RUNNING"}, {Time: at(7), Status: "JOB_STATUS_RECONCILING"},
		{Time: at(8), Status: "JOB_STATUS_RUNNING"}, {Time: at(20.7), Status: "JOB_STATUS_RUNNING"}}
	return r, calls, obs, st
}

func TestFinishDerivesCounts(t *testing.T) {
	r, calls, obs, st := sampleReport()
	r.Finish(calls, obs, st)
	if r.Valid {
		t.Fatal("a failing checker must make the run invalid")
	}
	if len(r.Elections) != 2 || r.Elections[1].Leader != "jm2" || r.Elections[1].Epoch != 2 {
		t.Fatalf("elections = %+v", r.Elections)
	}
	if r.FaultsByKind["kill-leader"] != 1 || r.OpsByOutcome["submit"]["info"] != 1 {
		t.Fatalf("counts: %v %v", r.FaultsByKind, r.OpsByOutcome)
	}
	if len(r.JobStates) != 3 {
		t.Fatalf("job state changes = %+v", r.JobStates)
	}
	// Writes completed at 1.1 and 9.5; the run ends at 30: the longest gap is 9.5 -> 30.
	if got := r.LongestUnavailability.Ms; got != 20500 {
		t.Fatalf("longest unavailability = %d ms", got)
	}
	d, ok := TimeToHealthy(obs, st, r.HealAt, 3)
	if !ok || d != time.Second {
		t.Fatalf("time to healthy = %s %v, want 1s", d, ok)
	}
}

func TestWriteRendersJSONAndHTML(t *testing.T) {
	r, calls, obs, st := sampleReport()
	r.Finish(calls, obs, st)
	dir := t.TempDir()
	if err := r.Write(dir); err != nil {
		t.Fatal(err)
	}
	back, err := ReadJSON(filepath.Join(dir, "report.json"))
	if err != nil || back.Seed != 1 || len(back.Checkers) != 2 {
		t.Fatalf("report.json round trip: %v %+v", err, back)
	}
	b, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	html := string(b)
	for _, want := range []string{"<svg", "kill-leader", "jm2 e2", "RECONCILING", "restarts", "map/0 restarted", "INVALID", "<circle"} {
		if !strings.Contains(html, want) {
			t.Errorf("report.html lacks %q", want)
		}
	}
	if strings.Contains(html, "ok <script>") {
		t.Error("summary not escaped")
	}
}
