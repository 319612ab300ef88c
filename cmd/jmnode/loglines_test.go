//go:build !race

// A 10,000-task job on three TaskManager processes: set up under the race detector it takes
// minutes on two cores, so `make test` runs this file without -race (its second line).

package main

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/internal/proccluster"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// maxLogLine is the longest log line any process may write: a line that lists regions, tasks,
// attempts or TaskManagers summarises them (internal/logsum), so none grows with the job.
const maxLogLine = 4 << 10

// TestNoLogLineGrowsWithTheJob runs real processes: a 10,000-task streaming job (a FORWARD
// chain of 10 vertices of parallelism 1,000: 1,000 regions) on three TaskManagers, two of
// them silenced (SIGSTOP: their regions wait under the isolation rule) and then killed; the job
// runs again on the one left. Then every line of every process's log is
// read: none may exceed 4 KiB (the offending line's first 200 bytes are printed).
func TestNoLogLineGrowsWithTheJob(t *testing.T) {
	start := time.Now()
	since := func() time.Duration { return time.Since(start).Round(100 * time.Millisecond) }
	d := newProcessCluster(t, proccluster.LocalOptions{
		JMs: 3, TMs: 3, Slots: 1000,
		JMFlags: defaultRaftProcs.JMFlags, // hashicorp's Raft timings: no elections by load alone
		TMFlags: defaultRaftProcs.TMFlags,
	})
	ctx := context.Background()
	leader, err := d.waitLeader(ctx, "", 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.waitTMs(ctx, 60*time.Second, 3, 1000); err != nil {
		t.Fatal(err)
	}
	jg := testcluster.ForwardChain("log-lines-10k", 10, 1000)
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
	if _, err := d.waitAllRunning(ctx, jg.JobId, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("[%v] 10,000 tasks RUNNING", since())

	// Two TaskManagers go silent (SIGSTOP): lost at the heartbeat timeout, but only one of the
	// pool's three heartbeats, so the isolation rule holds their ~667 regions (one "restart
	// waits" line, which used to name every region). Then they are killed: proven dead by
	// their refused connections, their regions restart on the TaskManager left.
	victims := []*proccluster.Proc{d.Proc("tm1"), d.Proc("tm2")}
	for _, v := range victims {
		if err := v.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	stopped := time.Now()
	t.Logf("[%v] stopped tm1 and tm2", since())
	var held string
	for deadline := time.Now().Add(time.Minute); held == "" && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) { // polling a log file
		for _, p := range d.JMs { // whichever leads
			for _, l := range logLines(t, p.LogPath, "restart waits", "TaskManager tm1", "TaskManager tm2") {
				if l.at.After(stopped) {
					held = l.text
				}
			}
		}
	}
	if held == "" {
		t.Fatalf("no leader logged that the regions of tm1 and tm2 wait")
	}
	t.Logf("[%v] the held restarts, %d bytes: %.300s", since(), len(held), held)
	for _, v := range victims {
		if err := v.Kill(10 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("[%v] killed tm1 and tm2", since())
	if _, err := d.waitJob(ctx, jg.JobId, 2*time.Minute, func(r *pb.JobRecord) bool {
		for _, a := range testcluster.Attempts(r) {
			if a.TM != "tm3" {
				return false
			}
		}
		return allRunning(r)
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("[%v] every task RUNNING again on tm3", since())

	logs, _ := filepath.Glob(filepath.Join(d.dir, "*.log"))
	more, _ := filepath.Glob(filepath.Join(d.dir, "*", "*.log"))
	logs = append(logs, more...)
	if len(logs) < 6 {
		t.Fatalf("found %d process logs under %s, want the 6 processes'", len(logs), d.dir)
	}
	var lines, longest int
	for _, path := range logs {
		n, max := checkLogLines(t, path)
		lines += n
		longest = maxInt(longest, max)
	}
	t.Logf("%d lines in %d logs; the longest %d bytes (limit %d)", lines, len(logs), longest, maxLogLine)
}

// checkLogLines fails the test for every line of the log at path longer than maxLogLine, and
// returns how many lines it read and the longest's length.
func checkLogLines(t *testing.T, path string) (lines, longest int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<16)
	for n := 1; ; n++ {
		line, err := r.ReadBytes('\n')
		if len(line) == 0 && err != nil {
			break
		}
		lines++
		longest = maxInt(longest, len(line))
		if len(line) > maxLogLine {
			t.Errorf("%s line %d is %d bytes (limit %d): %q...", filepath.Base(path), n, len(line), maxLogLine, line[:200])
		}
		if err != nil {
			break
		}
	}
	return lines, longest
}

func maxInt(a, b int) int {
	if a > b {
		return a
	}
	return b
}
