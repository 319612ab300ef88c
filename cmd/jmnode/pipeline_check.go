package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jmcluster/jmcluster/internal/pipelinecheck"
)

// errNotEqual: the sink's output is not what was published.
var errNotEqual = errors.New("the sink's output differs from what was published")

// report prints the comparison and returns errNotEqual when it found a problem.
func (d *pipelineDemo) report(got map[pipelinecheck.WindowKey][]pipelinecheck.Total, extra []string) error {
	rows := 0
	var gc, ga int64
	for _, ts := range got {
		for _, t := range ts {
			rows++
			gc += t.Count
			ga += t.Sum
		}
	}
	wc, wa := pipelinecheck.Sums(d.plan.totals)
	d.say("published: %d clicks in %d user-minute windows, amount %d", wc, len(d.plan.totals), wa)
	d.say("%-10s %d clicks in %d %s, amount %d", d.sinkShort()+":", gc, rows, d.rowName(), ga)
	problems := append(pipelinecheck.CompareTotals(d.plan.totals, got), extra...)
	if len(problems) == 0 {
		d.say("EQUAL: every window exactly once, no duplicate row")
		return nil
	}
	const show = 10
	for i, p := range problems {
		if i == show {
			d.say("  ... %d more", len(problems)-show)
			break
		}
		d.say("  %s", p)
	}
	return fmt.Errorf("%w: %d problems (%s)", errNotEqual, len(problems), strings.Join(problems[:min(3, len(problems))], "; "))
}

func (d *pipelineDemo) rowName() string {
	if d.sink == "postgres" {
		return "rows"
	}
	return "messages"
}

func (d *pipelineDemo) sinkShort() string {
	if d.sink == "postgres" {
		return "table"
	}
	return "stream"
}

// results is what the sink committed so far.
func (d *pipelineDemo) results(ctx context.Context) (map[pipelinecheck.WindowKey][]pipelinecheck.Total, error) {
	if d.sink == "postgres" {
		return d.pg.readTotals(ctx)
	}
	got, _, err := d.nats.readTotals(ctx)
	return got, err
}

// check compares the sink's output with the plan and what the sink must have left behind: no
// dead letter, and for PostgreSQL no prepared transaction.
func (d *pipelineDemo) check(ctx context.Context, jobID string) error {
	var extra []string
	var got map[pipelinecheck.WindowKey][]pipelinecheck.Total
	var err error
	if d.sink == "postgres" {
		if got, err = d.pg.readTotals(ctx); err != nil {
			return err
		}
		prepared, err := d.pg.preparedXacts(ctx)
		if err != nil {
			return err
		}
		d.say("pg_prepared_xacts: %d transactions left", len(prepared))
		for _, name := range prepared {
			extra = append(extra, "prepared transaction left: "+name)
		}
	} else {
		var more []string
		if got, more, err = d.nats.readTotals(ctx); err != nil {
			return err
		}
		extra = append(extra, more...)
	}
	dead, err := d.deadLetters(jobID)
	if err != nil {
		return err
	}
	d.say("dead letters: %d", len(dead))
	for _, l := range dead {
		extra = append(extra, "dead letter: "+l)
	}
	return d.report(got, extra)
}

// deadLetters reads the job's committed dead-letter lines, the union of the dead-letter file
// sink's parts over every TaskManager's work directory (a part committed again on another
// TaskManager after a restore is read once).
func (d *pipelineDemo) deadLetters(jobID string) ([]string, error) {
	dirs := make([]pipelinecheck.PartDir, 0, len(d.TMs))
	for _, p := range d.TMs {
		dirs = append(dirs, pipelinecheck.PartDir{Dir: p.WorkDir})
	}
	return pipelinecheck.CommittedLines(dirs, "dead-letters-"+jobID+"-*.jsonl.part-*")
}
