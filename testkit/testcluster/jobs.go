package testcluster

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/operator"
	"github.com/jmcluster/jmcluster/transport/pb"
)

func fwd(src, dst string) *pb.JobEdge {
	return &pb.JobEdge{Source: src, Target: dst, Distribution: pb.Distribution_DISTRIBUTION_FORWARD, ResultType: pb.ResultType_RESULT_TYPE_PIPELINED}
}

// StreamingChain is source -> map -> checksum sink, FORWARD and PIPELINED, each vertex with
// the given parallelism: one failover region per subtask index, and every sink subtask sees
// every record of one source subtask, so gaps and duplicates are exact. count 0 is unbounded.
func StreamingChain(name string, parallelism int32, rate float64, count int64) *pb.JobGraph {
	return &pb.JobGraph{
		Name: name, Type: pb.JobType_JOB_TYPE_STREAMING,
		Vertices: []*pb.JobVertex{
			{Id: "source", Parallelism: parallelism, Operator: &pb.Operator{Kind: &pb.Operator_SequenceSource{SequenceSource: &pb.SequenceSource{Count: count, RatePerSecond: rate, Keys: 4}}}},
			{Id: "map", Parallelism: parallelism, Operator: &pb.Operator{Kind: &pb.Operator_Map{Map: &pb.MapOperator{Multiply: 2, Add: 1}}}},
			{Id: "sink", Parallelism: parallelism, Operator: &pb.Operator{Kind: &pb.Operator_ChecksumSink{ChecksumSink: &pb.ChecksumSink{Path: "checksum-{job}-{subtask}.json", FlushIntervalMs: 50}}}},
		},
		Edges:           []*pb.JobEdge{fwd("source", "map"), fwd("map", "sink")},
		RestartStrategy: &pb.RestartStrategy{Kind: pb.RestartKind_RESTART_KIND_FIXED_DELAY, Attempts: 5, DelayMs: 100},
	}
}

// WideAllToAll is an unbounded source -> log sink job whose one edge is ALL_TO_ALL and
// PIPELINED, both vertices with the given parallelism: p x p input channels, one failover
// region (the whole job). At p = 512 it is the wide job the expanded-size limits must admit.
func WideAllToAll(name string, parallelism int32, rate float64) *pb.JobGraph {
	return &pb.JobGraph{
		Name: name, Type: pb.JobType_JOB_TYPE_STREAMING,
		Vertices: []*pb.JobVertex{
			{Id: "src", Name: "source", Parallelism: parallelism, Operator: &pb.Operator{Kind: &pb.Operator_SequenceSource{SequenceSource: &pb.SequenceSource{RatePerSecond: rate, Keys: 4096}}}},
			{Id: "sink", Name: "sink", Parallelism: parallelism, Operator: &pb.Operator{Kind: &pb.Operator_LogSink{LogSink: &pb.LogSink{}}}},
		},
		Edges:           []*pb.JobEdge{{Source: "src", Target: "sink", Distribution: pb.Distribution_DISTRIBUTION_ALL_TO_ALL, ResultType: pb.ResultType_RESULT_TYPE_PIPELINED}},
		RestartStrategy: &pb.RestartStrategy{Kind: pb.RestartKind_RESTART_KIND_FIXED_DELAY, Attempts: 3, DelayMs: 1000},
	}
}

// ForwardChain is a streaming job of `vertices` FORWARD-chained vertices of parallelism p
// (v000 -> v001 -> ...: a sequence source, maps, a log sink): one failover region per subtask
// index. At 100 x 1,000 it is the job at the default execution limit.
func ForwardChain(name string, vertices int, p int32) *pb.JobGraph {
	jg := &pb.JobGraph{Name: name, Type: pb.JobType_JOB_TYPE_STREAMING,
		RestartStrategy: &pb.RestartStrategy{Kind: pb.RestartKind_RESTART_KIND_NONE}}
	for i := 0; i < vertices; i++ {
		v := &pb.JobVertex{Id: fmt.Sprintf("v%03d", i), Parallelism: p, Operator: &pb.Operator{Kind: &pb.Operator_Map{Map: &pb.MapOperator{Multiply: 1}}}}
		switch i {
		case 0:
			v.Operator = &pb.Operator{Kind: &pb.Operator_SequenceSource{SequenceSource: &pb.SequenceSource{Keys: 1}}}
		case vertices - 1:
			v.Operator = &pb.Operator{Kind: &pb.Operator_LogSink{LogSink: &pb.LogSink{}}}
		}
		jg.Vertices = append(jg.Vertices, v)
		if i > 0 {
			jg.Edges = append(jg.Edges, fwd(jg.Vertices[i-1].Id, v.Id))
		}
	}
	return jg
}

// AllToAll is an unbounded source (parallelism p) -> log sink (parallelism q) job whose one
// edge is ALL_TO_ALL and PIPELINED, with the vertex ids given: p x q input channels in one
// failover region. Long ids make each input channel larger in the execution graph.
func AllToAll(name, srcID, sinkID string, p, q int32) *pb.JobGraph {
	jg := WideAllToAll(name, p, 1)
	jg.Vertices[0].Id, jg.Vertices[1].Id, jg.Vertices[1].Parallelism = srcID, sinkID, q
	jg.Edges[0].Source, jg.Edges[0].Target = srcID, sinkID
	return jg
}

// BatchKeyedSum is a bounded source (count records per subtask, keys keys) -> filter (odd
// values) -> ALL_TO_ALL BLOCKING -> checksum sink: two failover regions, scheduled by stage.
func BatchKeyedSum(name string, parallelism int32, count, keys int64) *pb.JobGraph {
	return &pb.JobGraph{
		Name: name, Type: pb.JobType_JOB_TYPE_BATCH,
		Vertices: []*pb.JobVertex{
			{Id: "source", Parallelism: parallelism, Operator: &pb.Operator{Kind: &pb.Operator_SequenceSource{SequenceSource: &pb.SequenceSource{Count: count, Keys: keys}}}},
			{Id: "filter", Parallelism: parallelism, Operator: &pb.Operator{Kind: &pb.Operator_Filter{Filter: &pb.FilterOperator{Modulus: 2, Remainder: 1}}}},
			{Id: "sink", Parallelism: parallelism, Operator: &pb.Operator{Kind: &pb.Operator_ChecksumSink{ChecksumSink: &pb.ChecksumSink{Path: "batch-{job}-{subtask}.json"}}}},
		},
		Edges: []*pb.JobEdge{fwd("source", "filter"),
			{Source: "filter", Target: "sink", Distribution: pb.Distribution_DISTRIBUTION_ALL_TO_ALL, ResultType: pb.ResultType_RESULT_TYPE_BLOCKING}},
		RestartStrategy: &pb.RestartStrategy{Kind: pb.RestartKind_RESTART_KIND_FIXED_DELAY, Attempts: 3, DelayMs: 50},
	}
}

// Describe is a one-line view of a job for failure messages.
func Describe(rec *pb.JobRecord) string {
	counts := map[string]int{}
	for _, v := range rec.GetExecutionGraph().GetVertices() {
		for _, ev := range v.Subtasks {
			counts[graph.ExecutionStateName(ev.GetCurrent().GetState())]++
		}
	}
	var parts []string
	for k, v := range counts {
		parts = append(parts, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(parts)
	return fmt.Sprintf("%s restarts=%d tasks[%s] cause=%q", graph.JobStatusName(rec.Status), rec.Restarts, strings.Join(parts, " "), rec.FailureCause)
}

// AllRunning: the job is RUNNING and so is every execution.
func AllRunning(rec *pb.JobRecord) bool {
	if rec.Status != pb.JobStatus_JOB_STATUS_RUNNING {
		return false
	}
	n := 0
	for _, v := range rec.GetExecutionGraph().GetVertices() {
		for _, ev := range v.Subtasks {
			if ev.GetCurrent().GetState() != pb.ExecutionState_EXECUTION_STATE_RUNNING {
				return false
			}
			n++
		}
	}
	return n > 0
}

// Attempt identifies an execution's current attempt.
type Attempt struct {
	ID     string
	Number int32
	TM     string
}

// Attempts maps "vertex[subtask]" to the current attempt.
func Attempts(rec *pb.JobRecord) map[string]Attempt {
	out := map[string]Attempt{}
	for _, v := range rec.GetExecutionGraph().GetVertices() {
		for _, ev := range v.Subtasks {
			e := ev.GetCurrent()
			out[fmt.Sprintf("%s[%d]", ev.VertexId, ev.SubtaskIndex)] = Attempt{ID: e.GetAttemptId(), Number: e.GetAttemptNumber(), TM: e.GetSlot().GetTmId()}
		}
	}
	return out
}

// Changed lists the executions whose current attempt differs between two views.
func Changed(before, after map[string]Attempt) []string {
	var out []string
	for k, a := range before {
		if after[k].ID != a.ID || after[k].Number != a.Number {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// SinkTotals sums the checksum sink files of a job across every TM work directory.
type SinkTotals struct {
	Count, Sum, Gaps, Duplicates int64
	Keys                         map[string]operator.KeyStat
	Files                        int
}

// Sinks reads every checksum file with the given prefix ("checksum" or "batch") of a job.
func (c *Cluster) Sinks(prefix, jobID string) SinkTotals {
	t := SinkTotals{Keys: map[string]operator.KeyStat{}}
	for _, tm := range c.TMs {
		files, _ := filepath.Glob(filepath.Join(tm.WorkDir, prefix+"-"+jobID+"-*.json"))
		for _, f := range files {
			cs, err := operator.ReadChecksum(f)
			if err != nil {
				continue
			}
			t.Files++
			t.Count += cs.Count
			t.Sum += cs.Sum
			for k, v := range cs.Keys {
				ks := t.Keys[k]
				ks.Count += v.Count
				ks.Sum += v.Sum
				t.Keys[k] = ks
			}
			for _, o := range cs.Origins {
				t.Gaps += o.Gaps
				t.Duplicates += o.Duplicates
			}
		}
	}
	return t
}

// Executions lists every ExecutionVertex of a job in graph order.
func Executions(rec *pb.JobRecord) []*pb.ExecutionVertex {
	var out []*pb.ExecutionVertex
	for _, v := range rec.GetExecutionGraph().GetVertices() {
		out = append(out, v.Subtasks...)
	}
	return out
}
