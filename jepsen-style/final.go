package jepsen

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/jmcluster/jmcluster/jepsen-style/checker"
	"github.com/jmcluster/jmcluster/jepsen-style/client"
	"github.com/jmcluster/jmcluster/jepsen-style/history"
	"github.com/jmcluster/jmcluster/jepsen-style/report"
)

// finish runs the final phase (RUNNING wait, state hashes, consistent reads, sink files, the
// streaming job's checkpoint view), stops the cluster, runs every checker and writes the
// report.
func (r *run) finish(ctx context.Context, rec *history.Recorder, gen *client.Generator, sinkAtHeal []checker.SinkFile) (*report.Report, error) {
	p := r.cfg.Progress
	r.waitRunning(ctx)
	r.finishPipeline(ctx)

	fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	rounds := client.HashRounds(fctx, r.pool)
	cancel()
	writeJSON(filepath.Join(r.dir, "statehash.json"), rounds)
	p("final: %d state-hash rounds", len(rounds))

	fctx, cancel = context.WithTimeout(ctx, 30*time.Second)
	finalReads := client.FinalReads(fctx, r.pool, gen.JobIDs())
	streamRec, _ := client.ConsistentRead(fctx, r.pool, r.streamID)
	cancel()
	p("final: %d jobs read back", len(finalReads))
	writeJSON(filepath.Join(r.dir, "final.json"), finalReads)
	sinkAtEnd := r.sinkFiles()
	// After the documents: a checkpoint a document names that is still pending here was
	// committed before it completed.
	fctx, cancel = context.WithTimeout(ctx, 10*time.Second)
	finalCheckpoints := client.ReadCheckpoints(fctx, r.pool, r.streamID)
	cancel()
	ckViews := r.monitor.CheckpointViews()
	if finalCheckpoints != nil {
		ckViews = append(ckViews, *finalCheckpoints)
	} else {
		r.rep.Notes = append(r.rep.Notes, "the final checkpoint view of the streaming job could not be read")
	}
	writeJSON(filepath.Join(r.dir, "checkpoints.json"), ckViews)
	p("final: %d checkpoint views", len(ckViews))

	r.rep.End = time.Now()
	r.cluster.Stop(5 * time.Second)
	lifetimes := r.cluster.Lifetimes()
	events, evErr := r.events()
	if evErr != nil {
		r.rep.Notes = append(r.rep.Notes, "event logs: "+evErr.Error())
	}

	calls, err := history.Pair(rec.Ops())
	if err != nil {
		return nil, err
	}
	affected := map[string]bool{}
	for _, f := range r.rep.Faults {
		for _, tm := range f.AffectedTMs {
			affected[tm] = true
		}
	}
	r.rep.JMOnly = len(affected) == 0
	var affectedTMs []string
	for tm := range affected {
		affectedTMs = append(affectedTMs, tm)
	}
	sort.Strings(affectedTMs)

	lin, info := checker.Linearizable(calls, 60*time.Second)
	if lin.Verdict == checker.Fail {
		vis := filepath.Join(r.dir, "linearizability.html")
		if err := porcupine.VisualizePath(checker.JobModel(), info, vis); err == nil {
			r.rep.Visualization = "linearizability.html"
		}
	}
	// FORWARD edges from source to sink: each sink subtask's one origin arrives contiguous.
	contiguous := checker.ForwardOnly(client.StreamingJob(r.streamID), client.StreamSinkVertex)
	finalRestarts := -1
	if streamRec != nil {
		finalRestarts = int(streamRec.GetRestarts())
	}
	r.rep.Checkers = []checker.Result{
		lin,
		checker.NoLostSubmissions(calls, finalReads),
		checker.NoConcurrentAttempts(events, lifetimes, r.rep.End),
		checker.StoppedTasksEnded(events, finalReads, checker.StoppedSettle),
		checker.RestartDetected(events, finalReads, TMHeartbeatInterval/2),
		checker.UpdatesInOrder(events, lifetimes),
		checker.Restarts(checker.RestartInput{JobID: r.streamID, Graph: client.StreamingJob(r.streamID), Events: events,
			JMOnly: r.rep.JMOnly, AffectedTMs: affectedTMs, FinalRestarts: finalRestarts}),
		checker.StateHashes(rounds, len(JMs())),
		checker.RunningAfterHeal(r.monitor.JobStatuses(), r.rep.HealAt, r.cfg.Grace),
		checker.SinkContinuity(checker.SinkInput{JobID: r.streamID, Subtasks: client.StreamParallelism,
			JMOnly: r.rep.JMOnly, AtHeal: sinkAtHeal, End: sinkAtEnd}),
		checker.CommittedExactlyOnce(checker.CommittedInput{JobID: r.streamID, Subtasks: client.StreamParallelism, Contiguous: contiguous,
			Views: ckViews, Final: finalCheckpoints, AtHeal: sinkAtHeal, End: sinkAtEnd}),
		checker.CheckpointIDs(ckViews),
	}
	r.rep.Checkers = append(r.rep.Checkers, r.pipelineResults()...)
	r.rep.Stalls = r.stalls.close()
	writeJSON(filepath.Join(r.dir, "stalls.json"), r.rep.Stalls)
	if n := len(r.rep.Stalls); n > 0 {
		r.rep.Notes = append(r.rep.Notes, fmt.Sprintf("%d stall(s) of the leader while clients waited; goroutine dumps in %s/ (report: Stalls)", n, StallDir))
	}
	obs := r.monitor.Observations()
	statuses := r.monitor.JobStatuses()
	r.rep.Finish(calls, obs, statuses)
	if d, ok := report.TimeToHealthy(obs, statuses, r.rep.HealAt, len(JMs())); ok {
		r.rep.TimeToHealthyMs = d.Milliseconds()
	} else {
		r.rep.TimeToHealthyMs = -1
		r.rep.Notes = append(r.rep.Notes, "the cluster was never seen healthy after heal")
	}
	if err := r.rep.Write(r.dir); err != nil {
		return r.rep, err
	}
	for _, c := range r.rep.Checkers {
		p("checker %-22s %-7s %s", c.Name, c.Verdict, c.Summary)
	}
	p("report: %s", filepath.Join(r.dir, "report.html"))
	if !r.rep.Valid {
		return r.rep, fmt.Errorf("%w: %s seed %d (see %s)", ErrInvalid, r.cfg.Scenario, r.cfg.Seed, filepath.Join(r.dir, "report.html"))
	}
	return r.rep, nil
}

// waitRunning waits until the monitor saw the streaming job RUNNING after heal, or the grace
// period ended.
func (r *run) waitRunning(ctx context.Context) {
	deadline := r.rep.HealAt.Add(r.cfg.Grace)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		for _, s := range r.monitor.JobStatuses() {
			if !s.Time.Before(r.rep.HealAt) && s.Status == "JOB_STATUS_RUNNING" {
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// sinkFiles reads every checksum document under the TMs' work dirs.
func (r *run) sinkFiles() []checker.SinkFile {
	var out []checker.SinkFile
	for _, tm := range r.topo.TMs() {
		root := filepath.Join(NodeDir(r.dir, r.topo, tm), "work")
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".json") {
				return nil
			}
			if doc, ok := checker.ReadChecksum(path); ok {
				out = append(out, checker.SinkFile{Path: path, TM: tm, Doc: doc})
			}
			return nil
		})
	}
	return out
}

// events reads every TM's event log.
func (r *run) events() ([]checker.TaskEvent, error) {
	var all []checker.TaskEvent
	var errs []string
	for _, tm := range r.topo.TMs() {
		f, err := os.Open(EventLogPath(r.dir, r.topo, tm))
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		evs, err := checker.ParseEvents(f)
		f.Close()
		if err != nil {
			errs = append(errs, tm+": "+err.Error())
		}
		for i := range evs {
			if evs[i].TM == "" {
				evs[i].TM = tm
			}
		}
		all = append(all, evs...)
	}
	if len(errs) > 0 {
		return all, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return all, nil
}
