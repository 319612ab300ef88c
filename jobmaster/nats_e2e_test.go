package jobmaster_test

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/operator"
	"github.com/jmcluster/jmcluster/testkit/natstest"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// natsJob is a STREAMING job nats_source (parallelism 2) -> checksum sink (parallelism 2,
// FORWARD: two regions), checkpointed every 200 ms.
func natsJob(url string) *pb.JobGraph {
	return &pb.JobGraph{
		Name: "nats exactly once", Type: pb.JobType_JOB_TYPE_STREAMING,
		Vertices: []*pb.JobVertex{
			{Id: "source", Parallelism: 2, Operator: &pb.Operator{Kind: &pb.Operator_NatsSource{NatsSource: &pb.NatsSource{Url: url, Stream: "E2E", Subject: "e2e.>"}}}},
			{Id: "sink", Parallelism: 2, Operator: &pb.Operator{Kind: &pb.Operator_ChecksumSink{ChecksumSink: &pb.ChecksumSink{Path: "checksum-{job}-{subtask}.json", FlushIntervalMs: 50}}}},
		},
		Edges:            []*pb.JobEdge{{Source: "source", Target: "sink", Distribution: pb.Distribution_DISTRIBUTION_FORWARD, ResultType: pb.ResultType_RESULT_TYPE_PIPELINED}},
		RestartStrategy:  &pb.RestartStrategy{Kind: pb.RestartKind_RESTART_KIND_FIXED_DELAY, Attempts: 5, DelayMs: 100},
		CheckpointConfig: &pb.CheckpointConfig{IntervalMs: 200},
	}
}

// TestNatsSourceExactlyOnceAcrossATMKill: a real NATS server holds a stream; the job reads it
// while the test publishes messages 0..N-1 (value the number i, 8 bytes), half before and half
// after the TaskManager of source[0] is killed once two checkpoints completed. Each sink's
// committed output holds exactly the messages of its split, (seq-1) % 2 == subtask, each once:
// no gap, no duplicate, their count and sum the ones computed here.
func TestNatsSourceExactlyOnceAcrossATMKill(t *testing.T) {
	const n = 1000
	ns := natstest.Start(t)
	ns.CreateStream(t, "E2E", "e2e.>")
	publish := func(from, to int) {
		for i := from; i < to; i++ {
			ns.Publish(t, "e2e."+strconv.Itoa(i%3), binary.BigEndian.AppendUint64(nil, uint64(i)), nil)
		}
	}
	publish(0, n/2)

	c := testcluster.New(t, testcluster.Options{JMs: 3, TMs: 3, Checkpoints: true})
	id := c.Submit(natsJob(ns.URL))
	before := testcluster.Attempts(waitAllRunning(t, c, id))
	completed := func(k uint64) func() (bool, string) {
		return func() (bool, string) {
			ck, ok := c.Leader().A.State.LatestCompletedCheckpoint(id)
			return ok && ck.GetId() >= k, describeCheckpoints(checkpointsOf(c, id))
		}
	}
	testcluster.WaitFor(t, 30*time.Second, "two completed checkpoints", completed(2))

	victim := before["source[0]"].TM
	c.KillTM(tmByID(t, c, victim))
	publish(n/2, n)
	c.WaitJob(id, "region 0 restored and every task RUNNING", 60*time.Second, func(r *pb.JobRecord) bool {
		return testcluster.AllRunning(r) && testcluster.Attempts(r)["source[0]"].Number > before["source[0]"].Number
	})

	for sub := range 2 {
		var wantCount, wantSum int64
		for i := sub; i < n; i += 2 { // message i has stream sequence i+1
			wantCount++
			wantSum += int64(i)
		}
		var doc operator.Checksum
		var on string
		testcluster.WaitFor(t, 60*time.Second, fmt.Sprintf("sink[%d] committed all %d messages of its split", sub, wantCount), func() (bool, string) {
			doc, on = committedDoc(t, c, id, sub)
			return doc.Count >= wantCount, fmt.Sprintf("committed %d records at checkpoint %d on %s", doc.Count, doc.CommittedCheckpoint, on)
		})
		o := doc.Origins[strconv.Itoa(sub)]
		if len(doc.Origins) != 1 || o.FirstSeq != 0 || o.LastSeq != wantCount-1 || o.Gaps != 0 || o.Duplicates != 0 || doc.Count != wantCount || doc.Sum != wantSum {
			t.Fatalf("sink[%d] on %s (checkpoint %d, attempts %v): %d records, sum %d, origins %+v; want %d records of origin %d, seqs 0..%d once, sum %d",
				sub, on, doc.CommittedCheckpoint, doc.Attempts, doc.Count, doc.Sum, doc.Origins, wantCount, sub, wantCount-1, wantSum)
		}
		t.Logf("sink[%d]: %d messages, each once, committed at checkpoint %d on %s, attempts %v", sub, doc.Count, doc.CommittedCheckpoint, on, doc.Attempts)
	}
}
