package checker

import (
	"testing"
	"time"
)

func TestStarvedLeaderHandsOver(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	mark := func(node string, s float64, kind string) StarveMark {
		return StarveMark{Node: node, Time: at(s), Kind: kind}
	}
	end := at(60)
	cases := []struct {
		name    string
		marks   []StarveMark
		verdict Verdict
	}{
		{"no stretch: skipped", nil, Skipped},
		{"starved, handed over 3 s later", []StarveMark{mark("jm2", 1, StarveBegins), mark("jm2", 4, StarveHandOver), mark("jm2", 4.1, StarveTermEnded)}, Pass},
		{"starved for 2 s, recovered by itself", []StarveMark{mark("jm2", 1, StarveBegins), mark("jm2", 3, StarveRecovered)}, Pass},
		{"starved for 20 s without a hand-over", []StarveMark{mark("jm2", 1, StarveBegins), mark("jm2", 21, StarveRecovered)}, Fail},
		{"starved to the end of the run", []StarveMark{mark("jm2", 1, StarveBegins)}, Fail},
		{"a hand-over only 8 s in is too late", []StarveMark{mark("jm2", 1, StarveBegins), mark("jm2", 9, StarveHandOver), mark("jm2", 9.1, StarveTermEnded)}, Fail},
		{"short stretches one after another, each in time", []StarveMark{mark("jm1", 1, StarveBegins), mark("jm1", 3, StarveRecovered), mark("jm1", 4, StarveBegins), mark("jm1", 7, StarveHandOver), mark("jm1", 7.2, StarveTermEnded)}, Pass},
		{"a stretch of another node is judged apart", []StarveMark{mark("jm1", 1, StarveBegins), mark("jm1", 4, StarveHandOver), mark("jm3", 10, StarveBegins), mark("jm3", 30, StarveTermEnded)}, Fail},
		{"the term ended while starved, in time", []StarveMark{mark("jm2", 1, StarveBegins), mark("jm2", 2, StarveTermEnded)}, Pass},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := StarvedLeaderHandsOver(c.marks, end, HandOverBound)
			if r.Verdict != c.verdict {
				t.Fatalf("verdict %s (%s %v), want %s", r.Verdict, r.Summary, r.Problems, c.verdict)
			}
		})
	}
}
