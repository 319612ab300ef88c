package checker

import (
	"strings"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/jepsen-style/history"
	"github.com/jmcluster/jmcluster/transport/pb"
)

func TestLinearizable(t *testing.T) {
	const running, canceled = "JOB_STATUS_RUNNING", "JOB_STATUS_CANCELED"
	cases := []struct {
		name  string
		calls []history.Call
		want  Verdict
	}{
		{"clean", []history.Call{
			call(0, history.Read, "a", 0, 1, history.OK, notFound),
			call(0, history.Submit, "a", 1, 2, history.OK, nil),
			call(1, history.Read, "a", 1.5, 2.5, history.OK, found(running)),
			call(1, history.Cancel, "a", 3, 4, history.OK, &history.Value{Status: "JOB_STATUS_CANCELLING"}),
			call(0, history.Read, "a", 5, 6, history.OK, found(canceled)),
			call(2, history.Cancel, "b", 0, 1, history.Fail, &history.Value{Code: "NotFound"}),
		}, Pass},
		{"acknowledged submit then not found", []history.Call{
			call(0, history.Submit, "a", 0, 1, history.OK, nil),
			call(1, history.Read, "a", 2, 3, history.OK, notFound),
		}, Fail},
		{"cancel acknowledged, later read not cancelled", []history.Call{
			call(0, history.Submit, "a", 0, 1, history.OK, nil),
			call(0, history.Cancel, "a", 2, 3, history.OK, &history.Value{Status: canceled}),
			call(1, history.Read, "a", 4, 5, history.OK, found(running)),
		}, Fail},
		{"indeterminate submit may show up late", []history.Call{
			call(0, history.Submit, "a", 0, 1, history.Info, &history.Value{Code: "Unavailable"}),
			call(1, history.Read, "a", 2, 3, history.OK, notFound),
			call(1, history.Read, "a", 4, 5, history.OK, found(running)),
			call(2, history.Read, "a", 4.5, 5.5, history.Info, nil),
		}, Pass},
		{"indeterminate submit seen then unseen", []history.Call{
			call(0, history.Submit, "a", 0, 1, history.Info, nil),
			call(1, history.Read, "a", 2, 3, history.OK, found(running)),
			call(1, history.Read, "a", 4, 5, history.OK, notFound),
		}, Fail},
		{"cancel NOT_FOUND after acknowledged submit", []history.Call{
			call(0, history.Submit, "a", 0, 1, history.OK, nil),
			call(1, history.Cancel, "a", 2, 3, history.Fail, &history.Value{Code: "NotFound"}),
		}, Fail},
	}
	for _, c := range cases {
		r, _ := Linearizable(c.calls, 5*time.Second)
		if r.Verdict != c.want {
			t.Errorf("%s: verdict %s (%s), want %s", c.name, r.Verdict, r.Summary, c.want)
		}
	}
}

func TestNoLostSubmissions(t *testing.T) {
	calls := []history.Call{
		call(0, history.Submit, "a", 0, 1, history.OK, nil),
		call(0, history.Submit, "b", 1, 2, history.Info, nil),
		call(1, history.Submit, "c", 1, 2, history.OK, nil),
	}
	ok := NoLostSubmissions(calls, map[string]FinalRead{"a": {Found: true}, "b": {Found: false}, "c": {Found: true}})
	if ok.Verdict != Pass || ok.Counts["acknowledged"] != 2 || ok.Counts["indeterminate"] != 1 {
		t.Fatalf("clean history: %+v", ok)
	}
	lost := NoLostSubmissions(calls, map[string]FinalRead{"a": {Found: true}, "c": {Found: false}})
	if lost.Verdict != Fail || lost.Counts["lost"] != 1 {
		t.Fatalf("lost job not caught: %+v", lost)
	}
	unverified := NoLostSubmissions(calls, map[string]FinalRead{"a": {Err: "deadline"}, "c": {Found: true}})
	if unverified.Verdict != Fail || unverified.Counts["unverified"] != 1 {
		t.Fatalf("unverified job not reported: %+v", unverified)
	}
}

func TestNoConcurrentAttempts(t *testing.T) {
	end := at(100)
	clean := []TaskEvent{
		start("tm1", "map", 0, "a1", 0, 1, 1), stop("tm1", "map", 0, "a1", 10),
		start("tm2", "map", 0, "a2", 1, 2, 10), // starts exactly when a1 stopped
		start("tm1", "map", 1, "b1", 0, 1, 1),
	}
	if r := NoConcurrentAttempts(clean, nil, end); r.Verdict != Pass {
		t.Fatalf("clean log: %+v", r)
	}
	overlap := []TaskEvent{
		start("tm1", "map", 0, "a1", 0, 1, 1), stop("tm1", "map", 0, "a1", 12),
		start("tm2", "map", 0, "a2", 1, 2, 10),
	}
	if r := NoConcurrentAttempts(overlap, nil, end); r.Verdict != Fail || r.Counts["overlaps"] != 1 {
		t.Fatalf("overlap not caught: %+v", r)
	}
	// tm1 was killed at 5s: its attempt ended with the process, no overlap.
	killed := []TaskEvent{start("tm1", "map", 0, "a1", 0, 1, 1), start("tm2", "map", 0, "a2", 1, 2, 10)}
	life := map[string][]Window{"tm1": {{Start: at(0), End: at(5)}, {Start: at(8)}}}
	if r := NoConcurrentAttempts(killed, life, end); r.Verdict != Pass {
		t.Fatalf("attempt of a killed TM kept running: %+v", r)
	}
	if r := NoConcurrentAttempts(killed, nil, end); r.Verdict != Fail {
		t.Fatalf("open attempt without lifetime should run to the end: %+v", r)
	}
	stale := []TaskEvent{start("tm1", "map", 0, "a1", 0, 3, 1), start("tm1", "map", 1, "b2", 1, 2, 4)}
	if r := NoConcurrentAttempts(stale, nil, end); r.Verdict != Fail || r.Counts["stale-epoch-starts"] != 1 {
		t.Fatalf("stale epoch not caught: %+v", r)
	}
	// After a TM restart the epoch memory starts over.
	life = map[string][]Window{"tm1": {{Start: at(0), End: at(2)}, {Start: at(3)}}}
	if r := NoConcurrentAttempts(stale, life, end); r.Counts["stale-epoch-starts"] != 0 {
		t.Fatalf("epoch carried over a restart: %+v", r)
	}
}

func TestParseEvents(t *testing.T) {
	log := `{"ts":"2024-01-02T03:04:05.5Z","tm":"tm1","event":"start","job":"j","vertex":"map","subtask":1,"attempt_id":"a","attempt_number":0,"epoch":2}
{"ts":1704164646000,"tm":"tm1","event":"stop","job":"j","vertex":"map","subtask":1,"attempt_id":"a","state":"CANCELED"}
{"ts":17041646`
	evs, err := ParseEvents(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].Epoch != 2 || evs[1].TS.Sub(evs[0].TS) != 500*time.Millisecond {
		t.Fatalf("events = %+v", evs)
	}
}

func streamGraph() *pb.JobGraph {
	fwd := func(a, b string) *pb.JobEdge {
		return &pb.JobEdge{Source: a, Target: b, Distribution: pb.Distribution_DISTRIBUTION_FORWARD}
	}
	return &pb.JobGraph{Vertices: []*pb.JobVertex{{Id: "src", Parallelism: 2}, {Id: "map", Parallelism: 2}, {Id: "sink", Parallelism: 2}},
		Edges: []*pb.JobEdge{fwd("src", "map"), fwd("map", "sink")}}
}

func TestRegions(t *testing.T) {
	r := Regions(streamGraph())
	if r["src/0"] != r["sink/0"] || r["src/0"] == r["src/1"] || r["map/1"] != r["sink/1"] {
		t.Fatalf("regions = %v", r)
	}
	g := streamGraph()
	g.Edges[1].Distribution = pb.Distribution_DISTRIBUTION_ALL_TO_ALL
	if r := Regions(g); r["src/0"] != r["src/1"] {
		t.Fatalf("all-to-all should join regions: %v", r)
	}
}

func TestRestarts(t *testing.T) {
	base := []TaskEvent{
		start("tm1", "src", 0, "s0", 0, 1, 1), start("tm1", "map", 0, "m0", 0, 1, 1), start("tm2", "sink", 0, "k0", 0, 1, 1),
		start("tm3", "src", 1, "s1", 0, 1, 1), start("tm3", "map", 1, "m1", 0, 1, 1), start("tm3", "sink", 1, "k1", 0, 1, 1),
	}
	in := RestartInput{JobID: "j", Graph: streamGraph(), Events: base, JMOnly: true, FinalRestarts: 0}
	if r := Restarts(in); r.Verdict != Pass {
		t.Fatalf("no restart: %+v", r)
	}
	in.Events = append(append([]TaskEvent(nil), base...), start("tm1", "src", 0, "s0b", 1, 2, 20))
	if r := Restarts(in); r.Verdict != Fail {
		t.Fatalf("restart under JM-only faults not caught: %+v", r)
	}
	in.JMOnly, in.AffectedTMs = false, []string{"tm2"} // tm2 held sink/0: region 0 may restart
	if r := Restarts(in); r.Verdict != Pass {
		t.Fatalf("restart of an affected region refused: %+v", r)
	}
	in.Events = append(in.Events, start("tm3", "map", 1, "m1b", 1, 2, 20))
	if r := Restarts(in); r.Verdict != Fail || r.Counts["outside-affected-regions"] != 1 {
		t.Fatalf("restart outside affected regions not caught: %+v", r)
	}
	in = RestartInput{JobID: "j", Graph: streamGraph(), Events: base, JMOnly: true, FinalRestarts: 2}
	if r := Restarts(in); r.Verdict != Fail {
		t.Fatalf("job record restarts ignored: %+v", r)
	}
}

func TestStateHashes(t *testing.T) {
	round := func(samples ...HashSample) HashRound { return HashRound{Time: t0, Samples: samples} }
	equal := round(HashSample{Node: "jm1", Hash: "x", Applied: 9}, HashSample{Node: "jm2", Hash: "x", Applied: 9}, HashSample{Node: "jm3", Hash: "x", Applied: 9})
	lagging := round(HashSample{Node: "jm1", Hash: "x", Applied: 9}, HashSample{Node: "jm2", Hash: "y", Applied: 8}, HashSample{Node: "jm3", Hash: "x", Applied: 9})
	diverged := round(HashSample{Node: "jm1", Hash: "x", Applied: 9}, HashSample{Node: "jm2", Hash: "z", Applied: 9}, HashSample{Node: "jm3", Hash: "x", Applied: 9})
	if r := StateHashes([]HashRound{lagging, equal}, 3); r.Verdict != Pass {
		t.Fatalf("converged: %+v", r)
	}
	if r := StateHashes([]HashRound{lagging, diverged}, 3); r.Verdict != Fail {
		t.Fatalf("divergence not caught: %+v", r)
	}
	if r := StateHashes([]HashRound{lagging}, 3); r.Verdict != Fail {
		t.Fatalf("never converged not caught: %+v", r)
	}
}

func TestRunningAfterHeal(t *testing.T) {
	s := []StatusSample{{Time: at(1), Status: "JOB_STATUS_RUNNING"}, {Time: at(11), Status: "JOB_STATUS_RECONCILING"}, {Time: at(14), Status: "JOB_STATUS_RUNNING"}}
	if r := RunningAfterHeal(s, at(10), 10*time.Second); r.Verdict != Pass || r.Counts["ms-to-running"] != 4000 {
		t.Fatalf("running after heal: %+v", r)
	}
	if r := RunningAfterHeal(s, at(10), 2*time.Second); r.Verdict != Fail {
		t.Fatalf("late RUNNING not caught: %+v", r)
	}
	if r := RunningAfterHeal(s[:2], at(10), 10*time.Second); r.Verdict != Fail {
		t.Fatalf("never RUNNING not caught: %+v", r)
	}
}

func TestSinkContinuity(t *testing.T) {
	doc := func(sub int32, last int64, gaps, dups int64, attempts ...string) SinkFile {
		return SinkFile{TM: "tm1", Doc: Checksum{Job: "j", Vertex: "sink", Subtask: sub, Attempts: attempts,
			Origins: map[string]OriginStat{"0": {Count: last + 1 + dups, FirstSeq: 0, LastSeq: last, Gaps: gaps, Duplicates: dups}}}}
	}
	heal := []SinkFile{doc(0, 100, 0, 0, "a"), doc(1, 100, 0, 0, "b")}
	in := SinkInput{JobID: "j", Subtasks: 2, JMOnly: true, AtHeal: heal, End: []SinkFile{doc(0, 500, 0, 0, "a"), doc(1, 500, 0, 0, "b")}}
	if r := SinkContinuity(in); r.Verdict != Pass {
		t.Fatalf("clean sink: %+v", r)
	}
	for name, end := range map[string][]SinkFile{
		"gap":         {doc(0, 500, 1, 0, "a"), doc(1, 500, 0, 0, "b")},
		"duplicate":   {doc(0, 500, 0, 3, "a"), doc(1, 500, 0, 0, "b")},
		"restart":     {doc(0, 500, 0, 0, "a", "a2"), doc(1, 500, 0, 0, "b")},
		"no progress": {doc(0, 100, 0, 0, "a"), doc(1, 500, 0, 0, "b")},
		"missing":     {doc(0, 500, 0, 0, "a")},
	} {
		in.End = end
		if r := SinkContinuity(in); r.Verdict != Fail {
			t.Errorf("%s not caught: %+v", name, r)
		}
	}
	in.JMOnly = false
	if r := SinkContinuity(in); r.Verdict != Skipped {
		t.Fatalf("TM faults should skip: %+v", r)
	}
}
