package reconcile

import (
	"context"
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/internal/logsum"
	"github.com/jmcluster/jmcluster/jobmaster"
	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// collector asks TMs for their reports until every TM that matters answered, is proven dead
// (its gRPC port refused connections: jobmaster/liveness.go), gossip reports it dead and its
// report request failed, or the deadline passes. TMs that appear during the window are asked too. Reports that
// arrive after the deadline are "late": the graph has already decided, so the attempts in them
// that it no longer owns are cancelled.
type collector struct {
	r     *Reconciler
	t     jobmaster.Term
	epoch uint64

	mu       sync.Mutex
	reports  map[string]*Report
	refused  map[string]error                 // TMs whose report passed a bound: not waited for, not asked again
	failed   map[string]bool                  // TMs a report request has failed for
	proven   map[string]jobmaster.TaskManager // TMs not waited for because the leader proved them dead
	gone     map[string]bool                  // TMs not waited for because gossip reports them dead and their request failed
	asked    map[string]target
	closed   bool // past the deadline: further reports are late
	late     []*Report
	lateCh   chan struct{}
	wake     chan struct{} // a report arrived: look again without waiting for the tick
	deposed  error
	plan     *Plan
	inflight sync.WaitGroup
	// The record's view of the collection (END_RECONCILIATION carries it): when each TM's
	// report arrived or was refused, and when collection ended, by the leader's clock.
	at          map[string]int64
	collectedAt int64
	notWaited   []string // waited-for TMs still without a report when collection ended
}

func newCollector(r *Reconciler, t jobmaster.Term) *collector {
	return &collector{r: r, t: t, epoch: t.Epoch(), reports: map[string]*Report{}, refused: map[string]error{}, failed: map[string]bool{}, proven: map[string]jobmaster.TaskManager{}, gone: map[string]bool{}, asked: map[string]target{}, lateCh: make(chan struct{}, 1), wake: make(chan struct{}, 1), at: map[string]int64{}}
}

func (c *collector) collect(ctx context.Context, initial []target) (map[string]*Report, error) {
	deadline := time.Now().Add(c.r.cfg.ReportDeadline)
	for _, t := range initial {
		c.ask(ctx, t, deadline)
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		// TMs that registered or appeared in gossip during the window report too.
		for _, tm := range c.t.TMs() {
			if tm.GRPCAddr != "" && !tm.GoneByGossip() {
				c.ask(ctx, target{id: tm.ID, addr: tm.GRPCAddr}, deadline)
			}
		}
		c.mu.Lock()
		if c.deposed != nil {
			err := c.deposed
			c.mu.Unlock()
			return nil, err
		}
		waiting := c.waitingLocked()
		if len(waiting) == 0 || time.Now().After(deadline) {
			c.closed = true
			c.collectedAt, c.notWaited = time.Now().UnixMilli(), waiting
			out := make(map[string]*Report, len(c.reports))
			for k, v := range c.reports {
				out[k] = v
			}
			c.mu.Unlock()
			if len(waiting) > 0 {
				c.r.step(c.epoch, "deadline", "report deadline passed; no report from %s", logsum.List(waiting))
			}
			return out, nil
		}
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		case <-c.wake:
		}
	}
}

// waitingLocked lists the asked TMs that hold committed attempts and have not reported or been
// refused, leaving out those that gossip reports dead and that failed a report request.
func (c *collector) waitingLocked() []string {
	var out []string
	for id, t := range c.asked {
		if c.reports[id] != nil || c.refused[id] != nil {
			continue
		}
		// A TM that holds no committed attempt of a reconciling job is asked (it may run
		// attempts the graph does not own, which its report has cancelled) but not waited
		// for: its silence changes no execution, and a dead one would keep the gate closed
		// until the deadline.
		if !t.holds {
			continue
		}
		// A TM whose port refused the leader's connections is gone, and its tasks with it
		// (the assumptions are in docs/reconciliation.md): its silence is final.
		if tm, ok := c.t.TM(id); ok && tm.Dead != "" {
			if _, seen := c.proven[id]; !seen {
				c.proven[id] = tm
				c.r.step(c.epoch, "dead", "%s; not waited for", tm.Dead)
			}
			continue
		}
		// Gossip alone is not enough (it marks a busy live member dead now and then, and such a
		// TM's report would be lost with its tasks), but gossip's verdict together with a failed
		// report request is.
		if tm, ok := c.t.TM(id); ok && tm.GoneByGossip() && c.failed[id] {
			if !c.gone[id] {
				c.gone[id] = true
				c.r.step(c.epoch, "dead", "%s; not waited for", goneDetail(id))
			}
			continue
		}
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

func (c *collector) ask(ctx context.Context, t target, deadline time.Time) {
	c.mu.Lock()
	if _, ok := c.asked[t.id]; ok || t.addr == "" {
		c.mu.Unlock()
		return
	}
	c.asked[t.id] = t
	c.mu.Unlock()
	c.inflight.Add(1)
	go func() {
		defer c.inflight.Done()
		// Keep trying past the deadline (bounded), so a slow TM's report is handled as late.
		giveUp := deadline.Add(2 * c.r.cfg.ReportDeadline)
		for ctx.Err() == nil && time.Now().Before(giveUp) {
			rep, err := c.fetch(ctx, t)
			if err == nil {
				c.deliver(rep)
				return
			}
			if transport.IsStaleEpoch(err) {
				c.mu.Lock()
				c.deposed = errors.Join(ErrDeposed, err)
				c.mu.Unlock()
				return
			}
			if errors.Is(err, ErrReportTooLarge) || errors.Is(err, ErrContradictoryReport) {
				c.refuse(t.id, err)
				return
			}
			c.r.log.Debug("report request failed; retrying", "epoch", c.epoch, "tm", t.id, "error", err)
			c.mu.Lock()
			c.failed[t.id] = true
			c.mu.Unlock()
			c.poke()
			select {
			case <-ctx.Done():
			case <-time.After(c.r.cfg.RetryInterval):
			}
		}
	}()
}

func (c *collector) deliver(rep *Report) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		c.late = append(c.late, rep)
		select {
		case c.lateCh <- struct{}{}:
		default:
		}
		return
	}
	c.reports[rep.TMID] = rep
	c.at[rep.TMID] = time.Now().UnixMilli()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	if rep.AsExpected {
		c.r.step(c.epoch, "report", "%s reported %d executions (as expected)", rep.TMID, rep.Expected)
	} else {
		c.r.step(c.epoch, "report", "%s reported %d executions", rep.TMID, len(rep.Executions))
	}
}

// refuse records that a TM's report passed a bound: the TM counts as not reported.
func (c *collector) refuse(id string, err error) {
	c.mu.Lock()
	c.refused[id] = err
	c.at[id] = time.Now().UnixMilli()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	c.mu.Unlock()
	c.r.log.Error("report refused", "epoch", c.epoch, "tm", id, "error", err)
	c.r.step(c.epoch, "report-refused", "%v; %s counts as not reported", err, id)
}

// record lists every TM asked for a report as the reconciliation record shows it: reported
// or refused when it arrived, missing (waited for until collection ended) or dead (proven
// dead by refused connections, when the proof came; or gossip reports it dead and its request
// failed, when collection ended), ordered by time, then id. Call it after collect.
func (c *collector) record() (collectedAt int64, out []*pb.ReconciliationReport) {
	c.mu.Lock()
	defer c.mu.Unlock()
	missing := map[string]bool{}
	for _, id := range c.notWaited {
		missing[id] = true
	}
	for id := range c.asked {
		r := &pb.ReconciliationReport{TmId: id, Outcome: "dead", At: c.collectedAt}
		switch {
		case c.reports[id] != nil:
			r.Outcome, r.At, r.Executions = "reported", c.at[id], int64(len(c.reports[id].Executions))+c.reports[id].Expected
			r.AsExpected = c.reports[id].AsExpected
		case c.refused[id] != nil:
			r.Outcome, r.At, r.Detail = "refused", c.at[id], c.refused[id].Error()
		case missing[id]:
			r.Outcome = "missing"
		case c.proven[id].Dead != "":
			r.At, r.Detail = c.proven[id].DeadAt.UnixMilli(), c.proven[id].Dead
		case c.gone[id]:
			r.Detail = goneDetail(id)
		default:
			// Held nothing and did not report: not dead. At a cluster's first election the
			// TaskManagers have not registered yet; say so.
			r.Detail = idleDetail
			if tm, ok := c.t.TM(id); ok && !tm.Registered {
				r.Detail = NotRegisteredDetail
			}
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].At != out[j].At {
			return out[i].At < out[j].At
		}
		return out[i].TmId < out[j].TmId
	})
	return c.collectedAt, out
}

// idleDetail is the record's detail of a TM that held no committed attempt and had not
// reported when collection ended (not waited for).
const idleDetail = "no report by the end of collection; holds no committed attempt, so not waited for"

// NotRegisteredDetail is the record's detail of a TM that held no committed attempt, had not
// reported when collection ended and had not registered with the new leader: at a cluster's
// first election, every TaskManager. The record's outcome stays "dead" (the outcomes a record
// may carry are fixed: fsm); the views show "not yet registered".
const NotRegisteredDetail = "not yet registered with this leader; no report by the end of collection; holds no committed attempt, so not waited for"

// goneDetail is the record's detail of a TM gossip reports dead whose report request failed.
func goneDetail(id string) string {
	return "gossip reports " + id + " dead and its report request failed"
}

// DeadStep is the step a reconciliation logged for a TM its record shows "dead" with detail,
// and whether it logged one (it logs none for a TM that held nothing and did not report).
func DeadStep(detail string) (string, bool) {
	if detail == "" || detail == idleDetail || detail == NotRegisteredDetail {
		return "", false
	}
	return detail + "; not waited for", true
}

// handleLate cancels, on TMs whose report came after the deadline, every attempt the
// committed graph does not own as a live execution on that TM.
func (c *collector) handleLate(ctx context.Context) {
	done := make(chan struct{})
	go func() { c.inflight.Wait(); close(done) }()
	for {
		select {
		case <-ctx.Done():
			return
		case <-done:
			c.processLate(ctx)
			return
		case <-c.lateCh:
			c.processLate(ctx)
		}
	}
}

func (c *collector) processLate(ctx context.Context) {
	c.mu.Lock()
	late := c.late
	c.late = nil
	c.mu.Unlock()
	for _, rep := range late {
		n := 0
		for _, e := range rep.Executions {
			if graph.IsTerminalExecution(e.State) || c.owned(rep.TMID, e) {
				continue
			}
			n++
			c.t.Cancel(e.JobId, e.AttemptId, rep.Addr)
		}
		c.r.step(c.epoch, "late-report", "%s reported after the deadline; cancelled %d attempts the graph no longer owns", rep.TMID, n)
	}
}

func (c *collector) owned(tmID string, e *pb.ExecutionReport) bool {
	owned := false
	c.t.WithJob(e.JobId, func(rec *pb.JobRecord) {
		ev := graph.FindAttempt(rec.ExecutionGraph, e.AttemptId)
		owned = ev != nil && ev.Current.GetSlot().GetTmId() == tmID && !graph.IsTerminalExecution(ev.Current.State)
	})
	return owned
}

// poke wakes the collect loop without waiting for its tick.
func (c *collector) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}
