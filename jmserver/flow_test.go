package jmserver_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/agent"
	"github.com/jmcluster/jmcluster/operator"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// summaryOf reads the job's summary from j.
func summaryOf(t *testing.T, c *testcluster.Cluster, j *testcluster.JM, id string) (*pb.JobSummary, error) {
	resp, err := c.Client(j).GetJob(ctxT(t), &pb.GetJobRequest{JobId: id})
	if err != nil {
		return nil, err
	}
	return resp.GetSummary(), nil
}

// describeFlow is the vertices' flow as a test failure shows it.
func describeFlow(s *pb.JobSummary) string {
	var parts []string
	for _, v := range s.GetVertices() {
		if v.FlowSubtasks == nil {
			parts = append(parts, v.VertexId+": unmeasured")
			continue
		}
		parts = append(parts, fmt.Sprintf("%s: %d subtasks, in %.1f/s out %.1f/s bp %.2f dl %d wm %v",
			v.VertexId, v.GetFlowSubtasks(), v.GetRecordsInPerS(), v.GetRecordsOutPerS(), v.GetBackpressure(), v.GetDeadLetters(), v.Watermark))
	}
	return strings.Join(parts, "; ")
}

// TestVertexFlowInTheJobViews: a running streaming job (source -> map -> sink, parallelism 2,
// on two real TaskManagers) shows records in and out per second for every vertex within a few
// heartbeats, on the leader's job view, on a follower's (it asks the leader), in the follower's
// REST view and in the leader's metrics; no watermark (the job has no event time) and no dead letters.
func TestVertexFlowInTheJobViews(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{TMs: 2, JM: func(cfg *agent.JobMasterConfig) { cfg.HTTPAddr = "127.0.0.1:0" }})
	id := c.Submit(testcluster.StreamingChain("flow", 2, 2000, 0))
	flowing := func(s *pb.JobSummary) bool {
		for _, v := range s.GetVertices() {
			if v.GetFlowSubtasks() != 2 || v.Watermark != nil || v.WatermarkLagMs != nil || v.GetDeadLetters() != 0 || v.Backpressure == nil {
				return false
			}
			if v.VertexId != "source" && v.GetRecordsInPerS() <= 0 || v.VertexId != "sink" && v.GetRecordsOutPerS() <= 0 {
				return false
			}
		}
		return len(s.GetVertices()) == 3
	}
	for _, j := range []*testcluster.JM{c.Leader(), c.Follower()} {
		testcluster.WaitFor(t, 30*time.Second, "records per second on every vertex, as "+j.ID+" shows them", func() (bool, string) {
			s, err := summaryOf(t, c, j, id)
			if err != nil {
				return false, err.Error()
			}
			return flowing(s), describeFlow(s)
		})
	}

	// The REST view of a follower: the fields by their JSON names; no watermark yet.
	f := c.Follower()
	testcluster.WaitFor(t, 10*time.Second, "the flow in "+f.ID+"'s REST view", func() (bool, string) {
		r, err := http.Get("http://" + f.A.HTTPAddr() + "/api/v1/jobs/" + id)
		if err != nil {
			return false, err.Error()
		}
		defer r.Body.Close()
		var v struct {
			Summary struct {
				Vertices []map[string]any `json:"vertices"`
			} `json:"summary"`
		}
		if err := json.NewDecoder(r.Body).Decode(&v); err != nil {
			return false, err.Error()
		}
		for _, vx := range v.Summary.Vertices {
			_, in := vx["records_in_per_s"]
			_, bp := vx["backpressure"]
			_, dl := vx["dead_letters"]
			_, wm := vx["watermark"]
			if !in || !bp || !dl || wm {
				return false, fmt.Sprint(vx)
			}
		}
		return len(v.Summary.Vertices) == 3, fmt.Sprint(v.Summary.Vertices)
	})

	// The leader's metrics: a series per vertex of the job.
	testcluster.WaitFor(t, 10*time.Second, "the leader's vertex gauges", func() (bool, string) {
		mfs, err := c.Leader().A.Metrics.Registry().Gather()
		if err != nil {
			return false, err.Error()
		}
		seen := map[string]float64{}
		for _, mf := range mfs {
			if mf.GetName() != "jmcluster_vertex_records_out_per_second" {
				continue
			}
			for _, m := range mf.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["job"] == id {
					seen[labels["vertex"]] = m.GetGauge().GetValue()
				}
			}
		}
		return len(seen) == 3 && seen["source"] > 0 && seen["map"] > 0, fmt.Sprint(seen)
	})
}

// blockAll is a transform that takes one record and then blocks until released: its input
// stops, and its upstream waits for space.
type blockAll struct{ release <-chan struct{} }

func (b blockAll) Process(*operator.Context, operator.Record) error {
	<-b.release
	return nil
}

// TestBackpressureAtTheUpstreamOfABlockedVertex: when a vertex stops taking records (its
// transform blocks), its upstream vertex shows backpressure near 1 within a few heartbeats and
// the blocked vertex, whose own output has room, none: over local channels (one TaskManager),
// and with ALL_TO_ALL across two TaskManagers of one slot each, where half of each source
// subtask's channels are Exchange streams (its wait counts whichever subpartition fills first).
func TestBackpressureAtTheUpstreamOfABlockedVertex(t *testing.T) {
	for _, tc := range []struct {
		name string
		tms  int
		job  func() *pb.JobGraph
	}{
		{"local", 1, func() *pb.JobGraph { return testcluster.StreamingChain("backpressure", 1, 0, 0) }},
		{"remote", 2, func() *pb.JobGraph {
			jg := testcluster.StreamingChain("backpressure-remote", 2, 0, 0)
			jg.Edges[0].Distribution = pb.Distribution_DISTRIBUTION_ALL_TO_ALL
			return jg
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			operator.ReplaceTransform(t, "map", false, func(*pb.Operator, operator.Info) operator.Transform { return blockAll{release} })
			c := testcluster.New(t, testcluster.Options{TMs: tc.tms, Slots: 1})
			var once sync.Once
			t.Cleanup(func() { once.Do(func() { close(release) }) }) // before the cluster stops: the tasks can end
			id := c.Submit(tc.job())
			testcluster.WaitFor(t, 30*time.Second, "backpressure near 1 at the source, none at the map", func() (bool, string) {
				s, err := summaryOf(t, c, c.Leader(), id)
				if err != nil {
					return false, err.Error()
				}
				bp := map[string]*float64{}
				for _, v := range s.GetVertices() {
					if v.GetFlowSubtasks() == v.Parallelism {
						bp[v.VertexId] = v.Backpressure
					}
				}
				return bp["source"] != nil && *bp["source"] >= 0.9 && bp["map"] != nil && *bp["map"] <= 0.1, describeFlow(s)
			})
		})
	}
}
