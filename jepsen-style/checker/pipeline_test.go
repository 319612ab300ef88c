package checker

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jmcluster/jmcluster/internal/pipelinecheck"
)

// pipelineClicks: user a clicks in windows 0, 2000 and 4000 (2, 1, 1 clicks), user b in
// window 2000 only.
func pipelineClicks() []pipelinecheck.Click {
	return []pipelinecheck.Click{
		{User: "a", Amount: 3, TS: 100}, {User: "a", Amount: 4, TS: 1999}, {User: "b", Amount: 5, TS: 2000},
		{User: "a", Amount: 1, TS: 2500}, {User: "a", Amount: 2, TS: 4000},
	}
}

func pipelineRows() []PipelineRow {
	return []PipelineRow{
		{User: "a", Start: 0, Count: 2, Sum: 7, Ordinal: 1, ID: "j/out/0/3/0"},
		{User: "a", Start: 2000, Count: 1, Sum: 1, Ordinal: 2, ID: "j/out/0/4/0"},
		{User: "b", Start: 2000, Count: 1, Sum: 5, Ordinal: 1, ID: "j/out/1/4/0"},
		{User: "a", Start: 4000, Count: 1, Sum: 2, Ordinal: 3, ID: "j/out/0/5/0"},
	}
}

func TestPipelineCheckers(t *testing.T) {
	edit := func(f func(rows []PipelineRow) []PipelineRow) []PipelineRow { return f(pipelineRows()) }
	cases := []struct {
		name       string
		rows       []PipelineRow
		unparsed   []string
		readErr    string
		dead       []string
		lateStored []pipelinecheck.Lineage
		tableWant  string // "" passes; else a problem holding it
		// streamWant is the stream checker's (the same unless set).
		streamWant string
	}{
		{name: "every window once", rows: pipelineRows()},
		{name: "in another order", rows: edit(func(r []PipelineRow) []PipelineRow { r[0], r[3] = r[3], r[0]; return r })},
		{name: "a window missing", rows: pipelineRows()[:3], tableWant: "missing a 4000"},
		{name: "a window twice", rows: append(pipelineRows(), PipelineRow{User: "b", Start: 2000, Count: 1, Sum: 5, Ordinal: 1, ID: "j/out/1/9/0"}),
			tableWant: "b 2000 written 2 times"},
		{name: "the same message id twice", rows: edit(func(r []PipelineRow) []PipelineRow { r[1].ID = r[0].ID; return r }),
			streamWant: "message id j/out/0/3/0 2 times"},
		{name: "a wrong count", rows: edit(func(r []PipelineRow) []PipelineRow { r[0].Count = 3; return r }), tableWant: "a 0: 3 clicks, amount 7; want 2, 7"},
		{name: "a wrong sum", rows: edit(func(r []PipelineRow) []PipelineRow { r[2].Sum = 6; return r }), tableWant: "b 2000: 1 clicks, amount 6; want 1, 5"},
		{name: "a row nothing was published in", rows: append(pipelineRows(), PipelineRow{User: "c", Start: 0, Count: 1, Sum: 1, Ordinal: 1, ID: "x"}),
			tableWant: "unexpected window c 0"},
		{name: "an ordinal repeated (a state write lost)", rows: edit(func(r []PipelineRow) []PipelineRow { r[3].Ordinal = 2; return r }),
			tableWant: "a 4000: ordinal 2, want 3"},
		{name: "ordinals from 0", rows: edit(func(r []PipelineRow) []PipelineRow {
			for i := range r {
				r[i].Ordinal--
			}
			return r
		}), tableWant: "a 0: ordinal 0, want 1"},
		{name: "unreadable", readErr: "connection refused", tableWant: "could not read"},
		{name: "a dead letter", rows: pipelineRows(), dead: []string{`{"user":"a","amount":1,"ts":5}`}, tableWant: "dead letter: {"},
		{name: "a late click in the dead letters (dropped, as it must be)", rows: pipelineRows(),
			dead: []string{`tm3: {"reason":"late: window [-10000, -8000) of a closed at watermark 5000","vertex":"windows","subtask":1,"key":"a","value":"{\"user\":\"a\",\"amount\":1,\"ts\":-9000,\"late\":true}","time":-9000,"origin":0,"seq":140}`}},
		{name: "every late click of the stream once in the dead letters", rows: pipelineRows(),
			dead: []string{lateDL(0, 140), lateDL(1, 141)}, lateStored: []pipelinecheck.Lineage{{Origin: 1, Seq: 141}, {Origin: 0, Seq: 140}}},
		{name: "a late click twice in the dead letters", rows: pipelineRows(),
			dead: []string{lateDL(0, 140), lateDL(0, 140)}, lateStored: []pipelinecheck.Lineage{{Origin: 0, Seq: 140}},
			tableWant: "late click (origin 0, seq 140) in the committed dead letters 2 times"},
		{name: "a late click twice, the stream unread", rows: pipelineRows(),
			dead: []string{lateDL(0, 140), lateDL(0, 140)}, tableWant: "late click (origin 0, seq 140) in the committed dead letters 2 times"},
		{name: "a late click of the stream missing from the dead letters", rows: pipelineRows(),
			dead: []string{lateDL(0, 140)}, lateStored: []pipelinecheck.Lineage{{Origin: 0, Seq: 140}, {Origin: 1, Seq: 141}},
			tableWant: "late click (origin 1, seq 141) of the clicks stream not in the committed dead letters"},
		{name: "a late dead letter the stream holds no late click for", rows: pipelineRows(),
			dead: []string{lateDL(0, 140)}, lateStored: []pipelinecheck.Lineage{},
			tableWant: "a dead letter of a late click (origin 0, seq 140) the clicks stream does not hold as late"},
		{name: "a late click refused for another reason", rows: pipelineRows(),
			dead:      []string{`tm3: {"reason":"no field amount","vertex":"windows","subtask":1,"key":"a","value":"{\"user\":\"a\",\"amount\":1,\"ts\":-9000,\"late\":true}"}`},
			tableWant: "dead letter: tm3: {"},
		{name: "a late click counted (a window task restored without its watermark)",
			rows:      append(pipelineRows(), PipelineRow{User: "a", Start: -10000, Count: 1, Sum: 1, Ordinal: 1, ID: "j/out/0/7/0"}),
			tableWant: "unexpected window a -10000"},
		{name: "an on-time click in the dead letters beside a late one", rows: pipelineRows(),
			dead: []string{`tm3: {"user":"a","amount":1,"ts":-9000,"late":true}`, `tm3: {"user":"a","amount":1,"ts":5}`}, tableWant: `dead letter: tm3: {"user":"a","amount":1,"ts":5}`},
		{name: "a message that is not a window result", rows: pipelineRows(), unparsed: []string{"sequence 9: not JSON"},
			tableWant: "", streamWant: "sequence 9: not JSON"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := PipelineInput{WindowMs: 2000, Published: pipelineClicks(), Rows: c.rows, Unparsed: c.unparsed, ReadErr: c.readErr,
				DeadLetters: c.dead, LateStored: c.lateStored, Restarts: -1}
			streamWant := c.streamWant
			if streamWant == "" && c.unparsed == nil {
				streamWant = c.tableWant
			}
			tableRows := make([]PipelineRow, len(c.rows))
			for i, r := range c.rows {
				r.ID = ""
				tableRows[i] = r
			}
			tin := in
			tin.Rows, tin.Unparsed = tableRows, nil
			expect(t, PipelineTable(tin), c.tableWant)
			expect(t, PipelineStream(in), streamWant)
		})
	}
}

func expect(t *testing.T, r Result, want string) {
	t.Helper()
	if want == "" {
		if r.Verdict != Pass {
			t.Errorf("%s: %s, want pass: %s %v", r.Name, r.Verdict, r.Summary, r.Problems)
		}
		return
	}
	if r.Verdict != Fail {
		t.Errorf("%s: %s, want a failure naming %q: %s", r.Name, r.Verdict, want, r.Summary)
		return
	}
	if !strings.Contains(strings.Join(r.Problems, "\n"), want) {
		t.Errorf("%s: problems %q lack %q", r.Name, r.Problems, want)
	}
}

func TestPipelineCheckersCount(t *testing.T) {
	r := PipelineTable(PipelineInput{WindowMs: 2000, Published: pipelineClicks(), Rows: pipelineRows()})
	if r.Counts["published"] != 5 || r.Counts["windows"] != 4 || r.Counts["rows"] != 4 {
		t.Errorf("counts %v, want 5 published, 4 windows, 4 rows", r.Counts)
	}
}

// lateDL is the dead letter of a late click as the dead-letter file sink commits it.
func lateDL(origin int32, seq int64) string {
	return fmt.Sprintf(`tm3: {"reason":"late: window [-10000, -8000) of a closed at watermark 5000","vertex":"windows","subtask":1,"key":"a","value":"{\"user\":\"a\",\"amount\":1,\"ts\":-9000,\"late\":true}","time":-9000,"origin":%d,"seq":%d}`, origin, seq)
}
