package main

import (
	"strings"

	"github.com/jmcluster/jmcluster/security"

	"context"
	"fmt"
	"path/filepath"
	"sort"
	"time"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/internal/proccluster"
	"github.com/jmcluster/jmcluster/operator"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// procs is a cluster of jmnode processes (internal/proccluster) seen through the JobMasters'
// client API: what the demo and the process tests wait for. Every wait polls with a deadline
// and reports what it last saw.
type procs struct {
	*proccluster.Cluster
	dir string
	// sec: the client certificate the waits connect with (nil: plaintext).
	sec *security.TLS
}

// newProcs prepares (does not start) a loopback cluster of bin under dir.
func newProcs(bin, dir string, o proccluster.LocalOptions) (*procs, error) {
	nodes, err := proccluster.Local(dir, o)
	if err != nil {
		return nil, err
	}
	c, err := proccluster.New(bin, nodes)
	if err != nil {
		return nil, err
	}
	return &procs{Cluster: c, dir: dir}, nil
}

// liveJM is the first JobMaster whose process runs.
func (d *procs) liveJM() *proccluster.Proc {
	for _, p := range d.JMs {
		if p.Running() {
			return p
		}
	}
	return d.JMs[0]
}

func (d *procs) client(addr string) *conn {
	c, _ := dial(addr, 0, d.sec)
	return c
}

func (d *procs) status(addr string) (*pb.ClusterStatusResponse, error) {
	c := d.client(addr)
	defer c.cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return c.client().ClusterStatus(ctx, &pb.ClusterStatusRequest{})
}

// waitFor polls the live JMs' cluster status until cond holds on one of them.
func (d *procs) waitFor(ctx context.Context, limit time.Duration, what string, cond func(*pb.ClusterStatusResponse) bool) error {
	deadline := time.Now().Add(limit)
	var last string
	for time.Now().Before(deadline) && ctx.Err() == nil {
		for _, p := range d.JMs {
			if !p.Running() {
				continue
			}
			cs, err := d.status(p.Addrs.GRPC)
			if err != nil {
				last = err.Error()
				continue
			}
			if cond(cs) {
				return nil
			}
			last = fmt.Sprintf("%s sees leader %q epoch %d reconciling %v", p.Name, cs.LeaderId, cs.Epoch, cs.Reconciling)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("timed out waiting for %s (last seen: %s)", what, last)
}

// waitLeader waits for an established leader other than not, which does not reconcile.
func (d *procs) waitLeader(ctx context.Context, not string, limit time.Duration) (*pb.ClusterStatusResponse, error) {
	var got *pb.ClusterStatusResponse
	err := d.waitFor(ctx, limit, "an established leader", func(cs *pb.ClusterStatusResponse) bool {
		if cs.LeaderGrpcAddress != "" && cs.LeaderId != not && !cs.Reconciling {
			got = cs
			return true
		}
		return false
	})
	return got, err
}

// waitSelfLeader is waitLeader read only from the leader itself: a follower's view of who
// leads, and at which epoch, may be one election old.
func (d *procs) waitSelfLeader(ctx context.Context, limit time.Duration) (*pb.ClusterStatusResponse, error) {
	var got *pb.ClusterStatusResponse
	err := d.waitFor(ctx, limit, "an established leader, by its own status", func(cs *pb.ClusterStatusResponse) bool {
		if cs.LeaderGrpcAddress != "" && cs.NodeId == cs.LeaderId && !cs.Reconciling {
			got = cs
			return true
		}
		return false
	})
	return got, err
}

// waitTMs waits until the leader's view holds n live TaskManagers with slots.
func (d *procs) waitTMs(ctx context.Context, limit time.Duration, n int, slots int32) error {
	var seen string
	err := d.waitFor(ctx, limit, fmt.Sprintf("%d TaskManagers registered", n), func(cs *pb.ClusterStatusResponse) bool {
		live := 0
		var tms []string
		for _, tm := range cs.TaskManagers {
			tms = append(tms, fmt.Sprintf("%s %s %d slots", tm.Id, tm.State, tm.Slots))
			if tm.Slots > 0 && (slots == 0 || tm.Slots == slots) && tm.State != "dead" && tm.State != "lost" {
				live++
			}
		}
		seen = fmt.Sprintf("%s's TaskManagers: [%s]", cs.NodeId, strings.Join(tms, ", "))
		return live == n
	})
	if err != nil && seen != "" {
		err = fmt.Errorf("%w; %s", err, seen)
	}
	return err
}

// getJob reads a job from the first live JobMaster that serves it.
func (d *procs) getJob(id string) (*pb.JobRecord, string, error) {
	var lastErr error
	for _, p := range d.JMs {
		if !p.Running() {
			continue
		}
		c := d.client(p.Addrs.GRPC)
		rec, err := readJob(c, time.Second, id, false)
		c.cc.Close()
		if err == nil {
			return rec, p.Name, nil
		}
		lastErr = err
	}
	return nil, "", lastErr
}

func (d *procs) waitJob(ctx context.Context, id string, limit time.Duration, cond func(*pb.JobRecord) bool) (*pb.JobRecord, error) {
	deadline := time.Now().Add(limit)
	last := "nothing"
	for time.Now().Before(deadline) && ctx.Err() == nil {
		rec, from, err := d.getJob(id)
		if err == nil {
			if cond(rec) {
				return rec, nil
			}
			last = fmt.Sprintf("%s, %d/%d running, read from %s", graph.JobStatusName(rec.Status), pbSummary(rec).running, pbSummary(rec).total, from)
		} else {
			last = err.Error()
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil, fmt.Errorf("timed out waiting for job %s (last seen: %s)", id, last)
}

// waitAllRunning is waitJob(allRunning) that polls the job's summary (its counts, a few
// hundred bytes) and reads the whole record once the summary says every task runs: a wide
// job's full record, read every poll, costs its JobMaster and this process CPU that a
// deployment measured on two cores competes with.
func (d *procs) waitAllRunning(ctx context.Context, id string, limit time.Duration) (*pb.JobRecord, error) {
	deadline := time.Now().Add(limit)
	last := "nothing"
	for time.Now().Before(deadline) && ctx.Err() == nil {
		s, from, err := d.jobSummary(id)
		switch {
		case err != nil:
			last = err.Error()
		case s.Tasks > 0 && s.TasksRunning == s.Tasks:
			rec, _, err := d.getJob(id)
			if err == nil && allRunning(rec) {
				return rec, nil
			}
			last = fmt.Sprintf("summary %d/%d running, record: %v", s.TasksRunning, s.Tasks, err)
		default:
			last = fmt.Sprintf("%s, %d/%d running, read from %s", graph.JobStatusName(s.Status), s.TasksRunning, s.Tasks, from)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil, fmt.Errorf("timed out waiting for job %s to run every task (last seen: %s)", id, last)
}

// jobSummary is the job's summary from the first running JobMaster that answers, and its name.
func (d *procs) jobSummary(id string) (*pb.JobSummary, string, error) {
	var lastErr error
	for _, p := range d.JMs {
		if !p.Running() {
			continue
		}
		c := d.client(p.Addrs.GRPC)
		var s *pb.JobSummary
		err := c.call(time.Second, func(ctx context.Context) error {
			r, err := c.client().GetJob(ctx, &pb.GetJobRequest{JobId: id, View: pb.JobView_JOB_VIEW_SUMMARY})
			if err == nil {
				s = r.Summary
			}
			return err
		})
		c.cc.Close()
		if err == nil {
			return s, p.Name, nil
		}
		lastErr = err
	}
	return nil, "", lastErr
}

func allRunning(rec *pb.JobRecord) bool {
	s := pbSummary(rec)
	return s.total > 0 && s.running == s.total
}

// compareAttempts lists executions whose attempt changed between two views of a job.
func compareAttempts(before, after *pb.JobRecord) []string {
	ids := map[string]string{}
	for _, v := range before.ExecutionGraph.Vertices {
		for _, ev := range v.Subtasks {
			ids[fmt.Sprintf("%s[%d]", ev.VertexId, ev.SubtaskIndex)] = fmt.Sprintf("%s#%d", ev.GetCurrent().GetAttemptId(), ev.GetCurrent().GetAttemptNumber())
		}
	}
	var changed []string
	for _, v := range after.ExecutionGraph.Vertices {
		for _, ev := range v.Subtasks {
			k := fmt.Sprintf("%s[%d]", ev.VertexId, ev.SubtaskIndex)
			if ids[k] != fmt.Sprintf("%s#%d", ev.GetCurrent().GetAttemptId(), ev.GetCurrent().GetAttemptNumber()) {
				changed = append(changed, k)
			}
		}
	}
	sort.Strings(changed)
	return changed
}

type sinkTotals struct{ count, gaps, dups int64 }

// sinkTotals adds up the checksum sinks' files of a job in every TaskManager's work dir.
func (d *procs) sinkTotals(jobID string) sinkTotals {
	var t sinkTotals
	for _, p := range d.TMs {
		files, _ := filepath.Glob(filepath.Join(p.WorkDir, "checksum-"+jobID+"-*.json"))
		for _, f := range files {
			c, err := operator.ReadChecksum(f)
			if err != nil {
				continue
			}
			t.count += c.Count
			for _, o := range c.Origins {
				t.gaps += o.Gaps
				t.dups += o.Duplicates
			}
		}
	}
	return t
}

func (d *procs) waitSink(ctx context.Context, jobID string, atLeast int64) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if d.sinkTotals(jobID).count >= atLeast {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("the checksum sinks did not reach %d records (have %d)", atLeast, d.sinkTotals(jobID).count)
}
