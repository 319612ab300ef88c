//go:build !race

// The jobs at the default expanded-size limits are large: set up under the race detector,
// 100,000 committed executions alone take minutes on two cores. `make test` runs this file
// without -race (its second line), as it does the 100,000-execution reconciliation.

package main

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/jmcluster/jmcluster/cluster"
	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/jmserver"
	tc "github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// atLimit is a job at one default expanded-size limit, and the limit it sits at.
type atLimit struct {
	what  string
	limit string // graph.Limit*
	jg    *pb.JobGraph
	// grow returns the same job one step larger: over the limit.
	grow func() *pb.JobGraph
}

// jobsAtTheDefaultLimits builds one job at each default limit: the largest job of its shape
// the limit admits, with the next larger one refused for that limit.
func jobsAtTheDefaultLimits(t *testing.T) []atLimit {
	lim := graph.DefaultSizeLimits()
	// Executions: a FORWARD chain of 100 vertices of 1,000 subtasks.
	chainP := int32(lim.MaxExecutions / 100)
	// Input channels: 512 -> 1024 ALL_TO_ALL.
	chanQ := int32(lim.MaxInputChannels / 512)
	// Graph bytes: 512 -> q ALL_TO_ALL with 40-character ids, q the largest whose deployed
	// estimate fits (each input channel carries both ids).
	src, sink := "source-"+strings.Repeat("s", 33), "sink-"+strings.Repeat("k", 35)
	bytesQ := int32(1)
	for graph.Size(tc.AllToAll("", src, sink, 512, bytesQ+1)).DeployedBytes <= lim.MaxGraphBytes {
		bytesQ++
	}
	jobs := []atLimit{
		{"executions", graph.LimitExecutions, tc.ForwardChain("at-max-executions", 100, chainP),
			func() *pb.JobGraph {
				jg := tc.ForwardChain("over", 100, chainP)
				jg.Vertices[0].Parallelism++ // the source's extra subtask: a FORWARD edge needs equal parallelism, so check the size only
				return jg
			}},
		{"input channels", graph.LimitInputChannels, tc.AllToAll("at-max-input-channels", "src", "sink", 512, chanQ),
			func() *pb.JobGraph { return tc.AllToAll("over", "src", "sink", 512, chanQ+1) }},
		{"graph bytes", graph.LimitGraphBytes, tc.AllToAll("at-max-graph-bytes", src, sink, 512, bytesQ),
			func() *pb.JobGraph { return tc.AllToAll("over", src, sink, 512, bytesQ+1) }},
	}
	for _, j := range jobs {
		size := graph.Size(j.jg)
		if err := size.Check(lim); err != nil {
			t.Fatalf("the job at the %s limit is refused: %v", j.what, err)
		}
		var se *graph.SizeError
		if err := graph.Size(j.grow()).Check(lim); !errors.As(err, &se) || len(se.Problems) != 1 || se.Problems[0].Limit != j.limit {
			t.Fatalf("one step past the job at the %s limit: %v, want refused for %s only", j.what, err, j.limit)
		}
		t.Logf("at the %s limit: %d executions, %d input channels, deployed estimate %d bytes (%.1f MiB); one step larger is refused for %s",
			j.what, size.Executions, size.InputChannels, size.DeployedBytes, float64(size.DeployedBytes)/(1<<20), j.limit)
	}
	return jobs
}

// TestJobsAtTheDefaultLimits: a job at each default expanded-size limit — 100,000 executions;
// 524,288 input channels; 64 MiB of deployed execution graph — runs RUNNING on ten simulated
// TaskManagers (that speak the real TaskManagerService and chunk their reports as a TM does);
// the leader is killed; the new leader's reconciliation keeps every execution (no report lost
// to the message limit, every chunk within the budget, no attempt changed, nothing
// cancelled); and each job is readable after it with `jmnode job status` (the summary, and
// every subtask with --all) and through the REST view (the summary and every execution in
// pages).
func TestJobsAtTheDefaultLimits(t *testing.T) {
	jobs := jobsAtTheDefaultLimits(t)
	start := time.Now()
	// Entries of thousands of executions and records of tens of MB on a loaded two-core
	// machine: Raft timings well above a deployment's keep the setup's leader in place (as in
	// the 100,000-execution reconciliation test). The test is about the reconciliation.
	c := tc.New(t, tc.Options{JMs: 3, ReportDeadline: time.Minute, LogLevel: hclog.Info, Raft: func(cc *cluster.Config) {
		cc.HeartbeatTimeout, cc.ElectionTimeout, cc.LeaderLeaseTimeout = 5*time.Second, 5*time.Second, 3*time.Second
		cc.ApplyTimeout, cc.EstablishTimeout = 2*time.Minute, 2*time.Minute
	}})
	sims := tc.StartSimTMs(t, 10, tc.SimOptions{WholeReports: true})
	l1 := c.Leader()
	ids := make([]string, len(jobs))
	total := 0
	for i, j := range jobs {
		ids[i] = c.Submit(j.jg)
		tc.WaitFor(t, time.Minute, j.what+": the job RUNNING (waiting for slots)", func() (bool, string) {
			st := pb.JobStatus_JOB_STATUS_UNSPECIFIED
			l1.A.State.WithJob(ids[i], func(rec *pb.JobRecord) { st = rec.Status })
			return st == pb.JobStatus_JOB_STATUS_RUNNING, graph.JobStatusName(st)
		})
		n := c.DeployOnSims(l1, ids[i], sims, 0)
		if want := int(graph.Size(j.jg).Executions); n != want {
			t.Fatalf("%s: deployed %d attempts, want %d", j.what, n, want)
		}
		total += n
		t.Logf("%s: job %s RUNNING on the simulated TMs (%s)", j.what, ids[i], time.Since(start).Round(time.Millisecond))
	}
	before := make([]string, len(ids))
	for i, id := range ids {
		before[i] = attemptFingerprint(l1, id)
	}

	e1 := l1.A.JM.Epoch()
	c.KillJM(l1)
	var l2 *tc.JM
	tc.WaitFor(t, time.Minute, "a new leader", func() (bool, string) {
		for _, j := range c.Live() {
			if j.A.JM.Epoch() > e1 {
				l2 = j
				return true, ""
			}
		}
		return false, fmt.Sprintf("epoch %d", e1)
	})
	r := c.Reconciliation(l2, l2.A.JM.Epoch(), "completed", 5*time.Minute)
	if r.Counts.Executions != int64(total) || r.Counts.KeptRunning != int64(total) || r.Counts.Reports != int64(len(sims)) ||
		r.Counts.Missing+r.Counts.Failed+r.Counts.Rejected+r.Counts.TmsMissing != 0 {
		t.Fatalf("reconciliation counts %v, want all %d executions kept running from %d reports", r.Counts, total, len(sims))
	}
	var chunks, cancels, maxChunk int64
	for _, s := range sims {
		chunks += s.Chunks.Load()
		cancels += s.Cancels.Load()
		maxChunk = max(maxChunk, s.MaxChunkBytes.Load())
	}
	if cancels != 0 || maxChunk > int64(transport.ChunkBudget(0)) {
		t.Fatalf("%d cancels sent (want 0); largest report chunk %d bytes (budget %d)", cancels, maxChunk, transport.ChunkBudget(0))
	}
	t.Logf("leader killed; %d executions kept from %d reports in %d chunks (largest %d bytes, budget %d), %d ms from start to commit (%s)",
		total, len(sims), chunks, maxChunk, transport.ChunkBudget(0), r.EndedAt-r.StartedAt, time.Since(start).Round(time.Millisecond))

	f := c.Follower()
	hs := httptest.NewServer(jmserver.NewHTTPHandler(jmserver.Deps{Node: f.A.Node, State: f.A.State, JM: f.A.JM}))
	defer hs.Close()
	for i, j := range jobs {
		id, n := ids[i], int(graph.Size(j.jg).Executions)
		for _, rep := range []*tc.JM{l2, f} {
			tc.WaitFor(t, 2*time.Minute, j.what+": the reconciled job on "+rep.ID, func() (bool, string) {
				running, all := tc.RunningCount(rep, id)
				return running == n && all == n, fmt.Sprintf("%d of %d RUNNING", running, all)
			})
			if got := attemptFingerprint(rep, id); got != before[i] {
				t.Fatalf("%s: the attempts on %s changed through the failover", j.what, rep.ID)
			}
		}
		// The CLI, through the new leader: the summary, and every subtask with --all.
		out := captureStdout(t, func() error { return run([]string{"job", "status", id, "--addr", l2.GRPCAddr}) })
		if want := fmt.Sprintf("%d tasks: RUNNING %d", n, n); !strings.Contains(out, want) {
			t.Fatalf("%s: job status lacks %q:\n%s", j.what, want, out)
		}
		out = captureStdout(t, func() error { return run([]string{"job", "status", id, "--all", "--addr", f.GRPCAddr}) })
		if rows := subtaskRows(out); len(rows) != n {
			t.Fatalf("%s: job status --all printed %d subtask rows, want %d", j.what, len(rows), n)
		}
		// The REST view, on a follower: the summary, and every execution in pages.
		var sum pb.GetJobResponse
		restGet(t, hs.URL+"/api/v1/jobs/"+id, http.StatusOK, &sum)
		if sum.Summary.GetTasks() != int32(n) || sum.Summary.GetTasksRunning() != int32(n) {
			t.Fatalf("%s: REST summary %v", j.what, sum.Summary)
		}
		seen, pages, tok := 0, 0, ""
		for {
			var page pb.GetJobResponse
			restGet(t, hs.URL+"/api/v1/jobs/"+id+"?view=executions&page_token="+tok, http.StatusOK, &page)
			seen += len(page.Executions)
			pages++
			if tok = page.NextPageToken; tok == "" {
				break
			}
		}
		if seen != n {
			t.Fatalf("%s: REST pages held %d executions, want %d", j.what, seen, n)
		}
		t.Logf("%s: readable after the failover: job status (summary, %d rows with --all), REST summary and %d executions in %d pages (%s)",
			j.what, n, seen, pages, time.Since(start).Round(time.Millisecond))
	}
}

// attemptFingerprint lists the job's current attempts (vertex, subtask, attempt id, TM) on a
// replica, in graph order.
func attemptFingerprint(j *tc.JM, id string) string {
	var b strings.Builder
	j.A.State.WithJob(id, func(rec *pb.JobRecord) {
		for _, v := range rec.ExecutionGraph.GetVertices() {
			for _, ev := range v.Subtasks {
				fmt.Fprintf(&b, "%s[%d]=%s@%s;", ev.VertexId, ev.SubtaskIndex, ev.GetCurrent().GetAttemptId(), ev.GetCurrent().GetSlot().GetTmId())
			}
		}
	})
	return b.String()
}
