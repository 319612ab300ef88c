package graph

import (
	"fmt"
	"testing"

	"github.com/jmcluster/jmcluster/transport/pb"
)

func describe(rs []Region) string {
	s := ""
	for _, r := range rs {
		s += fmt.Sprintf("%d:", r.ID)
		for _, m := range r.Members {
			s += fmt.Sprintf(" %s%d", m.VertexID, m.Subtask)
		}
		s += "; "
	}
	return s
}

func TestFailoverRegions(t *testing.T) {
	cases := []struct {
		name string
		jg   *pb.JobGraph
		want string
	}{
		{"forward pipelined", job([]*pb.JobVertex{source("a", 3, 0), sink("b", 3)}, fwd("a", "b")),
			"0: a0 b0; 1: a1 b1; 2: a2 b2; "},
		{"all-to-all pipelined", job([]*pb.JobVertex{source("a", 2, 0), sink("b", 3)}, all("a", "b")),
			"0: a0 a1 b0 b1 b2; "},
		{"forward blocking", job([]*pb.JobVertex{source("a", 2, 5), sink("b", 2)}, blocking(fwd("a", "b"))),
			"0: a0; 1: a1; 2: b0; 3: b1; "},
		{"all-to-all blocking", job([]*pb.JobVertex{source("a", 2, 5), sink("b", 2)}, blocking(all("a", "b"))),
			"0: a0; 1: a1; 2: b0; 3: b1; "},
		{"mixed", job([]*pb.JobVertex{source("a", 2, 5), mapper("m", 2), sink("s", 2)}, fwd("a", "m"), blocking(all("m", "s"))),
			"0: a0 m0; 1: a1 m1; 2: s0; 3: s1; "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := FailoverRegions(tc.jg)
			if err != nil {
				t.Fatal(err)
			}
			if got := describe(rs); got != tc.want {
				t.Errorf("regions = %s, want %s", got, tc.want)
			}
			for _, r := range rs {
				if len(r.Members) != cap(r.Members) {
					t.Errorf("region %d: %d members, room for %d (the leader keeps regions for its term)", r.ID, len(r.Members), cap(r.Members))
				}
			}
			tc.jg.FailoverStrategy = pb.FailoverStrategy_FAILOVER_STRATEGY_FULL
			full, err := FailoverRegions(tc.jg)
			if err != nil || len(full) != 1 || full[0].ID != 0 {
				t.Fatalf("full: %s %v", describe(full), err)
			}
			n := 0
			for _, v := range tc.jg.Vertices {
				n += int(v.Parallelism)
			}
			if len(full[0].Members) != n {
				t.Errorf("full region has %d members, want %d", len(full[0].Members), n)
			}
		})
	}
}

func TestRegionsMembersInGraphOrder(t *testing.T) {
	// Listed sink first; graph order is topological.
	jg := job([]*pb.JobVertex{sink("s", 1), source("a", 1, 0)}, fwd("a", "s"))
	rs, err := FailoverRegions(jg)
	if err != nil {
		t.Fatal(err)
	}
	if got := describe(rs); got != "0: a0 s0; " {
		t.Errorf("regions = %s", got)
	}
	r, ok := RegionOf(rs, SubtaskRef{"s", 0})
	if !ok || r.ID != 0 {
		t.Errorf("RegionOf = %v %v", r, ok)
	}
	if _, ok := RegionOf(rs, SubtaskRef{"s", 1}); ok {
		t.Errorf("RegionOf unknown subtask found")
	}
	if _, err := FailoverRegions(job([]*pb.JobVertex{mapper("a", 1), mapper("b", 1)}, fwd("a", "b"), fwd("b", "a"))); err == nil {
		t.Errorf("cycle accepted")
	}
}

func TestRegionsToRestart(t *testing.T) {
	// a(2) -fwd pipelined-> m(2) -all blocking-> s(2) -?; plus s -> nothing.
	// Regions: 0 {a0 m0}, 1 {a1 m1}, 2 {s0}, 3 {s1}.
	jg := job([]*pb.JobVertex{source("a", 2, 5), mapper("m", 2), sink("s", 2)}, fwd("a", "m"), blocking(all("m", "s")))
	rs, err := FailoverRegions(jg)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		failed []SubtaskRef
		want   string
	}{
		{[]SubtaskRef{{"s", 1}}, "3: s1; "},
		{[]SubtaskRef{{"a", 1}}, "1: a1 m1; 2: s0; 3: s1; "},
		{[]SubtaskRef{{"s", 0}, {"s", 1}}, "2: s0; 3: s1; "},
		{[]SubtaskRef{{"zz", 0}, {"s", 9}}, ""},
		{nil, ""},
	}
	for _, tc := range cases {
		if got := describe(RegionsToRestart(jg, rs, tc.failed)); got != tc.want {
			t.Errorf("RegionsToRestart(%v) = %s, want %s", tc.failed, got, tc.want)
		}
	}
	// Blocking forward chain: restarting the head invalidates each downstream region in turn.
	chain := job([]*pb.JobVertex{source("a", 2, 5), mapper("b", 2), sink("c", 2)}, blocking(fwd("a", "b")), blocking(fwd("b", "c")))
	crs, err := FailoverRegions(chain)
	if err != nil {
		t.Fatal(err)
	}
	if got := describe(RegionsToRestart(chain, crs, []SubtaskRef{{"a", 0}})); got != "0: a0; 2: b0; 4: c0; " {
		t.Errorf("chain restart = %s", got)
	}
}
