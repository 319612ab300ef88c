package jobmaster_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/checkpoint"
	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/operator"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// keyedSumChains is an unbounded source -> key-by-sum -> checksum sink of parallelism 2, every
// edge FORWARD: two pipelined regions (one per subtask index), each with keyed running sums.
// Source subtask i emits value v = seq, key v % keys.
func keyedSumChains(name string, keys int64, intervalMs int64) *pb.JobGraph {
	fwd := func(a, b string) *pb.JobEdge {
		return &pb.JobEdge{Source: a, Target: b, Distribution: pb.Distribution_DISTRIBUTION_FORWARD, ResultType: pb.ResultType_RESULT_TYPE_PIPELINED}
	}
	return &pb.JobGraph{
		Name: name, Type: pb.JobType_JOB_TYPE_STREAMING,
		Vertices: []*pb.JobVertex{
			{Id: "source", Parallelism: 2, Operator: &pb.Operator{Kind: &pb.Operator_SequenceSource{SequenceSource: &pb.SequenceSource{RatePerSecond: 400, Keys: keys}}}},
			{Id: "sum", Parallelism: 2, Operator: &pb.Operator{Kind: &pb.Operator_KeyBySum{KeyBySum: &pb.KeyBySumOperator{}}}},
			{Id: "sink", Parallelism: 2, Operator: &pb.Operator{Kind: &pb.Operator_ChecksumSink{ChecksumSink: &pb.ChecksumSink{Path: "checksum-{job}-{subtask}.json", FlushIntervalMs: 50}}}},
		},
		Edges:            []*pb.JobEdge{fwd("source", "sum"), fwd("sum", "sink")},
		RestartStrategy:  &pb.RestartStrategy{Kind: pb.RestartKind_RESTART_KIND_FIXED_DELAY, Attempts: 5, DelayMs: 100},
		CheckpointConfig: &pb.CheckpointConfig{IntervalMs: intervalMs},
	}
}

// TestRegionRestartsFromTheLastCompletedCheckpoint: with a checkpoint every second, killing
// the TaskManager of one region restarts only that region, from the latest completed
// checkpoint: the restarted source resumes at its checkpointed position (not at 0), the sums
// continue from the checkpointed values, and the sink, restored to its checkpointed document,
// accounts every record of the region exactly once: its per-key counts and sums of running
// sums are exactly those of the sequence 0..last, computed here.
func TestRegionRestartsFromTheLastCompletedCheckpoint(t *testing.T) {
	const keys = 4
	c := testcluster.New(t, testcluster.Options{JMs: 3, TMs: 3, Checkpoints: true})
	id := c.Submit(keyedSumChains("keyed-sums", keys, 1000))
	rec := waitAllRunning(t, c, id)
	before := testcluster.Attempts(rec)
	if before["source[0]"].TM == before["source[1]"].TM {
		t.Fatalf("both regions on %s: %v", before["source[0]"].TM, before)
	}
	var done *pb.CheckpointRecord
	testcluster.WaitFor(t, 30*time.Second, "two completed checkpoints", func() (bool, string) {
		ck, ok := c.Leader().A.State.LatestCompletedCheckpoint(id)
		done = ck
		return ok && ck.GetId() >= 2, describeCheckpoints(checkpointsOf(c, id))
	})
	victim := before["source[0]"].TM
	c.KillTM(tmByID(t, c, victim))
	after := c.WaitJob(id, "region 0 restarted and every task RUNNING", 60*time.Second, func(r *pb.JobRecord) bool {
		return testcluster.AllRunning(r) && testcluster.Attempts(r)["source[0]"].Number > before["source[0]"].Number
	})
	now := testcluster.Attempts(after)
	for _, k := range []string{"source[1]", "sum[1]", "sink[1]"} {
		if now[k] != before[k] {
			t.Fatalf("region 1 restarted too: %s was %+v, now %+v", k, before[k], now[k])
		}
	}
	for _, k := range []string{"source[0]", "sum[0]", "sink[0]"} {
		if now[k].Number <= before[k].Number || now[k].TM == victim {
			t.Fatalf("%s: %+v after the kill of %s, was %+v", k, now[k], victim, before[k])
		}
	}

	// What the new attempts restore from: the latest completed checkpoint when they were
	// deployed (at least the one seen before the kill).
	var restoredFrom *pb.CheckpointRecord
	c.Leader().A.State.WithJob(id, func(r *pb.JobRecord) {
		d, err := graph.TaskDeploymentDescriptor(r, "source", 0)
		if err != nil {
			t.Fatal(err)
		}
		if d.GetRestoreCheckpointId() < done.GetId() {
			t.Fatalf("the restarted source restores from checkpoint %d, not from %d or later", d.GetRestoreCheckpointId(), done.GetId())
		}
		restoredFrom, _ = graph.RestoreFrom(r, "source", 0)
		restoredFrom = proto.CloneOf(restoredFrom)
	})
	st, err := checkpoint.Open(c.CheckpointDir, checkpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var srcAck *pb.TaskCheckpointAck
	for _, a := range restoredFrom.GetAcks() {
		if a.GetVertexId() == "source" && a.GetSubtaskIndex() == 0 {
			srcAck = a
		}
	}
	b, err := st.ReadChecksum(srcAck.GetStatePath(), srcAck.GetChecksum())
	if err != nil {
		t.Fatal(err)
	}
	var pos struct{ Next int64 }
	if err := json.Unmarshal(b, &pos); err != nil {
		t.Fatal(err)
	}
	if pos.Next <= 0 {
		t.Fatalf("source[0]'s checkpointed position is %d", pos.Next)
	}
	t.Logf("region 0 restarted from checkpoint %d: source[0] at position %d", restoredFrom.GetId(), pos.Next)

	// The restarted sink's document, on its new TaskManager: every seq of origin 0 from 0 on
	// exactly once, and the per-key figures of the running sums of 0..last.
	path := filepath.Join(tmByID(t, c, now["sink[0]"].TM).WorkDir, fmt.Sprintf("checksum-%s-0.json", id))
	var cs operator.Checksum
	testcluster.WaitFor(t, 30*time.Second, "the restarted region's sink past the checkpoint", func() (bool, string) {
		var err error
		cs, err = operator.ReadChecksum(path)
		if err != nil {
			return false, err.Error()
		}
		o := cs.Origins["0"]
		return len(cs.Attempts) >= 2 && o.LastSeq > pos.Next+200, fmt.Sprintf("attempts %v origin 0 %+v", cs.Attempts, o)
	})
	o := cs.Origins["0"]
	if o.FirstSeq != 0 || o.Gaps != 0 || o.Duplicates != 0 || o.Count != o.LastSeq+1 {
		t.Fatalf("origin 0 at the restarted sink: %+v (attempts %v), want every seq 0..%d once", o, cs.Attempts, o.LastSeq)
	}
	want := map[int64]operator.KeyStat{}
	running := map[int64]int64{}
	for v := int64(0); v <= o.LastSeq; v++ {
		k := v % keys
		running[k] += v
		ks := want[k]
		ks.Count++
		ks.Sum += running[k]
		want[k] = ks
	}
	for k := int64(0); k < keys; k++ {
		if got := cs.Keys[strconv.FormatInt(k, 10)]; got != want[k] {
			t.Fatalf("key %d at the restarted sink: %+v, want %+v (seqs 0..%d)", k, got, want[k], o.LastSeq)
		}
	}
	t.Logf("restarted sink: %d records of origin 0, per-key sums as computed; attempts %v", o.Count, cs.Attempts)
}
