package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/internal/proccluster"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// waitingProcs: one JobMaster (the job's waits are the leader's) and two TaskManagers of
// fastProcs' timings (500 ms TM heartbeats).
var waitingProcs = proccluster.LocalOptions{
	JMs: 1, TMs: 2, Slots: 4,
	JMFlags: fastProcs.JMFlags,
	TMFlags: fastProcs.TMFlags,
}

// jobStatusJSON is what this test reads of `jmnode job status --json`.
type jobStatusJSON struct {
	Summary struct {
		Status       string `json:"status"`
		Tasks        int32  `json:"tasks"`
		TasksRunning int32  `json:"tasks_running"`
	} `json:"summary"`
	Waiting string `json:"waiting"`
}

// jobStatusCLI runs `jmnode job status --json ID` against addr, as a user would.
func jobStatusCLI(d *procs, addr, id string) (jobStatusJSON, string, error) {
	var s jobStatusJSON
	out, err := exec.Command(d.Bin, "job", "status", id, "--json", "--addr", addr).Output()
	if err != nil {
		return s, string(out), err
	}
	if err := json.Unmarshal(out, &s); err != nil {
		return s, string(out), fmt.Errorf("job status --json: %w", err)
	}
	return s, string(out), nil
}

// TestJobWhoseOnlyTaskManagerIsGoneSaysWhyAndRecovers runs real processes: a job runs on its
// only TaskManager (the other one was killed before the submission), which is then killed. The
// job cannot restart: `jmnode job status --json` says why (the waiting field: the restart delay,
// then no free slots) within two heartbeat intervals of the kill, while the status stays
// RUNNING; a valid TaskManager joining (the other one, started again) gets the whole job
// RUNNING, every task RUNNING, within 10 s.
func TestJobWhoseOnlyTaskManagerIsGoneSaysWhyAndRecovers(t *testing.T) {
	// Not parallel: it bounds a latency (two heartbeat intervals) that other tests' load stretches.
	const heartbeat = 500 * time.Millisecond // waitingProcs' TM heartbeat interval
	d := newProcessCluster(t, waitingProcs)
	ctx := context.Background()
	leader, err := d.waitLeader(ctx, "", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.waitTMs(ctx, 30*time.Second, 2, 0); err != nil {
		t.Fatal(err)
	}
	spare := d.Proc("tm2")
	if err := spare.Kill(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := d.waitTMs(ctx, 30*time.Second, 1, 0); err != nil {
		t.Fatal(err)
	}
	rec := submitOn(t, d, leader.LeaderGrpcAddress, "only-tm", 3)
	id := rec.JobGraph.JobId

	only := d.Proc("tm1")
	killed := time.Now()
	if err := only.Kill(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	var seen []string
	var last string
	var shown time.Duration
	for deadline := killed.Add(30 * time.Second); time.Now().Before(deadline); {
		s, out, err := jobStatusCLI(d, leader.LeaderGrpcAddress, id)
		if err != nil {
			last = fmt.Sprintf("%v: %s", err, out)
			continue
		}
		last = fmt.Sprintf("%s, %d/%d running, waiting %q", s.Summary.Status, s.Summary.TasksRunning, s.Summary.Tasks, s.Waiting)
		if s.Waiting != "" {
			if len(seen) == 0 {
				shown = time.Since(killed)
			}
			if len(seen) == 0 || seen[len(seen)-1] != s.Waiting {
				seen = append(seen, s.Waiting)
			}
			if s.Summary.Status != "JOB_STATUS_RUNNING" {
				t.Fatalf("the waiting job is %s, want RUNNING with the reason beside it: %s", s.Summary.Status, last)
			}
			if strings.Contains(s.Waiting, "free slots") || strings.Contains(s.Waiting, "slots needed") {
				break
			}
		}
	}
	if len(seen) == 0 || !strings.Contains(seen[len(seen)-1], "deployment waits") {
		t.Fatalf("no waiting reason naming the missing slots within 30 s of the kill (seen %q; last %s)", seen, last)
	}
	t.Logf("waiting shown %v after the kill; reasons in turn: %q", shown.Round(time.Millisecond), seen)
	if shown > 2*heartbeat {
		t.Fatalf("the waiting reason showed %v after the kill, want within two heartbeat intervals (%v)", shown.Round(time.Millisecond), 2*heartbeat)
	}

	joined := time.Now()
	if err := spare.Revive(); err != nil {
		t.Fatal(err)
	}
	after, err := d.waitAllRunning(ctx, id, 10*time.Second)
	if err != nil {
		t.Fatalf("not RUNNING within 10 s of a valid TaskManager joining: %v", err)
	}
	if after.Status != pb.JobStatus_JOB_STATUS_RUNNING {
		t.Fatalf("job %s", graph.JobStatusName(after.Status))
	}
	s, out, err := jobStatusCLI(d, leader.LeaderGrpcAddress, id)
	if err != nil || s.Waiting != "" || s.Summary.TasksRunning != s.Summary.Tasks {
		t.Fatalf("after the recovery: %v\n%s", err, out)
	}
	t.Logf("every task RUNNING %v after %s joined", time.Since(joined).Round(time.Millisecond), spare.Name)
}

// submitOn submits a streaming chain to the leader at addr and waits until every task runs.
func submitOn(t *testing.T, d *procs, addr, name string, parallelism int32) *pb.JobRecord {
	t.Helper()
	jg := testcluster.StreamingChain(name, parallelism, 50, 0)
	jg.JobId = newJobID()
	jg.RestartStrategy = &pb.RestartStrategy{Kind: pb.RestartKind_RESTART_KIND_FIXED_DELAY, Attempts: 100, DelayMs: 100}
	lc := d.client(addr)
	defer lc.cc.Close()
	if err := lc.call(15*time.Second, func(ctx context.Context) error {
		_, err := lc.client().SubmitJob(ctx, &pb.SubmitJobRequest{JobGraph: jg})
		return err
	}); err != nil {
		t.Fatalf("submit: %v", err)
	}
	rec, err := d.waitAllRunning(context.Background(), jg.JobId, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}
