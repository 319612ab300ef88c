// Package pipelinecheck is what `jmnode demo-pipeline` and the fault suite's pipeline workload
// share about a click pipeline (JetStream -> key by user -> tumbling window -> sinks): the
// click events, the window totals they must produce, the comparison of a sink's rows with
// those totals, and the reading of a JetStream stream from its first message to its last.
package pipelinecheck

import (
	"fmt"
	"sort"
)

// Click is one event as published: {"user":"user-07","amount":3,"ts":1796515200020}. A late
// click ({"late":true}) is published with an event time behind every window's watermark: a
// correct pipeline sends it to its dead letters and counts it in no window.
type Click struct {
	User   string `json:"user"`
	Amount int64  `json:"amount"`
	TS     int64  `json:"ts"`
	Late   bool   `json:"late,omitempty"`
}

// WindowKey names one window row: a user and the start of its window (unix ms).
type WindowKey struct {
	User  string
	Start int64
}

// Total is a window row's values: the count of clicks and the sum of their amounts.
type Total struct{ Count, Sum int64 }

// WindowStart is the start of the tumbling window of size sizeMs that holds event time ts
// (windows aligned to the epoch, as operator/window.go assigns them).
func WindowStart(ts, sizeMs int64) int64 {
	r := ts % sizeMs
	if r < 0 {
		r += sizeMs
	}
	return ts - r
}

// Totals is what a tumbling window of sizeMs must produce from clicks: per user and window,
// the count and the amount.
func Totals(clicks []Click, sizeMs int64) map[WindowKey]Total {
	out := map[WindowKey]Total{}
	for _, c := range clicks {
		k := WindowKey{c.User, WindowStart(c.TS, sizeMs)}
		t := out[k]
		t.Count++
		t.Sum += c.Amount
		out[k] = t
	}
	return out
}

// Sums is the clicks and amounts of totals.
func Sums(totals map[WindowKey]Total) (clicks, amount int64) {
	for _, t := range totals {
		clicks += t.Count
		amount += t.Sum
	}
	return clicks, amount
}

// CompareTotals says how got differs from want, sorted: every window once with its values,
// none else (a window got holds more than once is named with its count).
func CompareTotals(want map[WindowKey]Total, got map[WindowKey][]Total) (problems []string) {
	for k, w := range want {
		g := got[k]
		switch {
		case len(g) == 0:
			problems = append(problems, fmt.Sprintf("missing %s %d (want %d clicks, amount %d)", k.User, k.Start, w.Count, w.Sum))
		case len(g) > 1:
			problems = append(problems, fmt.Sprintf("%s %d written %d times", k.User, k.Start, len(g)))
		case g[0] != w:
			problems = append(problems, fmt.Sprintf("%s %d: %d clicks, amount %d; want %d, %d", k.User, k.Start, g[0].Count, g[0].Sum, w.Count, w.Sum))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			problems = append(problems, fmt.Sprintf("unexpected window %s %d (%d rows, first %d clicks, amount %d)", k.User, k.Start, len(g), g[0].Count, g[0].Sum))
		}
	}
	sort.Strings(problems)
	return problems
}

// Lineage names a record by its source subtask (origin) and its sequence there, as a dead
// letter carries it.
type Lineage struct {
	Origin int32
	Seq    int64
}

// StreamLineage is the lineage nats_source gives the message at stream sequence seq when the
// source has parallelism subtasks: subtask (seq-1) mod parallelism reads it, as its
// ((seq-1) div parallelism)-th record (operator/nats_source.go).
func StreamLineage(seq uint64, parallelism int) Lineage {
	p := uint64(max(parallelism, 1))
	return Lineage{Origin: int32((seq - 1) % p), Seq: int64((seq - 1) / p)}
}
