package jobmaster_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// newCluster starts three JobMasters and three TaskManagers (four slots each) on loopback.
func newCluster(t *testing.T) *testcluster.Cluster {
	t.Helper()
	return testcluster.New(t, testcluster.Options{JMs: 3, TMs: 3})
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// tmByID returns the running TaskManager with the given id.
func tmByID(t *testing.T, c *testcluster.Cluster, id string) *testcluster.TM {
	t.Helper()
	for _, tm := range c.TMs {
		if tm.ID == id && tm.A != nil {
			return tm
		}
	}
	t.Fatalf("no running task manager %q", id)
	return nil
}

func jmClient(c *testcluster.Cluster, j *testcluster.JM) pb.JobMasterServiceClient {
	return pb.NewJobMasterServiceClient(c.Conn(j.GRPCAddr))
}

func tmClient(c *testcluster.Cluster, tm *testcluster.TM) pb.TaskManagerServiceClient {
	return pb.NewTaskManagerServiceClient(c.Conn(tm.A.TM.GRPCAddr()))
}

func waitAllRunning(t *testing.T, c *testcluster.Cluster, id string) *pb.JobRecord {
	t.Helper()
	return c.WaitJob(id, "job RUNNING with every task RUNNING", 30*time.Second, testcluster.AllRunning)
}

// allInState: the job has the status and every current execution the state.
func allInState(status pb.JobStatus, states ...pb.ExecutionState) func(*pb.JobRecord) bool {
	return func(rec *pb.JobRecord) bool {
		if rec.Status != status {
			return false
		}
		for _, ev := range testcluster.Executions(rec) {
			ok := false
			for _, s := range states {
				ok = ok || ev.GetCurrent().GetState() == s
			}
			if !ok {
				return false
			}
		}
		return true
	}
}

// execution returns the ExecutionVertex "vertex[subtask]" of a record.
func execution(t *testing.T, rec *pb.JobRecord, vertex string, subtask int32) *pb.ExecutionVertex {
	t.Helper()
	ev := graph.FindVertex(rec.ExecutionGraph, vertex, subtask)
	if ev == nil || ev.Current == nil {
		t.Fatalf("no current attempt for %s[%d]: %s", vertex, subtask, testcluster.Describe(rec))
	}
	return ev
}

// regionKeys returns, per failover region, the "vertex[subtask]" keys of its members.
func regionKeys(t *testing.T, jg *pb.JobGraph) [][]string {
	t.Helper()
	regions, err := graph.FailoverRegions(jg)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]string
	for _, r := range regions {
		var keys []string
		for _, m := range r.Members {
			keys = append(keys, fmt.Sprintf("%s[%d]", m.VertexID, m.Subtask))
		}
		out = append(out, keys)
	}
	return out
}

// sourceSink is a streaming source -> checksum sink job, FORWARD and PIPELINED: one failover
// region of two tasks per subtask index.
func sourceSink(name string, parallelism int32, rate float64) *pb.JobGraph {
	jg := testcluster.StreamingChain(name, parallelism, rate, 0)
	jg.Vertices = []*pb.JobVertex{jg.Vertices[0], jg.Vertices[2]}
	jg.Edges = []*pb.JobEdge{{Source: "source", Target: "sink", Distribution: pb.Distribution_DISTRIBUTION_FORWARD, ResultType: pb.ResultType_RESULT_TYPE_PIPELINED}}
	return jg
}

// tmTasks is a one-line view of a TM's tasks: "attempt:STATE" sorted.
func tmTasks(tm *testcluster.TM) string {
	var out []string
	for _, ti := range tm.A.TM.Tasks() {
		out = append(out, ti.AttemptID+":"+graph.ExecutionStateName(ti.State))
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}
