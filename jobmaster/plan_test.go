package jobmaster

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/transport/pb"
)

func TestNextSteps(t *testing.T) {
	now := time.UnixMilli(10_000)
	delay := func(ms int64) func(*pb.JobRecord) {
		return func(rec *pb.JobRecord) {
			rec.JobGraph.RestartStrategy = &pb.RestartStrategy{Kind: pb.RestartKind_RESTART_KIND_FIXED_DELAY, Attempts: 3, DelayMs: ms}
		}
	}
	consumable := func(rec *pb.JobRecord) {
		for _, res := range rec.ExecutionGraph.Results {
			for _, p := range res.Partitions {
				p.Consumable = true
			}
		}
	}
	cases := []struct {
		name      string
		rec       func(t *testing.T) *pb.JobRecord
		edit      func(rec *pb.JobRecord)
		restartAt map[int]time.Time
		// tms, when set, places every deployment on these TMs (nothing else in use) the way
		// the scheduler does before it commits the attempts.
		tms     []TaskManager
		used    map[string]map[int32]bool
		drained map[string]int64
		want    []string
	}{{
		name: "a new job starts",
		rec:  func(t *testing.T) *pb.JobRecord { return planJob(t, planChain(1), jobCreated, 0, nil) },
		want: []string{"status CREATED->RUNNING kick"},
	}, {
		name: "a running streaming job never deployed -> every region goes out in one deployment",
		rec:  func(t *testing.T) *pb.JobRecord { return planJob(t, planChain(2), jobRunning, 0, nil) },
		want: []string{"deploy new regions: source[0]#0 map[0]#0 sink[0]#0 source[1]#0 map[1]#0 sink[1]#0"},
	}, {
		name: "deployment placed on the TMs with the most free slots, a region sharing one slot",
		rec:  func(t *testing.T) *pb.JobRecord { return planJob(t, planChain(2), jobRunning, 0, nil) },
		tms:  planTMs(2, 2),
		used: map[string]map[int32]bool{"tm1": {0: true}},
		want: []string{"deploy new regions: source[0]#0 map[0]#0 sink[0]#0 source[1]#0 map[1]#0 sink[1]#0 -> tm2/0 tm2/0 tm2/0 tm1/1 tm1/1 tm1/1"},
	}, {
		name: "not enough free slots -> the deployment waits",
		rec:  func(t *testing.T) *pb.JobRecord { return planJob(t, planChain(1), jobRunning, 0, nil) },
		tms:  planTMs(1, 1),
		used: map[string]map[int32]bool{"tm1": {0: true}, "tm2": {0: true}},
		want: []string{"deploy new regions: source[0]#0 map[0]#0 sink[0]#0 -> wait: jobmaster: not enough free slots: 1 slots needed (3 tasks in 1 regions, sharing slots), 0 free on 2 task managers"},
	}, {
		name: "no usable TM -> the deployment waits",
		rec:  func(t *testing.T) *pb.JobRecord { return planJob(t, planChain(1), jobRunning, 0, nil) },
		tms:  []TaskManager{},
		want: []string{"deploy new regions: source[0]#0 map[0]#0 sink[0]#0 -> wait: jobmaster: not enough free slots: 1 slots needed (3 tasks in 1 regions, sharing slots), 0 free on 0 task managers"},
	}, {
		name: "a batch job deploys its sources; the sinks wait for the blocking result",
		rec:  func(t *testing.T) *pb.JobRecord { return planJob(t, planBatch(), jobRunning, 0, nil) },
		want: []string{"deploy new regions: source[0]#0 source[1]#0"},
	}, {
		name: "the blocking result not yet consumable -> nothing to do",
		rec: func(t *testing.T) *pb.JobRecord {
			return planJob(t, planBatch(), jobRunning, 0, map[string]pb.ExecutionState{"source[0]": stFinished, "source[1]": stRunning})
		},
		want: nil,
	}, {
		name: "the blocking result consumable -> the sinks go out",
		rec: func(t *testing.T) *pb.JobRecord {
			return planJob(t, planBatch(), jobRunning, 0, map[string]pb.ExecutionState{"source[0]": stFinished, "source[1]": stFinished})
		},
		edit: consumable,
		want: []string{"deploy new regions: sink[0]#0 sink[1]#0"},
	}, {
		name: "everything running -> nothing to do",
		rec:  func(t *testing.T) *pb.JobRecord { return planJob(t, planChain(2), jobRunning, 0, every(2, stRunning)) },
		want: nil,
	}, {
		name: "everything deploying or initializing -> nothing to do",
		rec: func(t *testing.T) *pb.JobRecord {
			return planJob(t, planChain(1), jobRunning, 0, with(every(1, stDeploying), "map[0]", pb.ExecutionState_EXECUTION_STATE_INITIALIZING))
		},
		want: nil,
	}, {
		name: "every task finished -> FINISHED",
		rec:  func(t *testing.T) *pb.JobRecord { return planJob(t, planChain(2), jobRunning, 0, every(2, stFinished)) },
		want: []string{"status RUNNING->FINISHED"},
	}, {
		name: "committed attempts whose DEPLOYING commit failed -> resume them, nothing else",
		rec: func(t *testing.T) *pb.JobRecord {
			return planJob(t, planChain(2), jobRunning, 0, with(every(2, stScheduled), "map[1]", stFailed))
		},
		want: []string{"resume source-0-a0 source-1-a0 map-0-a0 sink-0-a0 sink-1-a0"},
	}, {
		name: "a task failed, its region still runs -> cancel the survivors of that region only",
		rec: func(t *testing.T) *pb.JobRecord {
			return planJob(t, planChain(2), jobRunning, 0, with(every(2, stRunning), "map[1]", stFailed, "sink[1]", stCanceling))
		},
		want: []string{"cancel source-1-a0=CANCELING send source-1-a0@tm2:1 send sink-1-a0@tm2:1 (region restart: boom)"},
	}, {
		name: "survivors that never started are CANCELED at once; RECONCILING ones are left alone",
		rec: func(t *testing.T) *pb.JobRecord {
			return planJob(t, planChain(1), jobRunning, 0, map[string]pb.ExecutionState{"source[0]": stCreated, "map[0]": stFailed, "sink[0]": stReconciling})
		},
		want: []string{"cancel source-0-a0=CANCELED (region restart: boom)"},
	}, {
		name: "only RECONCILING survivors -> nothing to do yet",
		rec: func(t *testing.T) *pb.JobRecord {
			return planJob(t, planChain(1), jobRunning, 0, map[string]pb.ExecutionState{"source[0]": stReconciling, "map[0]": stFailed, "sink[0]": stReconciling})
		},
		want: nil,
	}, {
		name: "a stopped region with a FAILED member restarts as a whole (no delay)",
		rec: func(t *testing.T) *pb.JobRecord {
			return planJob(t, planChain(2), jobRunning, 1, with(every(2, stRunning), "source[0]", stFinished, "map[0]", stFailed, "sink[0]", stCanceled))
		},
		want: []string{"deploy region 0 restart: source[0]#2 map[0]#2 sink[0]#2"},
	}, {
		name: "a stopped region restart is placed like any deployment",
		rec: func(t *testing.T) *pb.JobRecord {
			return planJob(t, planChain(1), jobRunning, 0, with(every(1, stCanceled), "map[0]", stFailed))
		},
		tms:  planTMs(1, 1, 1),
		used: map[string]map[int32]bool{"tm1": {0: true}},
		want: []string{"deploy region 0 restart: source[0]#1 map[0]#1 sink[0]#1 -> tm2/0 tm2/0 tm2/0"},
	}, {
		name: "a region stopped only by cancellation is redeployed without counting a restart",
		rec: func(t *testing.T) *pb.JobRecord {
			return planJob(t, planChain(2), jobRunning, 0, with(every(2, stRunning), "source[1]", stCanceled, "map[1]", stCanceled, "sink[1]", stCanceled))
		},
		want: []string{"deploy region 1: source[1]#1 map[1]#1 sink[1]#1"},
	}, {
		name: "restart delay: first seen -> arm it, deploy nothing",
		rec: func(t *testing.T) *pb.JobRecord {
			return planJob(t, planChain(1), jobRunning, 0, with(every(1, stCanceled), "map[0]", stFailed))
		},
		edit: delay(500),
		want: []string{"arm region 0 until 10500"},
	}, {
		name: "restart delay armed and not passed -> wait",
		rec: func(t *testing.T) *pb.JobRecord {
			return planJob(t, planChain(1), jobRunning, 0, with(every(1, stCanceled), "map[0]", stFailed))
		},
		edit:      delay(500),
		restartAt: map[int]time.Time{0: now.Add(time.Millisecond)},
		want:      nil,
	}, {
		name: "restart delay passed -> restart the region",
		rec: func(t *testing.T) *pb.JobRecord {
			return planJob(t, planChain(1), jobRunning, 0, with(every(1, stCanceled), "map[0]", stFailed))
		},
		edit:      delay(500),
		restartAt: map[int]time.Time{0: now},
		want:      []string{"deploy region 0 restart: source[0]#1 map[0]#1 sink[0]#1"},
	}, {
		name: "restart budget exhausted -> FAILING",
		rec: func(t *testing.T) *pb.JobRecord {
			return planJob(t, planChain(1), jobRunning, 3, with(every(1, stCanceled), "map[0]", stFailed))
		},
		edit: func(rec *pb.JobRecord) { rec.Restarts = 3 },
		want: []string{"status RUNNING->FAILING (restart strategy exhausted after 3 restarts: boom)"},
	}, {
		name: "restart strategy NONE -> FAILING at the first failure",
		rec: func(t *testing.T) *pb.JobRecord {
			return planJob(t, planChain(1), jobRunning, 0, with(every(1, stCanceled), "map[0]", stFailed))
		},
		edit: func(rec *pb.JobRecord) {
			rec.JobGraph.RestartStrategy = &pb.RestartStrategy{Kind: pb.RestartKind_RESTART_KIND_NONE}
		},
		want: []string{"status RUNNING->FAILING (restart strategy exhausted after 0 restarts: boom)"},
	}, {
		name: "one region's survivors are cancelled while the regions ready in this pass restart together (one restart)",
		rec: func(t *testing.T) *pb.JobRecord {
			return planJob(t, planChain(3), jobRunning, 0, with(every(3, stRunning),
				"map[0]", stFailed, "source[1]", stFailed, "map[1]", stCanceled, "sink[1]", stCanceled,
				"source[2]", stFailed, "map[2]", stCanceled, "sink[2]", stCanceled))
		},
		tms:  planTMs(4, 4),
		used: map[string]map[int32]bool{"tm1": {0: true}},
		want: []string{
			"cancel source-0-a0=CANCELING sink-0-a0=CANCELING send source-0-a0@tm1:1 send sink-0-a0@tm1:1 (region restart: boom)",
			"deploy regions 1, 2 restart: source[1]#1 map[1]#1 sink[1]#1 source[2]#1 map[2]#1 sink[2]#1 -> tm2/0 tm2/0 tm2/0 tm1/1 tm1/1 tm1/1",
		},
	}, {
		name: "a region whose delay has not passed waits; the ready one restarts alone",
		rec: func(t *testing.T) *pb.JobRecord {
			return planJob(t, planChain(2), jobRunning, 0, with(every(2, stFailed)))
		},
		edit:      delay(500),
		restartAt: map[int]time.Time{0: now, 1: now.Add(time.Second)},
		want:      []string{"deploy region 0 restart: source[0]#1 map[0]#1 sink[0]#1"},
	}, {
		name: "a region restart goes before regions deployed for the first time",
		rec: func(t *testing.T) *pb.JobRecord {
			return planJob(t, planChain(2), jobRunning, 0, map[string]pb.ExecutionState{"source[1]": stFailed, "map[1]": stCanceled, "sink[1]": stCanceled})
		},
		want: []string{"deploy region 1 restart: source[1]#1 map[1]#1 sink[1]#1"},
	}, {
		name: "FAILING within the restart budget -> RESTARTING",
		rec:  func(t *testing.T) *pb.JobRecord { return planJob(t, planChain(1), jobFailing, 0, every(1, stFailed)) },
		want: []string{"status FAILING->RESTARTING (boom) kick"},
	}, {
		name: "FAILING past the budget with live tasks -> cancel them all",
		rec: func(t *testing.T) *pb.JobRecord {
			return planJob(t, planChain(1), jobFailing, 0, with(every(1, stRunning), "map[0]", stFailed))
		},
		edit: func(rec *pb.JobRecord) { rec.Restarts = 3 },
		want: []string{"cancel source-0-a0=CANCELING sink-0-a0=CANCELING send source-0-a0@tm1:1 send sink-0-a0@tm1:1 (job FAILING)"},
	}, {
		name: "FAILING past the budget, every task terminal -> FAILED",
		rec: func(t *testing.T) *pb.JobRecord {
			return planJob(t, planChain(1), jobFailing, 0, with(every(1, stCanceled), "map[0]", stFailed))
		},
		edit: func(rec *pb.JobRecord) { rec.Restarts = 3 },
		want: []string{"status FAILING->FAILED (boom)"},
	}, {
		name: "RESTARTING -> RUNNING",
		rec: func(t *testing.T) *pb.JobRecord {
			return planJob(t, planChain(1), jobRestarting, 0, every(1, stFailed))
		},
		want: []string{"status RESTARTING->RUNNING (restarting failed regions) kick"},
	}, {
		name: "CANCELLING -> cancel every live task, each the way its state needs",
		rec: func(t *testing.T) *pb.JobRecord {
			return planJob(t, planChain(2), jobCancelling, 0, with(every(2, stRunning),
				"source[0]", stCreated, "map[0]", stCanceling, "sink[0]", stReconciling, "source[1]", stFinished, "sink[1]", nil))
		},
		want: []string{"cancel source-0-a0=CANCELED map-1-a0=CANCELING send map-0-a0@tm1:1 send map-1-a0@tm2:1 (job CANCELLING)"},
	}, {
		name: "CANCELLING with only RECONCILING tasks live -> nothing to do yet, not CANCELED",
		rec: func(t *testing.T) *pb.JobRecord {
			return planJob(t, planChain(1), jobCancelling, 0, map[string]pb.ExecutionState{"source[0]": stReconciling, "map[0]": stCanceled})
		},
		want: nil,
	}, {
		name: "CANCELLING, every task terminal or never deployed -> CANCELED",
		rec: func(t *testing.T) *pb.JobRecord {
			return planJob(t, planChain(1), jobCancelling, 0, map[string]pb.ExecutionState{"source[0]": stFinished, "map[0]": stCanceled})
		},
		want: []string{"status CANCELLING->CANCELED (cancelled)"},
	}, {
		name:    "a region with tasks on a drained TM -> cancelled as a whole (no failure), the others left alone",
		rec:     func(t *testing.T) *pb.JobRecord { return planJob(t, planChain(2), jobRunning, 0, every(2, stRunning)) },
		drained: map[string]int64{"tm2": 1},
		want:    []string{"cancel source-1-a0=CANCELING map-1-a0=CANCELING sink-1-a0=CANCELING send source-1-a0@tm2:1 send map-1-a0@tm2:1 send sink-1-a0@tm2:1 (TaskManager tm2 is drained: its region moves)"},
	}, {
		name: "the drained region cancelled -> deployed again at once, no restart counted, placed off the drained TM",
		rec: func(t *testing.T) *pb.JobRecord {
			return planJob(t, planChain(2), jobRunning, 0, with(every(2, stRunning), "source[1]", stCanceled, "map[1]", stCanceled, "sink[1]", stCanceled))
		},
		edit:    delay(5000),
		drained: map[string]int64{"tm2": 1},
		tms:     planTMs(2),
		used:    map[string]map[int32]bool{"tm1": {0: true}},
		want:    []string{"deploy region 1: source[1]#1 map[1]#1 sink[1]#1 -> tm1/1 tm1/1 tm1/1"},
	}, {
		name: "a region moved off a drained TM restarts whole, its finished member too",
		rec: func(t *testing.T) *pb.JobRecord {
			return planJob(t, planChain(2), jobRunning, 0, with(every(2, stRunning), "source[1]", stFinished, "map[1]", stCanceled, "sink[1]", stCanceled))
		},
		drained: map[string]int64{"tm2": 1},
		want:    []string{"deploy region 1: source[1]#1 map[1]#1 sink[1]#1"},
	}, {
		name: "a drained TM with only finished tasks -> nothing moves",
		rec: func(t *testing.T) *pb.JobRecord {
			return planJob(t, planBatch(), jobRunning, 0, map[string]pb.ExecutionState{"source[0]": stFinished, "source[1]": stRunning})
		},
		drained: map[string]int64{"tm1": 1},
		want:    nil,
	}, {
		name: "a finished job -> nothing to do",
		rec: func(t *testing.T) *pb.JobRecord {
			return planJob(t, planChain(1), jobFinished, 0, every(1, stFinished))
		},
		want: nil,
	}, {
		name: "a reconciling job -> nothing to do (reconciliation owns it)",
		rec: func(t *testing.T) *pb.JobRecord {
			return planJob(t, planChain(1), pb.JobStatus_JOB_STATUS_RECONCILING, 0, every(1, stReconciling))
		},
		want: nil,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := tc.rec(t)
			if tc.edit != nil {
				tc.edit(rec)
			}
			regions, err := graph.FailoverRegions(rec.JobGraph)
			if err != nil {
				t.Fatal(err)
			}
			before := proto.Clone(rec)
			v := view{now: now, regions: regions, restartAt: tc.restartAt, drained: tc.drained}
			steps := nextSteps(rec, v)
			if !proto.Equal(before, rec) {
				t.Fatal("nextSteps changed the record")
			}
			var got []string
			for _, a := range steps {
				s := a.String()
				if a.kind == actDeploy && tc.tms != nil {
					s += " -> " + renderPlacement(place(tc.tms, tc.used, a.tasks))
				}
				got = append(got, s)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("steps:\n  got  %q\n  want %q", got, tc.want)
			}
			// The same record and view decide the same (level-triggered).
			if again := nextSteps(rec, v); fmt.Sprint(again) != fmt.Sprint(steps) {
				t.Fatalf("a second run decided differently:\n  %v\n  %v", steps, again)
			}
			checkTimestamps(t, steps, now)
			checkNoAliasing(t, steps, rec)
		})
	}
}

func renderPlacement(ps []placement, err error) string {
	if err != nil {
		if !errors.Is(err, ErrNoSlots) {
			return "error: " + err.Error()
		}
		return "wait: " + err.Error()
	}
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = fmt.Sprintf("%s/%d", p.tm.ID, p.slot)
	}
	return strings.Join(parts, " ")
}

// checkTimestamps: the plan stamps what it commits with the view's time, never the clock.
func checkTimestamps(t *testing.T, steps []action, now time.Time) {
	t.Helper()
	for _, a := range steps {
		for _, u := range a.updates {
			if u.Timestamp != now.UnixMilli() || u.JobId != "job" {
				t.Fatalf("update %v: want job %q and timestamp %d", u, "job", now.UnixMilli())
			}
		}
	}
}

// checkNoAliasing: no action shares a message with the record (the scheduler acts on them
// after the FSM's read lock is released).
func checkNoAliasing(t *testing.T, steps []action, rec *pb.JobRecord) {
	t.Helper()
	for _, a := range steps {
		for _, s := range a.attempts {
			forEachExecution(rec, func(ev *pb.ExecutionVertex) {
				if e := ev.GetCurrent(); e != nil && e.Slot != nil && e.Slot == s.Slot {
					t.Fatalf("resume attempt %s shares its slot with the record", s.AttemptId)
				}
			})
		}
	}
}

// TestPlanIsPure: plan.go imports nothing that does I/O and reads no clock (the time comes in
// the view), so nextSteps decides from its arguments alone.
func TestPlanIsPure(t *testing.T) {
	allowed := map[string]bool{
		"fmt": true, "strings": true, "time": true,
		"github.com/jmcluster/jmcluster/graph": true, "github.com/jmcluster/jmcluster/transport/pb": true,
		"github.com/jmcluster/jmcluster/internal/logsum": true, // pure: formats a list
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "plan.go", nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); !allowed[p] {
			t.Errorf("%s: plan.go imports %s", fset.Position(imp.Pos()), p)
		}
	}
	clock := map[string]bool{"Now": true, "Since": true, "Until": true, "Tick": true, "After": true, "AfterFunc": true, "NewTimer": true, "NewTicker": true, "Sleep": true}
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if id, ok := sel.X.(*ast.Ident); ok && id.Name == "time" && clock[sel.Sel.Name] {
			t.Errorf("%s: plan.go uses time.%s", fset.Position(sel.Pos()), sel.Sel.Name)
		}
		return true
	})
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv != nil {
			if s, ok := fn.Recv.List[0].Type.(*ast.StarExpr); ok {
				if id, ok := s.X.(*ast.Ident); ok && (id.Name == "term" || id.Name == "JobMaster") {
					t.Errorf("%s: %s is a method of the %s", fset.Position(fn.Pos()), fn.Name.Name, id.Name)
				}
			}
		}
	}
}

// BenchmarkNextSteps100k decides for a RUNNING job of 3 x 33,334 = 100,002 running executions
// (33,334 regions), which has nothing to do: the cost of driving an unchanged large job, which
// the scheduler pays on the live record under the FSM's read lock, without copying it.
// Compare reconcile's BenchmarkCloneJob100k, the cost of copying the job once.
func BenchmarkNextSteps100k(b *testing.B) {
	const p = 33334
	jg := planChain(p)
	eg, err := graph.BuildExecutionGraph(jg)
	if err != nil {
		b.Fatal(err)
	}
	for _, ev := range graph.AllExecutions(eg) {
		ev.Current = &pb.Execution{AttemptId: fmt.Sprintf("%s-%d", ev.VertexId, ev.SubtaskIndex), State: stRunning,
			Slot: &pb.SlotID{TmId: "tm1", Index: ev.SubtaskIndex}, TmGrpcAddress: "tm1:1"}
	}
	rec := &pb.JobRecord{JobGraph: jg, ExecutionGraph: eg, Status: jobRunning}
	regions, err := graph.FailoverRegions(jg)
	if err != nil {
		b.Fatal(err)
	}
	v := view{now: time.UnixMilli(1), regions: regions}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if steps := nextSteps(rec, v); len(steps) != 0 {
			b.Fatalf("steps %v", steps)
		}
	}
}
