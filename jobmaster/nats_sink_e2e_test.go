package jobmaster_test

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jmcluster/jmcluster/testkit/natstest"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// natsToNatsJob is a STREAMING job nats_source (stream E2E, key: the subject) -> map (2v+1) ->
// nats_sink (stream OUT, the key in header Src), each of parallelism 2 with FORWARD edges (two
// regions), checkpointed every 200 ms.
func natsToNatsJob(url string) *pb.JobGraph {
	return &pb.JobGraph{
		Name: "nats to nats exactly once", Type: pb.JobType_JOB_TYPE_STREAMING,
		Vertices: []*pb.JobVertex{
			{Id: "source", Parallelism: 2, Operator: &pb.Operator{Kind: &pb.Operator_NatsSource{NatsSource: &pb.NatsSource{Url: url, Stream: "E2E", Subject: "e2e.>", Key: pb.NatsKey_NATS_KEY_SUBJECT}}}},
			{Id: "map", Parallelism: 2, Operator: &pb.Operator{Kind: &pb.Operator_Map{Map: &pb.MapOperator{Multiply: 2, Add: 1}}}},
			{Id: "sink", Parallelism: 2, Operator: &pb.Operator{Kind: &pb.Operator_NatsSink{NatsSink: &pb.NatsSink{Url: url, Stream: "OUT", Subject: "out", KeyHeader: "Src"}}}},
		},
		Edges: []*pb.JobEdge{
			{Source: "source", Target: "map", Distribution: pb.Distribution_DISTRIBUTION_FORWARD, ResultType: pb.ResultType_RESULT_TYPE_PIPELINED},
			{Source: "map", Target: "sink", Distribution: pb.Distribution_DISTRIBUTION_FORWARD, ResultType: pb.ResultType_RESULT_TYPE_PIPELINED},
		},
		RestartStrategy:  &pb.RestartStrategy{Kind: pb.RestartKind_RESTART_KIND_FIXED_DELAY, Attempts: 5, DelayMs: 100},
		CheckpointConfig: &pb.CheckpointConfig{IntervalMs: 200},
	}
}

// natsSinkRun is a cluster running natsToNatsJob against a real NATS server.
type natsSinkRun struct {
	t      *testing.T
	ns     *natstest.Server
	c      *testcluster.Cluster
	id     string
	before map[string]testcluster.Attempt
}

func startNatsSinkRun(t *testing.T) *natsSinkRun {
	ns := natstest.Start(t)
	ns.CreateStream(t, "E2E", "e2e.>")
	ns.CreateStream(t, "OUT", "out")
	r := &natsSinkRun{t: t, ns: ns}
	r.publish(0, natsSinkN/2)
	r.c = testcluster.New(t, testcluster.Options{JMs: 3, TMs: 3, Checkpoints: true})
	r.id = r.c.Submit(natsToNatsJob(ns.URL))
	r.before = testcluster.Attempts(waitAllRunning(t, r.c, r.id))
	return r
}

// natsSinkN is the messages each test publishes: value i (8 bytes) on subject e2e.<i%3>.
const natsSinkN = 1000

func (r *natsSinkRun) publish(from, to int) {
	for i := from; i < to; i++ {
		r.ns.Publish(r.t, "e2e."+strconv.Itoa(i%3), binary.BigEndian.AppendUint64(nil, uint64(i)), nil)
	}
}

// completed waits until the leader completed checkpoint k or a later one.
func (r *natsSinkRun) completed(k uint64) {
	r.t.Helper()
	testcluster.WaitFor(r.t, 60*time.Second, fmt.Sprintf("checkpoint %d completed", k), func() (bool, string) {
		ck, ok := r.c.Leader().A.State.LatestCompletedCheckpoint(r.id)
		return ok && ck.GetId() >= k, describeCheckpoints(checkpointsOf(r.c, r.id))
	})
}

func (r *natsSinkRun) latest() uint64 {
	ck, _ := r.c.Leader().A.State.LatestCompletedCheckpoint(r.id)
	return ck.GetId()
}

// checkOutput waits until stream OUT holds natsSinkN messages, lets two more checkpoints
// complete (their commits would publish any duplicate), and fails unless it holds exactly one
// message of value 2i+1 for each i, with the source's subject in header Src and a message id
// of the sink's, each id once.
func (r *natsSinkRun) checkOutput() {
	t := r.t
	t.Helper()
	var msgs []*jetstream.RawStreamMsg
	testcluster.WaitFor(t, 90*time.Second, fmt.Sprintf("%d messages in stream OUT", natsSinkN), func() (bool, string) {
		msgs = r.ns.Messages(t, "OUT")
		return len(msgs) >= natsSinkN, fmt.Sprintf("%d messages; %s", len(msgs), describeCheckpoints(checkpointsOf(r.c, r.id)))
	})
	r.completed(r.latest() + 2)
	msgs = r.ns.Messages(t, "OUT")
	seen, ids := map[uint64]bool{}, map[string]bool{}
	for k, m := range msgs {
		id := m.Header.Get(jetstream.MsgIDHeader)
		if len(m.Data) != 8 || ids[id] {
			t.Fatalf("message %d of OUT: %d bytes, id %q (seen before: %v)", k, len(m.Data), id, ids[id])
		}
		ids[id] = true
		v := binary.BigEndian.Uint64(m.Data)
		i := (v - 1) / 2
		if v%2 != 1 || i >= natsSinkN || seen[i] || m.Header.Get("Src") != "e2e."+strconv.Itoa(int(i%3)) {
			t.Fatalf("message %d of OUT (id %q): value %d, Src %q: not 2i+1 of a message i < %d published on e2e.<i%%3>, or seen before (%v)",
				k, id, v, m.Header.Get("Src"), natsSinkN, seen[i])
		}
		seen[i] = true
	}
	if len(msgs) != natsSinkN {
		t.Fatalf("stream OUT holds %d messages, want %d", len(msgs), natsSinkN)
	}
	t.Logf("stream OUT: %d messages, each once; %s", len(msgs), describeCheckpoints(checkpointsOf(r.c, r.id)))
}

// TestNatsSinkExactlyOnceAcrossTMAndLeaderKills: a job reads a NATS stream and publishes to
// another through nats_sink; the TaskManager of sink[0] is killed while messages come, then
// the leader. The output stream holds each input's result exactly once (by message id and
// content): segments published before the kill are deduplicated when the restored region
// publishes its checkpoint again, and nothing staged is lost with the TaskManager.
func TestNatsSinkExactlyOnceAcrossTMAndLeaderKills(t *testing.T) {
	r := startNatsSinkRun(t)
	r.completed(2)
	victim := r.before["sink[0]"].TM
	r.c.KillTM(tmByID(t, r.c, victim))
	r.publish(natsSinkN/2, 3*natsSinkN/4)
	r.c.WaitJob(r.id, "region 0 restored and every task RUNNING", 60*time.Second, func(rec *pb.JobRecord) bool {
		return testcluster.AllRunning(rec) && testcluster.Attempts(rec)["sink[0]"].Number > r.before["sink[0]"].Number
	})
	r.completed(r.latest() + 1)

	leader := r.c.Leader()
	r.c.KillJM(leader)
	if next := r.c.Leader(); next == leader {
		t.Fatal("no new leader")
	}
	r.publish(3*natsSinkN/4, natsSinkN)
	r.completed(r.latest() + 2)
	r.checkOutput()
}

// TestNatsSinkGoesOnAcrossANATSServerRestart: the NATS server (both streams) restarts on its
// port and store while the job runs; the job's output is delayed, not failed: every input's
// result reaches the output stream exactly once.
func TestNatsSinkGoesOnAcrossANATSServerRestart(t *testing.T) {
	r := startNatsSinkRun(t)
	r.completed(2)
	r.ns.Restart(t)
	r.publish(natsSinkN/2, natsSinkN)
	r.checkOutput()
}
