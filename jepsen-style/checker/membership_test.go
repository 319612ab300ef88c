package checker

import (
	"strings"
	"testing"
	"time"
)

// membershipRun builds the input of a run: jm2 removed at 1 s, jm4 a voter at 3 s, the heal at
// 5 s, jm2 restarted at 7 s, the restore from 9 to 10 s; every member reads its configuration
// each second until 12 s, and edit changes what was read.
func membershipRun(edit func(t0 time.Time, in *MembershipInput)) MembershipInput {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	in := MembershipInput{Removed: "jm2", Added: "jm4", RemovedAt: at(1), AddedAt: at(3), HealAt: at(5),
		RestartedAt: at(7), RestoreAt: at(9), RestoredAt: at(10), Members: []string{"jm1", "jm3", "jm4"}}
	for sec := 0; sec <= 12; sec++ {
		for _, n := range []string{"jm1", "jm2", "jm3", "jm4"} {
			s := ConfigSample{Time: at(float64(sec)), Node: n, Leader: "jm3"}
			switch {
			case n == "jm2":
				s.Voters, s.Leader = []string{"jm1", "jm2", "jm3"}, ""
			case n == "jm4" && sec < 3:
				s.Err = "connection refused"
			case sec < 1:
				s.Voters = []string{"jm1", "jm2", "jm3"}
			case sec < 3:
				s.Voters = []string{"jm1", "jm3"}
			default:
				s.Voters = []string{"jm1", "jm3", "jm4"}
			}
			in.Samples = append(in.Samples, s)
		}
	}
	in.Rounds = []HashRound{{Time: at(8), Samples: []HashSample{{Node: "jm1", Hash: "h", Applied: 9}, {Node: "jm3", Hash: "h", Applied: 9}, {Node: "jm4", Hash: "h", Applied: 9}}}}
	if edit != nil {
		edit(t0, &in)
	}
	return in
}

func TestMembershipChange(t *testing.T) {
	sec := func(t0 time.Time, s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	cases := []struct {
		name string
		edit func(t0 time.Time, in *MembershipInput)
		want string // a problem's text; "" for a pass
	}{
		{"clean", nil, ""},
		{"the added JM replaying old configurations is not a readmission", func(t0 time.Time, in *MembershipInput) {
			in.Samples = append(in.Samples, ConfigSample{Time: sec(t0, 3.5), Node: "jm4", Voters: []string{"jm1", "jm2", "jm3"}, Leader: "jm3"})
		}, ""},
		{"readmitted after the heal", func(t0 time.Time, in *MembershipInput) {
			in.Samples = append(in.Samples, ConfigSample{Time: sec(t0, 6), Node: "jm1", Voters: []string{"jm1", "jm2", "jm3", "jm4"}, Leader: "jm3"})
		}, "jm1's configuration holds the removed jm2 again"},
		{"still a voter at the end", func(t0 time.Time, in *MembershipInput) {
			for i := range in.Samples {
				if in.Samples[i].Node == "jm3" && in.Samples[i].Time.After(sec(t0, 10.5)) {
					in.Samples[i].Voters = []string{"jm1", "jm2", "jm3", "jm4"}
				}
			}
		}, "jm3's last configuration"},
		{"the added JM never a voter", func(_ time.Time, in *MembershipInput) { in.AddedAt = time.Time{} }, "did not happen"},
		{"a leader change after the heal", func(t0 time.Time, in *MembershipInput) {
			in.Samples = append(in.Samples, ConfigSample{Time: sec(t0, 6.5), Node: "jm1", Voters: []string{"jm1", "jm3", "jm4"}, Leader: "jm1"})
		}, "the leader changed 2 times"},
		{"a new term after the restore is the restore's", func(t0 time.Time, in *MembershipInput) {
			in.Samples = append(in.Samples, ConfigSample{Time: sec(t0, 9.5), Node: "jm1", Voters: []string{"jm1", "jm3", "jm4"}, Leader: "jm1"})
		}, ""},
		{"the added JM's hash differs", func(_ time.Time, in *MembershipInput) { in.Rounds[0].Samples[2].Hash = "x" }, "no final state-hash round"},
		{"never restarted", func(_ time.Time, in *MembershipInput) { in.RestartedAt = time.Time{} }, "never restarted"},
		{"the restore failed", func(_ time.Time, in *MembershipInput) { in.RestoreErr = "refused" }, "restore failed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := MembershipChange(membershipRun(c.edit))
			got := strings.Join(r.Problems, "; ")
			switch {
			case c.want == "" && r.Verdict != Pass:
				t.Fatalf("verdict %s: %s", r.Verdict, got)
			case c.want != "" && (r.Verdict != Fail || !strings.Contains(got, c.want)):
				t.Fatalf("verdict %s: %q, want a problem with %q", r.Verdict, got, c.want)
			}
		})
	}
}
