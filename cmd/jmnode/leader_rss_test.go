package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/internal/proccluster"
	"github.com/jmcluster/jmcluster/testkit/benchgoal"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// leaderRSSGoal is the target of GOAL leader-rss-vs-follower-10k: the leader's resident memory
// against the mean of the followers'.
const leaderRSSGoal = 2.0

// TestGoalLeaderRSSVsFollower (JMC_GOALS=1, `make bench-short`): three jmnode JobMaster
// processes (hashicorp/raft's default timings) and three jmnode TaskManager processes of 1,000
// slots run a 10,000-task streaming job: a FORWARD chain of 10 vertices of parallelism 1,000
// (sequence sources of one record a second, maps, log sinks; 1,000 regions). Once every task
// runs, each JobMaster's heap is collected (pprof's heap?gc=1) and its resident memory (VmRSS
// of /proc/PID/status) read until it is steady; the goal is the leader's RSS against the mean
// of the followers', at most 2.0x. JMC_HEAP_PROFILES=DIR writes each JobMaster's heap profile
// (NAME-leader.pb.gz, NAME-follower.pb.gz) into DIR.
func TestGoalLeaderRSSVsFollower(t *testing.T) {
	benchgoal.Skip(t)
	start := time.Now()
	since := func() time.Duration { return time.Since(start).Round(100 * time.Millisecond) }
	pprofs := map[string]string{}
	d := newProcessClusterOf(t, proccluster.LocalOptions{
		JMs: 3, TMs: 3, Slots: 1000,
		JMFlags: defaultRaftProcs.JMFlags,
		TMFlags: defaultRaftProcs.TMFlags,
	}, func(_ string, nodes []proccluster.Node) {
		ports, err := proccluster.FreePorts(len(nodes))
		if err != nil {
			t.Fatal(err)
		}
		for i := range nodes {
			if nodes[i].Role == proccluster.JobMaster {
				nodes[i].Flags = append(append([]string(nil), nodes[i].Flags...), "--pprof-addr", ports[i])
				pprofs[nodes[i].Name] = ports[i]
			}
		}
	})
	ctx := context.Background()
	leader, err := d.waitLeader(ctx, "", 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.waitTMs(ctx, 60*time.Second, 3, 1000); err != nil {
		t.Fatal(err)
	}
	jg := testcluster.ForwardChain("leader-rss-10k", 10, 1000)
	jg.JobId = newJobID()
	jg.Vertices[0].GetOperator().GetSequenceSource().RatePerSecond = 1
	jg.RestartStrategy = &pb.RestartStrategy{Kind: pb.RestartKind_RESTART_KIND_FIXED_DELAY, Attempts: 100, DelayMs: 100}
	lc := d.client(leader.LeaderGrpcAddress)
	defer lc.cc.Close()
	if err := lc.call(30*time.Second, func(ctx context.Context) error {
		_, err := lc.client().SubmitJob(ctx, &pb.SubmitJobRequest{JobGraph: jg})
		return err
	}); err != nil {
		t.Fatalf("submit: %v", err)
	}
	peak := samplePeak(pprofs[leader.LeaderId])
	if _, err := d.waitAllRunning(ctx, jg.JobId, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("[%v] 10,000 tasks RUNNING; while they deployed, %s", since(), peak())
	now, err := d.waitSelfLeader(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if now.LeaderId != leader.LeaderId {
		t.Logf("the leader changed while the job deployed: %s, then %s", leader.LeaderId, now.LeaderId)
	}
	var lead uint64
	var followers []uint64
	var seen []string
	for _, p := range d.JMs {
		heapInUse(t, pprofs[p.Name]) // a forced collection before the reading
		rss := steadyRSS(t, p)
		role := "follower"
		if p.Name == now.LeaderId {
			role, lead = "leader", rss
		} else {
			followers = append(followers, rss)
		}
		m := memStats(t, pprofs[p.Name])
		seen = append(seen, fmt.Sprintf("%s (%s) RSS %.1f MB: heap in use %.1f MB, heap idle not released %.1f MB, stacks %.1f MB, Go's Sys %.1f MB",
			p.Name, role, float64(rss)/1e6, float64(m["HeapInuse"])/1e6, float64(m["HeapIdle"]-min(m["HeapIdle"], m["HeapReleased"]))/1e6, float64(m["Stack"])/1e6, float64(m["Sys"])/1e6))
		if dir := os.Getenv("JMC_HEAP_PROFILES"); dir != "" {
			writeHeapProfile(t, pprofs[p.Name], filepath.Join(dir, p.Name+"-"+role+".pb.gz"))
		}
	}
	var sum uint64
	for _, f := range followers {
		sum += f
	}
	if lead == 0 || len(followers) == 0 {
		t.Fatalf("no leader or no follower read: %s", strings.Join(seen, "; "))
	}
	mean := float64(sum) / float64(len(followers))
	ratio := float64(lead) / mean
	t.Logf("[%v] %s; leader / mean follower %.2fx", since(), strings.Join(seen, "; "), ratio)
	benchgoal.Report(t, "leader-rss-vs-follower-10k", ratio, leaderRSSGoal, ratio <= leaderRSSGoal, "x")
}

// steadyRSS reads p's VmRSS every 250 ms until two readings in a row differ by less than 1%
// (the collector's freed pages returned, no more growth), for at most 20 s; it returns the
// last reading.
func steadyRSS(t *testing.T, p *proccluster.Proc) uint64 {
	t.Helper()
	prev := vmRSS(t, p.Pid())
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		time.Sleep(250 * time.Millisecond) // sampling a counter
		cur := vmRSS(t, p.Pid())
		if diff := int64(cur) - int64(prev); diff < int64(prev)/100 && -diff < int64(prev)/100 {
			return cur
		}
		prev = cur
	}
	t.Logf("%s's RSS did not settle in 20 s: last %d bytes", p.Name, prev)
	return prev
}

// vmRSS is the resident set size of process pid, in bytes (/proc/PID/status, VmRSS).
func vmRSS(t *testing.T, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("RSS of pid %d: %v", pid, err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	t.Fatalf("RSS of pid %d: no VmRSS line", pid)
	return 0
}

// writeHeapProfile writes the heap profile of the process serving pprof at addr, after a
// collection, to path (for `go tool pprof -sample_index=inuse_space -top PATH`).
func writeHeapProfile(t *testing.T, addr, path string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/debug/pprof/heap?gc=1")
	if err != nil {
		t.Errorf("heap profile of %s: %v", addr, err)
		return
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil {
		err = os.WriteFile(path, b, 0o644)
	}
	if err != nil {
		t.Errorf("heap profile of %s: %v", addr, err)
		return
	}
	t.Logf("heap profile of %s: %s", addr, path)
}

// memStats is the runtime.MemStats of the process serving pprof at addr, by field name (the
// "# Name = value" lines of /debug/pprof/heap?debug=1), read without a collection.
func memStats(t *testing.T, addr string) map[string]uint64 {
	t.Helper()
	m, err := readMemStats(addr)
	if err != nil {
		t.Fatalf("memory statistics of %s: %v", addr, err)
	}
	return m
}

func readMemStats(addr string) (map[string]uint64, error) {
	resp, err := http.Get("http://" + addr + "/debug/pprof/heap?debug=1")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := map[string]uint64{}
	for _, l := range strings.Split(string(b), "\n") {
		name, v, ok := strings.Cut(strings.TrimPrefix(l, "# "), " = ")
		if !ok || !strings.HasPrefix(l, "# ") {
			continue
		}
		v, _, _ = strings.Cut(v, " / ") // "# Stack = inuse / sys"
		if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
			m[name] = n
		}
	}
	return m, nil
}

// samplePeak reads the memory statistics and goroutine count of the process serving pprof at
// addr every 100 ms until the returned function is called; that returns the largest of each
// seen.
func samplePeak(addr string) func() string {
	stop, done := make(chan struct{}), make(chan string, 1)
	go func() {
		var heap, stack, sys, goroutines uint64
		for {
			if m, err := readMemStats(addr); err == nil {
				heap, stack, sys = max(heap, m["HeapInuse"]), max(stack, m["Stack"]), max(sys, m["Sys"])
			}
			goroutines = max(goroutines, goroutineCount(addr))
			select {
			case <-stop:
				done <- fmt.Sprintf("the leader's largest heap in use %.1f MB, stacks %.1f MB, Go's Sys %.1f MB, goroutines %d",
					float64(heap)/1e6, float64(stack)/1e6, float64(sys)/1e6, goroutines)
				return
			case <-time.After(100 * time.Millisecond): // sampling
			}
		}
	}()
	return func() string { close(stop); return <-done }
}

// goroutineCount is the number of goroutines of the process serving pprof at addr (0 when it
// does not answer).
func goroutineCount(addr string) uint64 {
	resp, err := http.Get("http://" + addr + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	line, _, _ := strings.Cut(readAllString(resp.Body), "\n")
	n, _ := strconv.ParseUint(strings.TrimPrefix(line, "goroutine profile: total "), 10, 64)
	return n
}

func readAllString(r io.Reader) string {
	b, _ := io.ReadAll(r)
	return string(b)
}
