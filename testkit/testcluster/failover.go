package testcluster

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/taskmanager"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// ReconcilingLeader waits for a live replica that is the established leader with its RPC gate
// still closed (reconciliation in progress) and returns it.
func (c *Cluster) ReconcilingLeader(timeout time.Duration) *JM {
	c.T.Helper()
	var got *JM
	WaitFor(c.T, timeout, "a leader in RECONCILING", func() (bool, string) {
		var seen []string
		for _, j := range c.Live() {
			seen = append(seen, fmt.Sprintf("%s: epoch %d active %v reconciling %v", j.ID, j.A.JM.Epoch(), j.A.JM.Active(), j.A.JM.Reconciling()))
			if j.A.JM.Reconciling() {
				got = j
				return true, ""
			}
		}
		return false, strings.Join(seen, ", ")
	})
	return got
}

// Reconciliation waits until the replica j holds the reconciliation record of epoch with the
// given outcome ("completed", "abandoned", "in_progress") and returns it.
func (c *Cluster) Reconciliation(j *JM, epoch uint64, outcome string, timeout time.Duration) *pb.ReconciliationRecord {
	c.T.Helper()
	var got *pb.ReconciliationRecord
	WaitFor(c.T, timeout, fmt.Sprintf("reconciliation record of epoch %d %s on %s", epoch, outcome, j.ID), func() (bool, string) {
		if j.A == nil {
			return false, j.ID + " is stopped"
		}
		var seen []string
		for _, r := range j.A.State.Reconciliations() {
			seen = append(seen, fmt.Sprintf("epoch %d %s", r.Epoch, r.Outcome))
			if r.Epoch == epoch && r.Outcome == outcome {
				got = r
				return true, ""
			}
		}
		return false, strings.Join(seen, ", ")
	})
	return got
}

// CompletedAfter waits until a live replica holds a completed reconciliation record of an
// epoch above after that reconciled at least one execution, and returns the one of the lowest
// such epoch: the reconciliation that followed a failover, even if another election (a busy
// machine) came after it and found nothing left to reconcile.
func (c *Cluster) CompletedAfter(after uint64, timeout time.Duration) *pb.ReconciliationRecord {
	c.T.Helper()
	var got *pb.ReconciliationRecord
	WaitFor(c.T, timeout, fmt.Sprintf("a completed reconciliation record of an epoch above %d with executions", after), func() (bool, string) {
		var seen []string
		for _, j := range c.Live() {
			for _, r := range j.A.State.Reconciliations() {
				seen = append(seen, fmt.Sprintf("%s: epoch %d %s", j.ID, r.Epoch, r.Outcome))
				if r.Epoch > after && r.Outcome == "completed" && r.GetCounts().GetExecutions() > 0 && (got == nil || r.Epoch < got.Epoch) {
					got = r
				}
			}
		}
		return got != nil, strings.Join(seen, ", ")
	})
	return got
}

// SilenceTM stops a TaskManager's servers and tasks but keeps its gossip membership alive, so
// gossip does not report it dead, and keeps its gRPC port open — a listener takes it over that
// accepts connections and never answers, as a hung process would — so the leader has no proof
// that it is gone (a refused connection is such proof: KillTM): a leader must wait for its
// report until the deadline.
func (c *Cluster) SilenceTM(tm *TM) {
	if tm.A == nil || tm.A.TM == nil {
		return
	}
	addr := tm.A.TM.GRPCAddr()
	tm.A.TM.Kill()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		c.T.Fatalf("silence %s: hold its gRPC port %s: %v", tm.ID, addr, err)
	}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, conn)
			mu.Unlock()
		}
	}()
	c.T.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, conn := range held {
			_ = conn.Close()
		}
	})
}

// TMByID returns the TaskManager with the id.
func (c *Cluster) TMByID(id string) *TM {
	for _, tm := range c.TMs {
		if tm.ID == id {
			return tm
		}
	}
	return nil
}

// Events reads the task lifecycle events (start and stop) of a job from every TaskManager's
// event log.
func (c *Cluster) Events(jobID string) []taskmanager.Event {
	var out []taskmanager.Event
	for _, tm := range c.TMs {
		f, err := os.Open(tm.EventLog)
		if err != nil {
			continue
		}
		s := bufio.NewScanner(f)
		s.Buffer(make([]byte, 1<<20), 1<<20)
		for s.Scan() {
			var e taskmanager.Event
			if json.Unmarshal(s.Bytes(), &e) == nil && e.Job == jobID && (e.Event == "start" || e.Event == "stop") {
				out = append(out, e)
			}
		}
		f.Close()
	}
	return out
}

// Restarted lists the "start" events of a job with an attempt number above zero: tasks that
// were started again.
func (c *Cluster) Restarted(jobID string) []string {
	var out []string
	for _, e := range c.Events(jobID) {
		if e.Event == "start" && e.AttemptNumber > 0 {
			out = append(out, fmt.Sprintf("%s[%d]#%d on %s", e.Vertex, e.Subtask, e.AttemptNumber, e.TM))
		}
	}
	return out
}

// HistoryAfter returns the job statuses recorded after the first n entries of the history.
func HistoryAfter(rec *pb.JobRecord, n int) []string {
	var out []string
	for i, h := range rec.History {
		if i >= n {
			out = append(out, graph.JobStatusName(h.Status))
		}
	}
	return out
}

// Subsequence reports whether want appears in order (not necessarily adjacent) in got.
func Subsequence(got []string, want ...string) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}

// FindExecution returns the execution with the attempt id, current or earlier.
func FindExecution(rec *pb.JobRecord, attemptID string) *pb.Execution {
	for _, v := range rec.GetExecutionGraph().GetVertices() {
		for _, ev := range v.Subtasks {
			if ev.GetCurrent().GetAttemptId() == attemptID {
				return ev.Current
			}
			for _, h := range ev.History {
				if h.AttemptId == attemptID {
					return h
				}
			}
		}
	}
	return nil
}

// StopQuorum kills the leader and one follower of a three-replica cluster, so no leader can
// exist, and returns them for RestartAll.
func (c *Cluster) StopQuorum() []*JM {
	c.T.Helper()
	l := c.Leader()
	f := c.Follower()
	c.KillJM(l)
	c.KillJM(f)
	return []*JM{l, f}
}

// RestartAll starts the stopped replicas again from their data directories.
func (c *Cluster) RestartAll(js []*JM) {
	c.T.Helper()
	for _, j := range js {
		c.StartJM(j)
	}
}
