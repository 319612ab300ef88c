package jmserver

import (
	"context"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/jmcluster/jmcluster/jobmaster"
	"github.com/jmcluster/jmcluster/metrics"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// withFlow sets the data flow of the summary's vertices (records in and out per second,
// backpressure, watermark and its lag, dead letters): only the leader measures it, from its
// TaskManagers' heartbeats (jobmaster.Flow). A follower asks the leader for its summary,
// marked forwarded so that a node that lost the leadership meanwhile answers from its own
// memory rather than asking on, within leaderViewTimeout; without an answer the figures stay
// absent.
func withFlow(ctx context.Context, d Deps, resp *pb.GetJobResponse) {
	s := resp.GetSummary()
	if s == nil || len(s.Vertices) == 0 {
		return
	}
	if d.JM != nil && d.JM.Active() {
		setFlow(s.Vertices, d.JM.Flow(s.JobId), time.Now())
		return
	}
	if isForwarded(ctx) || d.Node == nil || d.Node.IsLeader() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, leaderViewTimeout)
	defer cancel()
	cc, leader, err := d.Node.LeaderConn(ctx)
	if err != nil || leader == d.Node.ID() {
		return
	}
	ctx = metadata.AppendToOutgoingContext(ctx, forwardedKey, d.Node.ID())
	lr, err := pb.NewClientServiceClient(cc).GetJob(ctx, &pb.GetJobRequest{JobId: s.JobId, View: pb.JobView_JOB_VIEW_SUMMARY})
	if err != nil {
		return
	}
	byID := map[string]*pb.VertexSummary{}
	for _, v := range lr.GetSummary().GetVertices() {
		byID[v.VertexId] = v
	}
	for _, v := range s.Vertices {
		if l := byID[v.VertexId]; l != nil && l.FlowSubtasks != nil {
			v.RecordsInPerS, v.RecordsOutPerS, v.Backpressure = l.RecordsInPerS, l.RecordsOutPerS, l.Backpressure
			v.Watermark, v.WatermarkLagMs, v.DeadLetters, v.FlowSubtasks = l.Watermark, l.WatermarkLagMs, l.DeadLetters, l.FlowSubtasks
		}
	}
}

// setFlow copies the leader's measure into the vertex rows; a vertex without one keeps its
// figures absent, a vertex without a watermark its watermark and lag.
func setFlow(rows []*pb.VertexSummary, flow map[string]jobmaster.VertexFlow, now time.Time) {
	for _, v := range rows {
		f, ok := flow[v.VertexId]
		if !ok {
			continue
		}
		n := int32(f.Subtasks)
		v.FlowSubtasks = &n
		v.RecordsInPerS, v.RecordsOutPerS = ptr(round3(f.RecordsInPerS)), ptr(round3(f.RecordsOutPerS))
		v.Backpressure, v.DeadLetters = ptr(round3(f.Backpressure)), ptr(f.DeadLetters)
		if f.Watermark != 0 {
			v.Watermark, v.WatermarkLagMs = ptr(f.Watermark), ptr(max(now.UnixMilli()-f.Watermark, 0))
		}
	}
}

func ptr[T any](v T) *T { return &v }

// round3 keeps three decimals: the views change only when a figure does.
func round3(f float64) float64 { return float64(int64(f*1000+0.5)) / 1000 }

// VertexFlows is the leader's per-vertex data flow for the metrics (metrics.FlowState); nil on
// a node that does not lead.
func (m metricsState) VertexFlows() []metrics.VertexFlow {
	d := m.d
	if d.JM == nil || !d.JM.Active() {
		return nil
	}
	now := time.Now()
	out := []metrics.VertexFlow{}
	for job, vs := range d.JM.Flows() {
		for _, f := range vs {
			mf := metrics.VertexFlow{Job: job, Vertex: f.VertexID, RecordsInPerS: f.RecordsInPerS, RecordsOutPerS: f.RecordsOutPerS,
				Backpressure: f.Backpressure, DeadLetters: f.DeadLetters, Watermark: f.Watermark}
			if f.Watermark != 0 {
				mf.WatermarkLagMs = max(now.UnixMilli()-f.Watermark, 0)
			}
			out = append(out, mf)
		}
	}
	return out
}
