package client

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// A step of a stall table: at second T, the round the monitor saw and the open operations;
// want is the action the detector must return.
type stallStep struct {
	t     float64 // seconds since the start
	round []Observation
	open  int
	want  StallAction
}

// obsOf builds a round: "jm1:L:5:100:99" is jm1, leader (L) or follower naming jm1 (F1, F2,
// F3), epoch 5, commit 100, applied 99; "jm2:down" failed to answer.
func obsOf(specs ...string) []Observation {
	var out []Observation
	for _, s := range specs {
		f := strings.Split(s, ":")
		o := Observation{Node: f[0]}
		if f[1] == "down" {
			o.Err = "context deadline exceeded"
			out = append(out, o)
			continue
		}
		var epoch, commit, applied uint64
		fmt.Sscan(f[2], &epoch)
		fmt.Sscan(f[3], &commit)
		fmt.Sscan(f[4], &applied)
		o.Epoch, o.Commit, o.Applied = epoch, commit, applied
		if f[1] == "L" {
			o.RaftState, o.LeaderID = "Leader", o.Node
		} else {
			o.RaftState, o.LeaderID = "Follower", "jm"+strings.TrimPrefix(f[1], "F")
		}
		out = append(out, o)
	}
	return out
}

// healthy is a leader jm1 at epoch 5 and two followers, all at commit c, applied c.
func healthy(c int) []Observation {
	return obsOf(fmt.Sprintf("jm1:L:5:%d:%d", c, c), fmt.Sprintf("jm2:F1:5:%d:%d", c, c), fmt.Sprintf("jm3:F1:5:%d:%d", c, c))
}

func TestStallDetectorDecision(t *testing.T) {
	cases := []struct {
		name  string
		steps []stallStep
	}{
		{"a leader that commits is never stalled", []stallStep{
			{0, healthy(10), 3, StallNone}, {5, healthy(20), 3, StallNone}, {10, healthy(30), 3, StallNone},
			{15, healthy(40), 3, StallNone}, {20, healthy(50), 3, StallNone},
		}},
		{"stuck for 10 s with clients waiting: dump", []stallStep{
			{0, healthy(10), 1, StallNone}, {5, healthy(10), 1, StallNone}, {9.9, healthy(10), 1, StallNone},
			{10, healthy(10), 1, StallDump}, {12, healthy(10), 1, StallNone},
		}},
		{"stuck but nobody waits: no stall (an idle cluster commits nothing)", []stallStep{
			{0, healthy(10), 0, StallNone}, {11, healthy(10), 0, StallNone}, {30, healthy(10), 0, StallNone},
			{31, healthy(10), 2, StallDump},
		}},
		{"commit moves, applied does not (a stuck FSM): dump", []stallStep{
			{0, obsOf("jm1:L:5:10:10"), 1, StallNone}, {4, obsOf("jm1:L:5:20:10"), 1, StallNone},
			{8, obsOf("jm1:L:5:30:10"), 1, StallNone}, {10, obsOf("jm1:L:5:40:10"), 1, StallDump},
		}},
		{"the stall ends when the leader commits and applies again", []stallStep{
			{0, healthy(10), 1, StallNone}, {10, healthy(10), 1, StallDump}, {20, healthy(10), 1, StallNone},
			{21, obsOf("jm1:L:5:11:10"), 1, StallNone}, // commit rose, applied still stuck
			{22, healthy(11), 1, StallEnd}, {40, healthy(12), 1, StallNone},
		}},
		{"a long stall is dumped again every 30 s, three times at most", []stallStep{
			{0, healthy(10), 1, StallNone}, {10, healthy(10), 1, StallDump}, {39, healthy(10), 1, StallNone},
			{40, healthy(10), 1, StallDump}, {70, healthy(10), 1, StallDump}, {100, healthy(10), 1, StallNone},
			{130, healthy(10), 1, StallNone}, {131, healthy(11), 1, StallEnd},
		}},
		{"a silent leader its followers name is watched through them (the 110 s stall)", []stallStep{
			{0, healthy(10), 1, StallNone},
			{4, obsOf("jm1:down", "jm2:F1:5:10:10", "jm3:F1:5:10:10"), 1, StallNone},
			{10, obsOf("jm1:down", "jm2:F1:5:10:10", "jm3:F1:5:10:10"), 1, StallDump},
		}},
		{"followers that still apply show the silent leader commits", []stallStep{
			{0, healthy(10), 1, StallNone},
			{6, obsOf("jm1:down", "jm2:F1:5:15:15", "jm3:F1:5:14:14"), 1, StallNone},
			{12, obsOf("jm1:down", "jm2:F1:5:20:20", "jm3:F1:5:20:19"), 1, StallNone},
		}},
		{"an election resets the watch: a new leader is not stalled by its predecessor's silence", []stallStep{
			{0, healthy(10), 1, StallNone}, {8, healthy(10), 1, StallNone},
			{9, obsOf("jm1:down", "jm2:L:6:10:10", "jm3:F2:6:10:10"), 1, StallNone},
			{12, obsOf("jm1:down", "jm2:L:6:10:10", "jm3:F2:6:10:10"), 1, StallNone},
			{19, obsOf("jm1:down", "jm2:L:6:10:10", "jm3:F2:6:10:10"), 1, StallDump},
		}},
		{"a new leader during a stall ends it", []stallStep{
			{0, healthy(10), 1, StallNone}, {10, healthy(10), 1, StallDump},
			{12, obsOf("jm1:down", "jm2:L:6:11:11", "jm3:F2:6:11:11"), 1, StallEnd},
		}},
		{"no leader to be made out changes nothing", []stallStep{
			{0, healthy(10), 1, StallNone},
			{3, obsOf("jm1:down", "jm2:down", "jm3:down"), 1, StallNone},
			{10, obsOf("jm1:down", "jm2:down", "jm3:down"), 1, StallNone},
			{11, healthy(10), 1, StallDump},
		}},
		{"a follower behind on the epoch is not a new term", []stallStep{
			{0, healthy(10), 1, StallNone},
			{5, obsOf("jm1:down", "jm2:F1:4:10:10", "jm3:F1:4:10:10"), 1, StallNone},
			{10, obsOf("jm1:down", "jm2:F1:4:10:10", "jm3:F1:4:10:10"), 1, StallDump},
		}},
		{"two leaders claimed: the higher epoch is the leader", []stallStep{
			{0, obsOf("jm1:L:5:10:10", "jm2:L:6:10:10"), 1, StallNone},
			{5, obsOf("jm1:L:5:10:10", "jm2:L:6:20:20"), 1, StallNone},
			{12, obsOf("jm1:L:5:10:10", "jm2:L:6:30:30"), 1, StallNone},
		}},
	}
	start := time.Date(2026, 12, 5, 22, 0, 0, 0, time.UTC)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := NewStallDetector(StallConfig{})
			for i, s := range tc.steps {
				at := start.Add(time.Duration(s.t * float64(time.Second)))
				got, v := d.Observe(StallSample{Time: at, Round: s.round, OpenOps: s.open})
				if got != s.want {
					t.Fatalf("step %d (t=%gs): action %s, want %s (leader %s epoch %d commit %d applied %d since %s)",
						i, s.t, got, s.want, v.Leader, v.Epoch, v.Commit, v.Applied, v.Since.Sub(start))
				}
			}
		})
	}
}

func TestStallViewNamesTheSilentLeader(t *testing.T) {
	d := NewStallDetector(StallConfig{})
	start := time.Unix(0, 0)
	d.Observe(StallSample{Time: start, Round: healthy(7), OpenOps: 1})
	act, v := d.Observe(StallSample{Time: start.Add(10 * time.Second), Round: obsOf("jm1:down", "jm2:F1:5:7:7", "jm3:F1:5:7:7"), OpenOps: 1})
	if act != StallDump || v.Leader != "jm1" || v.Answered || v.Commit != 7 || !v.Since.Equal(start) {
		t.Fatalf("got %s %+v, want a dump naming jm1 (silent) at commit 7 since the start", act, v)
	}
}
