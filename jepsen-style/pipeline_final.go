package jepsen

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/jmcluster/jmcluster/internal/pipelinecheck"
	"github.com/jmcluster/jmcluster/jepsen-style/checker"
	"github.com/jmcluster/jmcluster/jepsen-style/client"
)

// pipelineClosing is the number of closing clicks: a few per source subtask (the sources
// split the stream by sequence), so every subtask's watermark passes every window.
const pipelineClosing = 4 * PipelineParallelism

// finishPipeline stops the publisher, publishes the clicks that close every window, waits
// (up to PipelineWait) until the table and the output stream hold every window of the
// acknowledged clicks, reads both and runs the pipeline checkers.
func (r *run) finishPipeline(ctx context.Context) {
	pl := r.pipe
	if pl == nil || pl.pub == nil {
		return
	}
	p := r.cfg.Progress
	pl.stopPub()
	pl.pubWG.Wait()
	in := checker.PipelineInput{WindowMs: PipelineWindow.Milliseconds(), Restarts: -1}
	var closingErr error
	if pl.pub.Err() != nil {
		in.Unacked = 1
		r.rep.Notes = append(r.rep.Notes, "pipeline: a publish failed for good: "+pl.pub.Err().Error())
	}
	after := pl.pub.LastTS() + 2*PipelineWindow.Milliseconds() + PipelineOutOfOrder.Milliseconds() + 1000
	closingErr = pl.pub.Close(ctx, pipelineClosing, after)
	acked := map[string]bool{}
	for _, c := range pl.pub.Acked() {
		acked[c.ID] = true
		switch {
		case c.Late:
			in.LatePublished++
		case !c.Closing:
			in.Published = append(in.Published, c.Click)
		}
	}
	// The stream is the job's input: a click stored without its acknowledgement (a publish
	// given up) is counted as published, and named.
	stored, lateStored, lost, err := pl.storedClicks(ctx, acked)
	switch {
	case err != nil:
		r.rep.Notes = append(r.rep.Notes, "pipeline: reading the stream "+pipelineClicksStream+": "+err.Error())
	case len(stored) > 0 || lost > 0:
		in.Published = append(in.Published, stored...)
		in.Unacked = len(stored)
		r.rep.Notes = append(r.rep.Notes, fmt.Sprintf("pipeline: %d clicks in %s never acknowledged (counted as published), %d acknowledged ones not in it",
			len(stored), pipelineClicksStream, lost))
	}
	in.LateStored = lateStored
	want := pipelinecheck.Totals(in.Published, in.WindowMs)
	if closingErr != nil {
		r.rep.Notes = append(r.rep.Notes, "pipeline: the closing clicks: "+closingErr.Error())
	}
	p("pipeline: %d clicks acknowledged in %d windows; closing clicks at event time %d; waiting for the sinks", len(in.Published), len(want), after)

	start := time.Now()
	var windowsIn time.Time // when the table and the stream first held every window
	var table, stream checker.PipelineInput
	lastSaid := time.Now()
	var seen [4]int // what the sinks held at the last change, and when it changed
	changed := time.Now()
	for {
		table, stream = in, in
		stream.LateStored = nil // the dead letters are the table checker's
		table.Rows, table.ReadErr = pl.readTable(ctx)
		stream.Rows, stream.Unparsed, stream.ReadErr = pl.readStream(ctx)
		inTable, inStream := covered(want, table.Rows), covered(want, stream.Rows)
		dead, _ := r.pipelineDeadLetters(pl.jobID)
		inDead := lateCovered(lateStored, dead)
		windows := inTable == len(want) && inStream == len(want)
		if windows && windowsIn.IsZero() {
			windowsIn = time.Now()
		}
		// The dead letters commit with the checkpoint of the last windows or the next one: once
		// every window is in, a late click still missing after a few checkpoints is missing.
		done := windows && (inDead == len(lateStored) || time.Since(windowsIn) > pipelineDeadLetterWait)
		if now := [4]int{len(table.Rows), len(stream.Rows), inDead, len(dead)}; now != seen {
			seen, changed = now, time.Now()
		}
		stalled := r.cfg.Pipeline.StallWait > 0 && time.Since(changed) > r.cfg.Pipeline.StallWait
		if done || stalled || time.Since(start) > PipelineWait || ctx.Err() != nil {
			if stalled && !done {
				p("pipeline: nothing the sinks hold changed for %s: the wait ends", r.cfg.Pipeline.StallWait)
			}
			p("pipeline: after %s the table holds %d of the %d windows (%d rows), the stream %d (%d messages), the dead letters %d of the %d late clicks",
				time.Since(start).Round(time.Millisecond), inTable, len(want), len(table.Rows), inStream, len(stream.Rows), inDead, len(lateStored))
			break
		}
		if time.Since(lastSaid) >= 5*time.Second {
			p("pipeline: waiting: the table holds %d of the %d windows, the stream %d, the dead letters %d of the %d late clicks (%s; last errors: %q, %q)",
				inTable, len(want), inStream, inDead, len(lateStored), time.Since(start).Round(time.Second), table.ReadErr, stream.ReadErr)
			lastSaid = time.Now()
		}
		time.Sleep(500 * time.Millisecond)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	if rec, fr := client.ConsistentRead(rctx, r.pool, pl.jobID); rec != nil {
		table.Restarts, stream.Restarts = int(rec.GetRestarts()), int(rec.GetRestarts())
	} else {
		r.rep.Notes = append(r.rep.Notes, "pipeline: the job's final read failed: "+fr.Err)
	}
	cancel()
	dead, err := r.pipelineDeadLetters(pl.jobID)
	if err != nil {
		r.rep.Notes = append(r.rep.Notes, "pipeline: dead letters: "+err.Error())
	}
	table.DeadLetters = dead
	writeJSON(filepath.Join(pl.dir, "table.json"), table.Rows)
	writeJSON(filepath.Join(pl.dir, "stream.json"), stream.Rows)
	pl.results = []checker.Result{checker.PipelineTable(table), checker.PipelineStream(stream)}
}

// pipelineDeadLetters reads the job's committed dead letters: the union of the dead-letter
// file sink's parts over every TM's work dir (a part committed again on another TM after a
// restore is read once; a file still .tmp is not committed), each line "<tm>: <dead letter>".
func (r *run) pipelineDeadLetters(jobID string) ([]string, error) {
	var dirs []pipelinecheck.PartDir
	for _, tm := range r.topo.TMs() {
		dirs = append(dirs, pipelinecheck.PartDir{Dir: filepath.Join(NodeDir(r.dir, r.topo, tm), "work"), Name: tm})
	}
	return pipelinecheck.CommittedLines(dirs, strings.NewReplacer("{job}", jobID, "{subtask}", "*").Replace(pipelineDeadLetters)+".part-*")
}

// storedClicks reads the clicks stream: the clicks it holds that were never acknowledged,
// the lineage the source gives each late click it holds (acknowledged or not: each must be in
// the dead letters once), and how many acknowledged clicks it does not hold.
func (pl *pipeline) storedClicks(ctx context.Context, acked map[string]bool) (unacked []pipelinecheck.Click, late []pipelinecheck.Lineage, lost int, err error) {
	msgs, err := pipelinecheck.ReadStream(ctx, pl.nats.js, pipelineClicksStream, 30*time.Second)
	if err != nil {
		return nil, nil, 0, err
	}
	seen := map[string]bool{}
	late = []pipelinecheck.Lineage{}
	for _, m := range msgs {
		seen[m.ID] = true
		var c pipelinecheck.Click
		if err := json.Unmarshal(m.Data, &c); err != nil {
			return nil, nil, 0, fmt.Errorf("sequence %d: %w", m.Seq, err)
		}
		switch {
		case c.Late: // in no window, acknowledged or not
			late = append(late, pipelinecheck.StreamLineage(m.Seq, PipelineParallelism))
		case !acked[m.ID]:
			unacked = append(unacked, c)
		}
	}
	for id := range acked {
		if !seen[id] {
			lost++
		}
	}
	return unacked, late, lost, nil
}

// pipelineDeadLetterWait is how long the harness waits for the late clicks in the dead letters
// once every window is in: five checkpoint intervals.
const pipelineDeadLetterWait = 5 * client.StreamCheckpointInterval

// lateCovered counts the late clicks of the stream (their lineages) the dead letters hold at
// least once.
func lateCovered(late []pipelinecheck.Lineage, dead []string) int {
	in := map[pipelinecheck.Lineage]bool{}
	for _, l := range dead {
		if lin, ok, late := checker.LateClick(l); ok && late {
			in[lin] = true
		}
	}
	n := 0
	for _, lin := range late {
		if in[lin] {
			n++
		}
	}
	return n
}

// covered counts the windows of want rows hold at least once.
func covered(want map[pipelinecheck.WindowKey]pipelinecheck.Total, rows []checker.PipelineRow) int {
	seen := map[pipelinecheck.WindowKey]bool{}
	for _, r := range rows {
		k := pipelinecheck.WindowKey{User: r.User, Start: r.Start}
		if _, ok := want[k]; ok {
			seen[k] = true
		}
	}
	return len(seen)
}

// readTable reads every row of the pipeline's table.
func (pl *pipeline) readTable(ctx context.Context) ([]checker.PipelineRow, string) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pl.pg.Connect(ctx, pipelineDB)
	if err != nil {
		return nil, err.Error()
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, "SELECT user_id, window_start, clicks, amount, ordinal FROM "+pipelineTable)
	if err != nil {
		return nil, err.Error()
	}
	defer rows.Close()
	var out []checker.PipelineRow
	for rows.Next() {
		var r checker.PipelineRow
		if err := rows.Scan(&r.User, &r.Start, &r.Count, &r.Sum, &r.Ordinal); err != nil {
			return nil, err.Error()
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, err.Error()
	}
	return out, ""
}

// readStream reads every message of the output stream.
func (pl *pipeline) readStream(ctx context.Context) (rows []checker.PipelineRow, unparsed []string, readErr string) {
	msgs, err := pipelinecheck.ReadStream(ctx, pl.nats.js, pipelineOutStream, 30*time.Second)
	if err != nil {
		return nil, nil, err.Error()
	}
	for _, m := range msgs {
		res, err := pipelinecheck.ParseResult(m.Data)
		if err != nil {
			unparsed = append(unparsed, fmt.Sprintf("sequence %d: %v", m.Seq, err))
			continue
		}
		rows = append(rows, checker.PipelineRow{User: res.Key, Start: res.Start, Count: res.Count, Sum: res.Sum, Ordinal: res.Ordinal, ID: m.ID})
	}
	return rows, unparsed, ""
}
