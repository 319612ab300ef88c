package metrics

import (
	"cmp"
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// FlowState is what a JobMasterState may also provide: the leader's measure of each running
// vertex's data flow (jobmaster.Flows, from the heartbeats' samples in its memory); nil on a
// node that does not lead.
type FlowState interface {
	VertexFlows() []VertexFlow
}

// VertexFlow is one vertex's data flow (jobmaster.VertexFlow with its job).
type VertexFlow struct {
	Job, Vertex                   string
	RecordsInPerS, RecordsOutPerS float64
	Backpressure                  float64 // 0..1, the highest over the subtasks
	Watermark                     int64   // unix ms; 0: none (the series is left out)
	WatermarkLagMs                int64
	DeadLetters                   int64
}

// MaxFlowSeries bounds the vertices exported per scrape (by job id, then vertex id): each is
// a set of series labelled job and vertex. The vertices beyond it are counted in
// jmcluster_vertex_flow_dropped, never left out silently; the job views show them all.
const MaxFlowSeries = 1000

var (
	descFlowIn      = prometheus.NewDesc(Namespace+"_vertex_records_in_per_second", "Records a running vertex read from its inputs per second, summed over its subtasks, between their last two heartbeats (the leader only).", []string{"job", "vertex"}, nil)
	descFlowOut     = prometheus.NewDesc(Namespace+"_vertex_records_out_per_second", "Records a running vertex emitted per second, summed over its subtasks (the leader only).", []string{"job", "vertex"}, nil)
	descFlowBP      = prometheus.NewDesc(Namespace+"_vertex_backpressure_ratio", "The highest share of time, over a running vertex's subtasks, that a subtask waited for space in a full subpartition of its output, 0..1 (the leader only).", []string{"job", "vertex"}, nil)
	descFlowWM      = prometheus.NewDesc(Namespace+"_vertex_watermark_seconds", "A running vertex's watermark, the lowest of its subtasks' (Unix time; absent while a subtask has none: a job without event time; the leader only).", []string{"job", "vertex"}, nil)
	descFlowWMLag   = prometheus.NewDesc(Namespace+"_vertex_watermark_lag_seconds", "How far a running vertex's watermark is behind the leader's wall clock (absent with the watermark).", []string{"job", "vertex"}, nil)
	descFlowDL      = prometheus.NewDesc(Namespace+"_vertex_dead_letters", "Records the current attempts of a running vertex sent to the job's dead-letter output (the leader only).", []string{"job", "vertex"}, nil)
	descFlowDropped = prometheus.NewDesc(Namespace+"_vertex_flow_dropped", "Running vertices whose flow series this scrape left out, over the "+strconv.Itoa(MaxFlowSeries)+" exported (the job views show them).", nil, nil)
)

// flowGauges reads the leader's per-vertex flow at a scrape: a read of its in-memory samples
// (bounded by the running subtasks), not of the jobs.
type flowGauges struct{ st JobMasterState }

func (g *flowGauges) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descFlowIn, descFlowOut, descFlowBP, descFlowWM, descFlowWMLag, descFlowDL, descFlowDropped} {
		ch <- d
	}
}

func (g *flowGauges) Collect(ch chan<- prometheus.Metric) {
	fs, ok := g.st.(FlowState)
	if !ok {
		return
	}
	flows := fs.VertexFlows()
	if flows == nil {
		return
	}
	slices.SortFunc(flows, func(a, b VertexFlow) int { return cmp.Or(cmp.Compare(a.Job, b.Job), cmp.Compare(a.Vertex, b.Vertex)) })
	dropped := max(len(flows)-MaxFlowSeries, 0)
	for _, f := range flows[:len(flows)-dropped] {
		ch <- prometheus.MustNewConstMetric(descFlowIn, prometheus.GaugeValue, f.RecordsInPerS, f.Job, f.Vertex)
		ch <- prometheus.MustNewConstMetric(descFlowOut, prometheus.GaugeValue, f.RecordsOutPerS, f.Job, f.Vertex)
		ch <- prometheus.MustNewConstMetric(descFlowBP, prometheus.GaugeValue, f.Backpressure, f.Job, f.Vertex)
		ch <- prometheus.MustNewConstMetric(descFlowDL, prometheus.GaugeValue, float64(f.DeadLetters), f.Job, f.Vertex)
		if f.Watermark != 0 {
			ch <- prometheus.MustNewConstMetric(descFlowWM, prometheus.GaugeValue, float64(f.Watermark)/1000, f.Job, f.Vertex)
			ch <- prometheus.MustNewConstMetric(descFlowWMLag, prometheus.GaugeValue, float64(f.WatermarkLagMs)/1000, f.Job, f.Vertex)
		}
	}
	ch <- prometheus.MustNewConstMetric(descFlowDropped, prometheus.GaugeValue, float64(dropped))
}
