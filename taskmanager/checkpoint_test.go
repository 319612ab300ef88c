package taskmanager

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/checkpoint"
	"github.com/jmcluster/jmcluster/dataplane"
	"github.com/jmcluster/jmcluster/operator"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestCheckpointAlignsAcrossTwoTMsAndRestores: a streaming job source(2) -ALL_TO_ALL->
// key-by-sum(2) -FORWARD-> checksum sink(2), sources on tm1, the rest on tm2. A triggered
// checkpoint reaches every task through the barriers (the sums align two channels each over
// the network), each writes its state to the shared storage and acknowledges it through the
// outbox. A source restored from its acknowledged state resumes at its snapshotted position,
// and a sum restored from its state continues from the checkpointed sums.
func TestCheckpointAlignsAcrossTwoTMsAndRestores(t *testing.T) {
	jm := startJM(t)
	ckdir, work := t.TempDir(), t.TempDir()
	mut := func(c *Config) { c.CheckpointDir, c.WorkDir = ckdir, work }
	var alignMu sync.Mutex
	var aligned []int64 // the alignments tm2 observed, in microseconds
	tm1 := newTM(t, "tm1", jm, mut)
	tm2 := newTM(t, "tm2", jm, func(c *Config) {
		mut(c)
		c.ObserveAlignment = func(d time.Duration) { alignMu.Lock(); aligned = append(aligned, d.Microseconds()); alignMu.Unlock() }
	})
	c1, c2 := client(t, tm1), client(t, tm2)
	const job, keys = "ckjob", 5
	srcCfg := &pb.SequenceSource{Keys: keys, RatePerSecond: 2000} // unbounded
	sumOp := &pb.Operator{Kind: &pb.Operator_KeyBySum{KeyBySum: &pb.KeyBySumOperator{}}}
	ck := func(d *pb.TaskDeploymentDescriptor) *pb.TaskDeploymentDescriptor { d.Checkpointed = true; return d }
	for i := int32(0); i < 2; i++ {
		submit(t, c2, 1, ck(deploy(job, "sink", i, 2, fmt.Sprintf("sink-%d", i), i, checksumOp("sink-{subtask}.json"),
			gate("sum->sink", pipelined, channel("sum->sink", i, 0, fmt.Sprintf("sum-%d", i), tm2.DataAddr())))))
		submit(t, c2, 1, ck(deploy(job, "sum", i, 2, fmt.Sprintf("sum-%d", i), i+2, sumOp,
			gate("src->sum", pipelined,
				channel("src->sum", 0, i, "src-0", tm1.DataAddr()),
				channel("src->sum", 1, i, "src-1", tm1.DataAddr())),
			produces("sum->sink", i, 1, forward, pipelined))))
	}
	for i := int32(0); i < 2; i++ {
		submit(t, c1, 1, ck(source(job, "src", i, 2, fmt.Sprintf("src-%d", i), i, srcCfg,
			produces("src->sum", i, 2, allToAll, pipelined))))
	}
	for _, a := range []string{"src-0", "src-1", "sum-0", "sum-1", "sink-0", "sink-1"} {
		jm.waitState(t, a, running)
	}

	// A trigger for an attempt the TM does not run (a sum on tm1) names it.
	resp, err := c1.TriggerCheckpoint(context.Background(), &pb.TriggerCheckpointRequest{
		Epoch: 1, JobId: job, CheckpointId: 1, AttemptIds: []string{"src-0", "src-1", "sum-0"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(resp.GetNotRunning(), ",") != "sum-0" {
		t.Fatalf("not running: %v, want [sum-0]", resp.GetNotRunning())
	}
	waitFor(t, 20*time.Second, "every task acknowledging checkpoint 1", func() (bool, string) {
		acks := jm.checkpointAcks(1)
		return len(acks) == 6, fmt.Sprintf("%d acks: %v", len(acks), keysOf(acks))
	})
	acks := jm.checkpointAcks(1)
	// Each acknowledgement carries its task's alignment: what the TM's metric observed for the
	// sums and sinks (on tm2), nothing for the sources, which inject the barrier.
	alignMu.Lock()
	observed := slices.Clone(aligned)
	alignMu.Unlock()
	for key, a := range acks {
		if strings.HasPrefix(key, "src") {
			if a.GetAlignmentUs() != 0 {
				t.Fatalf("%s (a source) acknowledged an alignment of %d µs", key, a.GetAlignmentUs())
			}
		} else if !slices.Contains(observed, a.GetAlignmentUs()) {
			t.Fatalf("%s acknowledged an alignment of %d µs, not one tm2 observed: %v", key, a.GetAlignmentUs(), observed)
		}
	}
	st, err := checkpoint.Open(ckdir, checkpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	read := func(key string) []byte {
		t.Helper()
		a := acks[key]
		b, err := st.ReadChecksum(a.GetStatePath(), a.GetChecksum())
		if err != nil {
			t.Fatalf("%s's state: %v", key, err)
		}
		if int64(len(b)) != a.GetStateSizeBytes() {
			t.Fatalf("%s's state is %d bytes, acknowledged %d", key, len(b), a.GetStateSizeBytes())
		}
		return b
	}
	var pos [2]int64
	for i := range 2 {
		var s struct{ Next int64 }
		if err := json.Unmarshal(read(fmt.Sprintf("src[%d]", i)), &s); err != nil {
			t.Fatal(err)
		}
		pos[i] = s.Next
	}
	// The sums at the barrier are exactly what the sources emitted before it: each source i
	// emitted values 0..pos[i]-1, key v % keys, routed by key.
	for i := range 2 {
		sums, err := operator.KeyedValues(read(fmt.Sprintf("sum[%d]", i)))
		if err != nil {
			t.Fatal(err)
		}
		want := map[int64]int64{}
		for src := range 2 {
			for v := int64(0); v < pos[src]; v++ {
				if dataplane.RouteKey(operator.Int64Bytes(v%keys), 2) == i {
					want[v%keys] += v
				}
			}
		}
		for key, v := range sums {
			if sum, _ := operator.Int64Value(v); sum != want[key] {
				t.Fatalf("sum[%d] key %d: checkpointed %d, want %d (sources at %v)", i, key, sum, want[key], pos)
			}
			delete(want, key)
		}
		if len(want) != 0 {
			t.Fatalf("sum[%d] checkpointed no sum for keys %v", i, want)
		}
	}
	// The sink's state is its checksum document at the barrier: every record routed to it
	// before the barrier, none after, none twice.
	var doc operator.Checksum
	if err := json.Unmarshal(read("sink[0]"), &doc); err != nil {
		t.Fatal(err)
	}
	var want int64
	for src := range 2 {
		for v := int64(0); v < pos[src]; v++ {
			if dataplane.RouteKey(operator.Int64Bytes(v%keys), 2) == 0 {
				want++
			}
		}
	}
	if doc.Count != want {
		t.Fatalf("sink[0] checkpointed %d records, want %d (sources at %v)", doc.Count, want, pos)
	}
	for o, os := range doc.Origins {
		if os.Duplicates != 0 {
			t.Fatalf("sink[0]'s checkpointed origin %s: %+v", o, os)
		}
	}

	// Restore src-0 from its state on tm1 as attempt 1, without consumers: it starts at its
	// checkpointed position. Its report names the checkpoint it was restored from.
	if _, err := c1.CancelTask(context.Background(), &pb.CancelTaskRequest{Epoch: 1, JobId: job, AttemptId: "src-0"}); err != nil {
		t.Fatal(err)
	}
	jm.waitState(t, "src-0", canceled)
	d := ck(source(job, "src", 0, 2, "src-0b", 0, &pb.SequenceSource{Keys: keys, Count: pos[0] + 10}, produces("src->sum", 0, 2, allToAll, blocking)))
	d.AttemptNumber, d.RestoreCheckpointId, d.RestoreFrom = 1, 1, acks["src[0]"]
	submit(t, c1, 1, d)
	jm.waitState(t, "src-0b", finished)
	var out int64 = -1
	for _, io := range tm1.TaskIOs() {
		if io.VertexID == "src" && io.Subtask == 0 && io.AttemptNumber == 1 {
			out = io.RecordsOut
		}
	}
	if out != 10 {
		t.Fatalf("the restored source emitted %d records, want the 10 after its position %d", out, pos[0])
	}

	// A state that does not match its acknowledged checksum fails the restore, naming the file.
	bad := ck(source(job, "src", 1, 2, "src-1b", 3, srcCfg))
	bad.AttemptNumber, bad.RestoreCheckpointId = 1, 1
	bad.RestoreFrom = &pb.TaskCheckpointAck{VertexId: "src", SubtaskIndex: 1, StatePath: acks["src[1]"].GetStatePath(), Checksum: acks["src[1]"].GetChecksum() + 1}
	if _, err := c1.CancelTask(context.Background(), &pb.CancelTaskRequest{Epoch: 1, JobId: job, AttemptId: "src-1"}); err != nil {
		t.Fatal(err)
	}
	jm.waitState(t, "src-1", canceled)
	submit(t, c1, 1, bad)
	cause := jm.waitState(t, "src-1b", failed)
	if !strings.Contains(cause, "unusable checkpoint 1") || !strings.Contains(cause, filepath.Base(acks["src[1]"].GetStatePath())) {
		t.Fatalf("failure cause %q does not name the checkpoint and the file", cause)
	}
	// The leader reads the checkpoint and the file back from the cause (a typed failure).
	if f, ok := checkpoint.ParseRestoreFailure(cause); !ok || f.Checkpoint != 1 || f.Path != acks["src[1]"].GetStatePath() {
		t.Fatalf("ParseRestoreFailure(%q) = %+v, %v; want checkpoint 1, %s", cause, f, ok, acks["src[1]"].GetStatePath())
	}
}

// TestCheckpointedTaskNeedsStorage: a TM without --checkpoint-dir refuses a task of a
// checkpointed job, naming the flag.
func TestCheckpointedTaskNeedsStorage(t *testing.T) {
	jm := startJM(t)
	tm := newTM(t, "tm1", jm, nil)
	d := source("j", "src", 0, 1, "a", 0, &pb.SequenceSource{Count: 1})
	d.Checkpointed = true
	_, err := client(t, tm).SubmitTask(context.Background(), &pb.SubmitTaskRequest{Epoch: 1, Task: d})
	if err == nil || !strings.Contains(err.Error(), "--checkpoint-dir") {
		t.Fatalf("submit: %v", err)
	}
}

func keysOf(m map[string]*pb.TaskCheckpointAck) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
