package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/internal/proccluster"
	"github.com/jmcluster/jmcluster/testkit/benchgoal"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// deployTime is how long a job took from its submission to its last execution RUNNING, from
// the leader's committed timestamps.
func deployTime(rec *pb.JobRecord) time.Duration {
	var last int64
	for _, v := range rec.GetExecutionGraph().GetVertices() {
		for _, ev := range v.Subtasks {
			for _, st := range ev.GetCurrent().GetStateTimestamps() {
				if st.GetState() == pb.ExecutionState_EXECUTION_STATE_RUNNING && st.GetTimestamp() > last {
					last = st.GetTimestamp()
				}
			}
		}
	}
	return time.Duration(last-rec.GetSubmittedAt()) * time.Millisecond
}

// phaseTimes is, per vertex and state, when its first and last execution reached the state,
// from submission (committed timestamps): where a deployment's time went.
func phaseTimes(rec *pb.JobRecord) string {
	var out []string
	for _, v := range rec.GetExecutionGraph().GetVertices() {
		first, last := map[pb.ExecutionState]int64{}, map[pb.ExecutionState]int64{}
		var order []pb.ExecutionState
		for _, ev := range v.Subtasks {
			for _, st := range ev.GetCurrent().GetStateTimestamps() {
				at := st.GetTimestamp() - rec.GetSubmittedAt()
				s := st.GetState()
				if _, ok := first[s]; !ok {
					first[s], last[s] = at, at
					order = append(order, s)
				}
				first[s], last[s] = min(first[s], at), max(last[s], at)
			}
		}
		parts := []string{}
		for _, s := range order {
			parts = append(parts, fmt.Sprintf("%s %d-%dms", strings.TrimPrefix(s.String(), "EXECUTION_STATE_"), first[s], last[s]))
		}
		out = append(out, v.GetVertexId()+": "+strings.Join(parts, ", "))
	}
	return strings.Join(out, "; ")
}

// cpuTimes is the CPU time (user and system, all threads) each process of the cluster has
// used so far, by name, from /proc (Linux; empty elsewhere): a deployment's CPU does not move
// with the machine's load as its time does.
func (d *procs) cpuTimes() map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, p := range d.Procs() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Pid()))
		if err != nil {
			continue
		}
		// The fields after the command's closing parenthesis: utime and stime are 14 and 15.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		out[p.Name] = time.Duration(u+st) * 10 * time.Millisecond // USER_HZ 100
	}
	return out
}

func cpuLine(cpu map[string]time.Duration) string {
	names := slices.Sorted(maps.Keys(cpu))
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %s", n, cpu[n]))
	}
	return strings.Join(parts, ", ")
}

// TestGoalWideDeployment (JMC_GOALS=1, `make bench-short`): on three TaskManager processes, the
// 512 -> 512 ALL_TO_ALL streaming job (262,144 input channels) against the same 1024 tasks
// wired FORWARD (512 channels), each submitted, timed from submission to its last task
// RUNNING (committed timestamps) and cancelled; after a warm-up job, FORWARD and ALL_TO_ALL
// alternately (four and three runs), the ratio of their medians. Goal: ALL_TO_ALL within 3 x
// FORWARD.
func TestGoalWideDeployment(t *testing.T) {
	benchgoal.Skip(t)
	// JMC_WIDE_PPROF=DIR: every process serves pprof, and a CPU profile of each is taken over
	// the second after each ALL_TO_ALL submission (DIR/all-to-all-512#N-NAME.pprof), before
	// the job is cancelled.
	profDir := os.Getenv("JMC_WIDE_PPROF")
	pprofs := map[string]string{}
	// JMC_WIDE_TM_ENV="K=V ...": added to every TaskManager's environment (GOGC=400, say).
	tmEnv := strings.Fields(os.Getenv("JMC_WIDE_TM_ENV"))
	d := newProcessClusterOf(t, wideProcs, func(_ string, nodes []proccluster.Node) {
		for i := range nodes {
			if nodes[i].Role == proccluster.TaskManager {
				nodes[i].Env = append(slices.Clone(nodes[i].Env), tmEnv...)
			}
		}
		if profDir == "" {
			return
		}
		ports, err := proccluster.FreePorts(len(nodes))
		if err != nil {
			t.Fatal(err)
		}
		for i := range nodes {
			nodes[i].Flags = append(slices.Clone(nodes[i].Flags), "--pprof-addr", ports[i])
			pprofs[nodes[i].Name] = ports[i]
		}
	})
	ctx := context.Background()
	leader, err := d.waitLeader(ctx, "", 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.waitTMs(ctx, 60*time.Second, 3, 400); err != nil {
		t.Fatal(err)
	}
	c := d.client(leader.LeaderGrpcAddress)
	defer c.cc.Close()
	run := func(name string, dist pb.Distribution) time.Duration {
		t.Helper()
		jg := testcluster.WideAllToAll(name, 512, 2)
		jg.Edges[0].Distribution = dist
		jg.JobId = newJobID()
		var profiled sync.WaitGroup
		if profDir != "" && dist == pb.Distribution_DISTRIBUTION_ALL_TO_ALL {
			for tm, addr := range pprofs {
				profiled.Add(1)
				go func() {
					defer profiled.Done()
					if b := cpuProfile(addr, 1); b != nil {
						_ = os.WriteFile(filepath.Join(profDir, fmt.Sprintf("%s-%s.pprof", strings.ReplaceAll(name, " ", ""), tm)), b, 0o644)
					}
				}()
			}
		}
		cpu0 := d.cpuTimes()
		if err := c.call(60*time.Second, func(ctx context.Context) error {
			_, err := c.client().SubmitJob(ctx, &pb.SubmitJobRequest{JobGraph: jg})
			return err
		}); err != nil {
			t.Fatalf("submit %s: %v", name, err)
		}
		rec, err := d.waitAllRunning(ctx, jg.JobId, 3*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		took := deployTime(rec)
		cpu := d.cpuTimes()
		for p, c := range cpu {
			cpu[p] = c - cpu0[p]
		}
		t.Logf("%s: %s; CPU until seen RUNNING %s", name, phaseTimes(rec), cpuLine(cpu))
		profiled.Wait() // the profiles end before the cancel starts
		if err := c.call(60*time.Second, func(ctx context.Context) error {
			_, err := c.client().CancelJob(ctx, &pb.CancelJobRequest{JobId: jg.JobId})
			return err
		}); err != nil {
			t.Fatalf("cancel %s: %v", name, err)
		}
		if _, err := d.waitJob(ctx, jg.JobId, 3*time.Minute, func(r *pb.JobRecord) bool {
			return r.GetStatus() == pb.JobStatus_JOB_STATUS_CANCELED
		}); err != nil {
			t.Fatal(err)
		}
		if err := d.waitFor(ctx, time.Minute, "every slot free again", func(cs *pb.ClusterStatusResponse) bool {
			used := 0
			for _, tm := range cs.TaskManagers {
				used += int(tm.SlotsUsed)
			}
			return used == 0
		}); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: 1024 tasks RUNNING %s after submission", name, took)
		return took
	}
	// The first job after the cluster starts waits about 2 s before its executions are created
	// (measured; not the data plane's): a warm-up job takes that, and is not counted.
	run("warm-up", pb.Distribution_DISTRIBUTION_FORWARD)
	// Alternating, three of each, and the medians: one deployment's time varies up to 2x from
	// run to run on a loaded two-core machine.
	var fwd, wide []time.Duration
	n := benchgoal.Trials(3, 9) // make bench-short, make bench
	for i := range n {
		fwd = append(fwd, run(fmt.Sprintf("forward-512 #%d", i+1), pb.Distribution_DISTRIBUTION_FORWARD))
		wide = append(wide, run(fmt.Sprintf("all-to-all-512 #%d", i+1), pb.Distribution_DISTRIBUTION_ALL_TO_ALL))
	}
	fwd = append(fwd, run(fmt.Sprintf("forward-512 #%d", n+1), pb.Distribution_DISTRIBUTION_FORWARD))
	median := func(ds []time.Duration) time.Duration {
		ds = slices.Clone(ds)
		slices.Sort(ds)
		if len(ds)%2 == 0 {
			return (ds[len(ds)/2-1] + ds[len(ds)/2]) / 2
		}
		return ds[len(ds)/2]
	}
	ratio := float64(median(wide)) / float64(median(fwd))
	t.Logf("ALL_TO_ALL %v (median %s), FORWARD %v (median %s): %.2fx", wide, median(wide), fwd, median(fwd), ratio)
	benchgoal.Report(t, "wide-deploy-512x512-vs-forward", ratio, 3, ratio <= 3, "x")
}
