package jobmaster

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// regionTasks lists the first attempts of every region of jg, region by region in graph order,
// as the plan's first deployment does.
func regionTasks(t testing.TB, jg *pb.JobGraph) []deployTask {
	t.Helper()
	regions, err := graph.FailoverRegions(jg)
	if err != nil {
		t.Fatal(err)
	}
	var out []deployTask
	for _, r := range regions {
		for _, m := range r.Members {
			out = append(out, deployTask{vertexID: m.VertexID, subtask: m.Subtask, region: r.ID})
		}
	}
	return out
}

// renderByRegion renders a placement region by region: "r0: source[0]@tm1/0 ...; r1: ...".
func renderByRegion(tasks []deployTask, ps []placement, err error) string {
	if err != nil {
		return renderPlacement(nil, err)
	}
	var b strings.Builder
	for i, task := range tasks {
		if i == 0 || tasks[i-1].region != task.region {
			if i > 0 {
				b.WriteString("; ")
			}
			fmt.Fprintf(&b, "r%d:", task.region)
		}
		fmt.Fprintf(&b, " %s[%d]@%s/%d", task.vertexID, task.subtask, ps[i].tm.ID, ps[i].slot)
	}
	return b.String()
}

// allToAll is src -> sink, ALL_TO_ALL and PIPELINED, parallelism p each: one region.
func allToAll(p int32) *pb.JobGraph {
	jg := planChain(p)
	jg.Vertices = []*pb.JobVertex{jg.Vertices[0], jg.Vertices[2]}
	jg.Edges = []*pb.JobEdge{{Source: "source", Target: "sink", Distribution: pb.Distribution_DISTRIBUTION_ALL_TO_ALL, ResultType: pb.ResultType_RESULT_TYPE_PIPELINED}}
	return jg
}

// TestPlaceKeepsRegionsTogetherAndSpreadsThem: a region's tasks share slots (one subtask of each
// vertex per slot, the ends of a FORWARD edge in one slot), a region goes whole to the TM with
// the most free slots, regions spread over the TMs, a region too large for any TM is split
// over the fewest TMs in runs of consecutive subtasks, and with too few free slots nothing is
// placed.
func TestPlaceKeepsRegionsTogetherAndSpreadsThem(t *testing.T) {
	restart := func(region int, members ...string) []deployTask {
		var out []deployTask
		for _, m := range members {
			var v string
			var i int32
			fmt.Sscanf(strings.Replace(m, "[", " ", 1), "%s %d]", &v, &i)
			out = append(out, deployTask{vertexID: v, subtask: i, number: 1, region: region})
		}
		return out
	}
	cases := []struct {
		name  string
		tms   []TaskManager
		used  map[string]map[int32]bool
		tasks []deployTask
		want  string
	}{
		{"the demo job: one region per TM, one slot each", planTMs(4, 4, 4), nil, regionTasks(t, planChain(3)),
			"r0: source[0]@tm1/0 map[0]@tm1/0 sink[0]@tm1/0; r1: source[1]@tm2/0 map[1]@tm2/0 sink[1]@tm2/0; r2: source[2]@tm3/0 map[2]@tm3/0 sink[2]@tm3/0"},
		{"more regions than TMs: round the TMs by free slots", planTMs(2, 2), nil, regionTasks(t, planChain(3)),
			"r0: source[0]@tm1/0 map[0]@tm1/0 sink[0]@tm1/0; r1: source[1]@tm2/0 map[1]@tm2/0 sink[1]@tm2/0; r2: source[2]@tm1/1 map[2]@tm1/1 sink[2]@tm1/1"},
		{"a restarted region goes to the TM with the most free slots", planTMs(4, 4), map[string]map[int32]bool{"tm1": {0: true, 1: true}},
			restart(1, "source[1]", "map[1]", "sink[1]"), "r1: source[1]@tm2/0 map[1]@tm2/0 sink[1]@tm2/0"},
		{"skip used slots", planTMs(3), map[string]map[int32]bool{"tm1": {0: true, 2: true}},
			restart(0, "source[0]", "map[0]"), "r0: source[0]@tm1/1 map[0]@tm1/1"},
		{"ALL_TO_ALL: one region, subtask k of each vertex in slot k", planTMs(2, 3), nil, regionTasks(t, allToAll(3)),
			"r0: source[0]@tm2/0 source[1]@tm2/1 source[2]@tm2/2 sink[0]@tm2/0 sink[1]@tm2/1 sink[2]@tm2/2"},
		{"a region larger than any TM is split over the fewest TMs, in runs", planTMs(2, 3, 1), nil, regionTasks(t, allToAll(5)),
			"r0: source[0]@tm2/0 source[1]@tm2/1 source[2]@tm2/2 source[3]@tm1/0 source[4]@tm1/1 sink[0]@tm2/0 sink[1]@tm2/1 sink[2]@tm2/2 sink[3]@tm1/0 sink[4]@tm1/1"},
		{"largest region first, then the smaller ones around it", planTMs(3, 2), nil,
			append(restart(1, "source[1]", "map[1]"), restart(5, "source[0]", "source[1]", "sink[0]", "sink[1]")...),
			"r1: source[1]@tm2/0 map[1]@tm2/0; r5: source[0]@tm1/0 source[1]@tm1/1 sink[0]@tm1/0 sink[1]@tm1/1"},
		{"exactly full", planTMs(1, 1), nil, regionTasks(t, allToAll(2)),
			"r0: source[0]@tm1/0 source[1]@tm2/0 sink[0]@tm1/0 sink[1]@tm2/0"},
		{"one slot too many", planTMs(1, 1), nil, regionTasks(t, allToAll(3)),
			"wait: jobmaster: not enough free slots: 3 slots needed (6 tasks in 1 regions, sharing slots), 2 free on 2 task managers"},
		{"used slots of an unknown TM do not count", planTMs(1), map[string]map[int32]bool{"gone": {0: true}},
			restart(0, "source[0]"), "r0: source[0]@tm1/0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ps, err := place(tc.tms, tc.used, tc.tasks)
			if got := renderByRegion(tc.tasks, ps, err); got != tc.want {
				t.Fatalf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

// BenchmarkPlace100k places the first deployment of a 3 x 33,334 FORWARD chain (100,002
// tasks in 33,334 regions, one shared slot each) on 40 TMs of 1,024 slots: the cost of one
// deployment's placement at the default execution limit.
func BenchmarkPlace100k(b *testing.B) {
	tasks := regionTasks(b, planChain(33334))
	slots := make([]int32, 40)
	for i := range slots {
		slots[i] = 1024
	}
	tms := planTMs(slots...)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if ps, err := place(tms, nil, tasks); err != nil || len(ps) != len(tasks) {
			b.Fatalf("%d placements, %v", len(ps), err)
		}
	}
}

// BenchmarkPlaceWide places a 512 x 512 ALL_TO_ALL region (one region, 512 slots) on three TMs
// of 400 slots: the wide job, split over two TMs.
func BenchmarkPlaceWide(b *testing.B) {
	tasks := regionTasks(b, allToAll(512))
	tms := planTMs(400, 400, 400)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if ps, err := place(tms, nil, tasks); err != nil || len(ps) != len(tasks) {
			b.Fatalf("%d placements, %v", len(ps), err)
		}
	}
}
