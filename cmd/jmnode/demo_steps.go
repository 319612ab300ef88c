package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/reconcile"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// watchFailover prints each step of the failover as the surviving JMs show it: the new
// leader, the gate, the job RECONCILING, and once the new leader's reconciliation record is
// completed, its steps (recordSteps), the job's status history and the record's counts.
func (d *demo) watchFailover(ctx context.Context, jobID, oldLeader string, oldEpoch uint64, killAt time.Time) error {
	since := func() string { return time.Since(killAt).Round(time.Millisecond).String() }
	deadline := time.Now().Add(60 * time.Second)
	seenLeader, seenReconciling, seenJobRec := false, false, false
	for time.Now().Before(deadline) && ctx.Err() == nil {
		for _, p := range d.JMs {
			if !p.Running() {
				continue
			}
			cs, err := d.status(p.Addrs.GRPC)
			if err != nil {
				continue
			}
			if !seenLeader && cs.LeaderId != "" && cs.LeaderId != oldLeader && cs.Epoch > oldEpoch {
				seenLeader = true
				d.say("+%s new leader %s, epoch %d -> %d (EstablishLeadership committed; RPC gate closed)", since(), cs.LeaderId, oldEpoch, cs.Epoch)
			}
			if seenLeader && cs.Reconciling && !seenReconciling {
				seenReconciling = true
				d.say("+%s leader is RECONCILING: TaskManager RPCs other than reports are refused with RECONCILING", since())
			}
			if !seenJobRec {
				if rec, _, err := d.getJob(jobID); err == nil && rec.Status == pb.JobStatus_JOB_STATUS_RECONCILING {
					seenJobRec = true
					d.say("+%s job %s is RECONCILING, its %d executions RECONCILING", since(), jobID[:8], pbSummary(rec).total)
				}
			}
			for _, r := range cs.Reconciliations {
				if r.Epoch > oldEpoch && r.Outcome == "completed" {
					for _, s := range recordSteps(r) {
						d.say("+%s   reconcile %-9s %s", s.at.Sub(killAt).Round(time.Millisecond), s.name, s.detail)
					}
					if rec, _, err := d.getJob(jobID); err == nil {
						var steps []string
						for _, h := range rec.History {
							if at := time.UnixMilli(h.Timestamp); !at.Before(killAt.Add(-time.Second)) {
								steps = append(steps, fmt.Sprintf("%s at +%s", graph.JobStatusName(h.Status), at.Sub(killAt).Round(time.Millisecond)))
							}
						}
						d.say("+%s job status history since the kill: %s", since(), strings.Join(steps, " -> "))
					}
					d.say("+%s reconciliation committed: %d TaskManager reports, %s", since(), r.GetCounts().GetReports(), recCounts(r.Counts))
					d.say("+%s RPC gate open; took %s from the leader's election", since(), recDuration(r))
					return nil
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return errors.New("timed out waiting for the reconciliation to complete")
}

// step is one step of a reconciliation as the record shows it.
type step struct {
	at           time.Time
	name, detail string
}

// recordSteps are the steps of a completed reconciliation, read from its record (the leader's
// clock, carried by END_RECONCILIATION): begin, each TaskManager's report (or refusal), the
// deadline when TMs were missing, the merge and the commit. The names and details are those
// the reconciler logs.
func recordSteps(r *pb.ReconciliationRecord) []step {
	ms := func(t int64) time.Time { return time.UnixMilli(t) }
	out := []step{{ms(r.StartedAt), "begin", fmt.Sprintf("%d jobs RECONCILING", len(r.Jobs))}}
	var missing []string
	for _, rep := range r.Reports {
		switch rep.Outcome {
		case "reported":
			detail := fmt.Sprintf("%s reported %d executions", rep.TmId, rep.Executions)
			if rep.AsExpected {
				detail += " (as expected: one message, no execution listed)"
			}
			out = append(out, step{ms(rep.At), "report", detail})
		case "refused":
			out = append(out, step{ms(rep.At), "report-refused", fmt.Sprintf("%s; %s counts as not reported", rep.Detail, rep.TmId)})
		case "missing":
			missing = append(missing, rep.TmId)
		case "dead":
			if detail, ok := reconcile.DeadStep(rep.Detail); ok {
				out = append(out, step{ms(rep.At), "dead", detail})
			}
		}
	}
	if len(missing) > 0 {
		out = append(out, step{ms(r.CollectedAt), "deadline", "report deadline passed; no report from " + strings.Join(missing, ", ")})
	}
	out = append(out,
		step{ms(r.MergedAt), "merged", reconcile.Summary(len(r.Jobs), r.Counts)},
		step{ms(r.EndedAt), "committed", fmt.Sprintf("reconciled graph committed in %s", time.Duration(r.EndedAt-r.StartedAt)*time.Millisecond)})
	return out
}
