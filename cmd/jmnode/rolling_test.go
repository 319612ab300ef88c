package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/internal/proccluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// writeProbe writes every 50 ms (a CancelJob of a job that does not exist: a write the
// established leader serves, NOT_FOUND, behind the gate like any other) to the JobMasters in
// turn until one serves it, and records the longest time no write was served.
type writeProbe struct {
	mu      sync.Mutex
	last    time.Time // the last served write
	longest time.Duration
	served  int
	stop    chan struct{}
	done    chan struct{}
}

func startWriteProbe(d *procs) *writeProbe {
	w := &writeProbe{last: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	conns := make([]*conn, len(d.JMs))
	for i, p := range d.JMs {
		conns[i] = d.client(p.Addrs.GRPC)
	}
	go func() {
		defer close(w.done)
		defer func() {
			for _, c := range conns {
				c.cc.Close()
			}
		}()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			for _, c := range conns {
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				_, err := c.client().CancelJob(ctx, &pb.CancelJobRequest{JobId: "00000000000000000000000000000000"})
				cancel()
				if status.Code(err) == codes.NotFound {
					w.mu.Lock()
					now := time.Now()
					w.longest = max(w.longest, now.Sub(w.last))
					w.last, w.served = now, w.served+1
					w.mu.Unlock()
					break
				}
			}
		}
	}()
	return w
}

func (w *writeProbe) finish() (longest time.Duration, served int) {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return max(w.longest, time.Since(w.last)), w.served
}

// TestRollingRestartBySIGTERM: with hashicorp/raft's default timings, the three JobMasters are
// restarted one at a time by SIGTERM (followers first, then the leader, which hands leadership
// over before it stops) while a streaming job runs and a client writes every 50 ms: no task
// restarts and no attempt changes, the checksum sinks see no gap and no duplicate and keep
// growing, and no write goes unserved for longer than two Raft heartbeat timeouts.
func TestRollingRestartBySIGTERM(t *testing.T) {
	// Not parallel: it bounds a latency (two Raft heartbeat timeouts) that other tests' load stretches.
	if testing.Short() {
		t.Skip("builds jmnode and runs processes")
	}
	d := newProcessCluster(t, defaultRaftProcs)
	before := submitChain(t, d, "rolling", 3)
	ctx := context.Background()
	jobID := before.JobGraph.JobId
	if err := d.waitSink(ctx, jobID, 100); err != nil {
		t.Fatal(err)
	}
	leader, err := d.waitLeader(ctx, "", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var order []*proccluster.Proc
	for _, p := range d.JMs {
		if p.Name != leader.LeaderId {
			order = append(order, p)
		}
	}
	order = append(order, d.Proc(leader.LeaderId))
	probe := startWriteProbe(d)
	for _, p := range order {
		was := d.sinkTotals(jobID).count
		stopped := time.Now()
		p.Stop(30 * time.Second)
		if err := p.Revive(); err != nil {
			t.Fatal(err)
		}
		// Back when it names the leader and the job is RUNNING there with every task.
		if err := d.waitFor(ctx, 60*time.Second, p.Name+" back in the cluster", func(cs *pb.ClusterStatusResponse) bool {
			st, err := d.status(p.Addrs.GRPC)
			return err == nil && st.LeaderId != "" && cs.LeaderId != "" && !cs.Reconciling
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := d.waitJob(ctx, jobID, 30*time.Second, allRunning); err != nil {
			t.Fatal(err)
		}
		if err := d.waitSink(ctx, jobID, was+50); err != nil {
			t.Fatalf("after restarting %s: %v", p.Name, err)
		}
		t.Logf("%s stopped by SIGTERM and back in %s", p.Name, time.Since(stopped).Round(time.Millisecond))
	}
	longest, served := probe.finish()
	after, err := d.waitJob(ctx, jobID, 10*time.Second, allRunning)
	if err != nil {
		t.Fatal(err)
	}
	sink := d.sinkTotals(jobID)
	t.Logf("writes served: %d, the longest without one %s; sinks: %d records, %d gaps, %d duplicates",
		served, longest.Round(time.Millisecond), sink.count, sink.gaps, sink.dups)
	var problems []string
	if diff := compareAttempts(before, after); len(diff) > 0 || after.Restarts != 0 {
		problems = append(problems, fmt.Sprintf("attempts changed: %v (restarts %d)", diff, after.Restarts))
	}
	if sink.gaps != 0 || sink.dups != 0 {
		problems = append(problems, fmt.Sprintf("sinks: %d gaps, %d duplicates", sink.gaps, sink.dups))
	}
	if longest > 2*raftHeartbeatTimeout {
		problems = append(problems, fmt.Sprintf("no write served for %s (bound: two heartbeat timeouts, %s)", longest, 2*raftHeartbeatTimeout))
	}
	if len(problems) > 0 {
		t.Fatal(strings.Join(problems, "; "))
	}
}
