package jmserver_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/agent"
	"github.com/jmcluster/jmcluster/cluster"
	"github.com/jmcluster/jmcluster/jmserver"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// stable is Raft timings slow enough that a loaded machine does not call spurious elections
// in the middle of a check (the tests here count on one leader throughout).
func stable(cc *cluster.Config) {
	cc.HeartbeatTimeout, cc.ElectionTimeout, cc.LeaderLeaseTimeout = time.Second, time.Second, 500*time.Millisecond
}

// replicaStates is every live replica's applied index and state hash, once they all agree.
func replicaStates(t *testing.T, c *testcluster.Cluster) string {
	t.Helper()
	var got string
	testcluster.WaitFor(t, 10*time.Second, "every replica to apply the same index", func() (bool, string) {
		var parts []string
		idx := map[uint64]bool{}
		for _, j := range c.Live() {
			i := j.A.State.AppliedIndex()
			idx[i] = true
			parts = append(parts, fmt.Sprintf("%s: index %d commit %d hash %x", j.ID, i, j.A.Node.CommitIndex(), j.A.State.Hash()))
		}
		got = strings.Join(parts, "; ")
		return len(idx) == 1, got
	})
	return got
}

// settled waits until the TM has the leader's epoch and has heartbeated since, so the
// baseline of a check is not taken while its registration is still being answered (the
// registry lists a TM before the TM reads the answer that carries the epoch).
func settled(t *testing.T, c *testcluster.Cluster, tm interface {
	Epoch() uint64
	Heartbeats() int64
}) {
	t.Helper()
	hb := tm.Heartbeats()
	testcluster.WaitFor(t, 10*time.Second, "the TM to hold the leader's epoch and heartbeat", func() (bool, string) {
		e := c.Leader().A.JM.Epoch()
		return tm.Epoch() == e && tm.Heartbeats() > hb, fmt.Sprintf("TM epoch %d, leader epoch %d, heartbeats %d (from %d)", tm.Epoch(), e, tm.Heartbeats(), hb)
	})
}

// wantTooLarge checks err is RESOURCE_EXHAUSTED with the MESSAGE_TOO_LARGE reason and a message
// naming the limit and the setting.
func wantTooLarge(t *testing.T, what string, err error, msg string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted || !transport.IsMessageTooLarge(err) || !strings.Contains(st.Message(), msg) {
		t.Errorf("%s: want ResourceExhausted (MESSAGE_TOO_LARGE) containing %q, got %v", what, msg, err)
	}
}

// limitedConn is a jmcluster client connection (transport.DialOptions) with its own limit.
func limitedConn(t *testing.T, addr string, limit int) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())},
		transport.DialOptions(limit, "jmnode client")...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// TestOversizedRequestRefusedNamingTheLimit: a request over the 4 MiB default, to a follower
// (which would forward it), to the leader, and to a TaskManager's two services, is refused with
// RESOURCE_EXHAUSTED. A jmcluster client whose own limit lets it send the request reads a
// message naming the size, whose limit it is and --max-message-size; a plain gRPC client reads
// gRPC's own text with both numbers; a client at the default limit refuses to send it and names
// its own limit. No replica's applied index, commit index or state hash moves, and the TM is
// untouched.
func TestOversizedRequestRefusedNamingTheLimit(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{JMs: 3, TMs: 1, Raft: stable})
	tm := c.TMs[0].A.TM
	huge := strings.Repeat("x", 5<<20)
	const big = 64 << 20 // a client limit far above the servers'
	req := &pb.SubmitJobRequest{JobGraph: testcluster.StreamingChain(huge, 1, 10, 0)}
	size := proto.Size(req)
	for try := 1; ; try++ {
		settled(t, c, tm)
		epoch, before := c.Leader().A.JM.Epoch(), replicaStates(t, c)
		tmEpoch, tasks := tm.Epoch(), len(tm.Tasks())
		for _, j := range []*testcluster.JM{c.Follower(), c.Leader()} {
			_, err := pb.NewClientServiceClient(limitedConn(t, j.GRPCAddr, big)).SubmitJob(ctxT(t), req)
			wantTooLarge(t, "SubmitJob to "+j.ID, err,
				fmt.Sprintf("request of %d bytes is over the JobMaster's message limit of 4194304 bytes (--max-message-size)", size))
			_, err = c.Client(j).SubmitJob(ctxT(t), req) // a plain gRPC client
			if st := status.Convert(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), fmt.Sprintf("(%d vs. 4194304)", size)) {
				t.Errorf("SubmitJob from a plain gRPC client to %s: want gRPC's refusal with both sizes, got %v", j.ID, err)
			}
			_, err = pb.NewClientServiceClient(limitedConn(t, j.GRPCAddr, 0)).SubmitJob(ctxT(t), req)
			wantTooLarge(t, "SubmitJob from a client at the default limit", err,
				fmt.Sprintf("request of %d bytes is over the jmnode client's message limit of 4194304 bytes (--max-message-size)", size))
		}
		tmc := pb.NewTaskManagerServiceClient(limitedConn(t, tm.GRPCAddr(), big))
		_, err := tmc.CancelTask(ctxT(t), &pb.CancelTaskRequest{Epoch: tmEpoch + 1000, JobId: huge, AttemptId: "a"})
		wantTooLarge(t, "TaskManagerService.CancelTask", err, "is over the TaskManager's message limit of 4194304 bytes (--max-message-size)")
		dc := pb.NewDataServiceClient(limitedConn(t, tm.DataAddr(), big))
		stream, err := dc.ReadPartition(ctxT(t), &pb.ReadPartitionRequest{JobId: huge})
		if err == nil {
			_, err = stream.Recv()
		}
		wantTooLarge(t, "DataService.ReadPartition", err, "is over the TaskManager's message limit of 4194304 bytes (--max-message-size)")

		after := replicaStates(t, c)
		if e := c.Leader().A.JM.Epoch(); (e != epoch || tm.Epoch() != tmEpoch) && try < 3 {
			t.Logf("an election during the check (epoch %d -> %d) moved the state; checking again", epoch, e)
			continue
		}
		if after != before {
			t.Errorf("oversized requests changed the replicated state:\nbefore %s\nafter  %s", before, after)
		}
		if tm.Epoch() != tmEpoch || len(tm.Tasks()) != tasks {
			t.Errorf("TM changed: epoch %d -> %d, tasks %d -> %d", tmEpoch, tm.Epoch(), tasks, len(tm.Tasks()))
		}
		return
	}
}

// longChain is a streaming chain of k vertices whose names are 250 characters long.
func longChain(name string, k int) *pb.JobGraph {
	jg := &pb.JobGraph{Name: name, Type: pb.JobType_JOB_TYPE_STREAMING}
	for i := 0; i < k; i++ {
		op := &pb.Operator{Kind: &pb.Operator_Map{Map: &pb.MapOperator{Multiply: 1}}}
		switch i {
		case 0:
			op = &pb.Operator{Kind: &pb.Operator_SequenceSource{SequenceSource: &pb.SequenceSource{RatePerSecond: 1, Keys: 1}}}
		case k - 1:
			op = &pb.Operator{Kind: &pb.Operator_ChecksumSink{ChecksumSink: &pb.ChecksumSink{Path: "chain-{job}-{subtask}.json"}}}
		}
		id := fmt.Sprintf("v%d", i)
		jg.Vertices = append(jg.Vertices, &pb.JobVertex{Id: id, Name: fmt.Sprintf("%s-%0250d", id, i)[:250], Parallelism: 1, Operator: op})
		if i > 0 {
			jg.Edges = append(jg.Edges, &pb.JobEdge{Source: fmt.Sprintf("v%d", i-1), Target: id,
				Distribution: pb.Distribution_DISTRIBUTION_FORWARD, ResultType: pb.ResultType_RESULT_TYPE_PIPELINED})
		}
	}
	return jg
}

// TestMessageLimitsOfClientsAndReplies: a JobMaster refuses a reply over its limit (unary and
// streamed) naming its limit, instead of gRPC's bare refusal; a client with its own limit
// names it when a request or a reply is over it.
func TestMessageLimitsOfClientsAndReplies(t *testing.T) {
	big := longChain("long", 40)
	bigReq := &pb.SubmitJobRequest{JobGraph: big}
	jmLimit := proto.Size(bigReq) + 1024 // the request fits; its job record (graph and execution graph) does not
	c := testcluster.New(t, testcluster.Options{JMs: 1, Raft: stable, JM: func(cfg *agent.JobMasterConfig) { cfg.MaxMessageSize = jmLimit }})
	l := c.Leader()
	plain := c.Client(l)
	resp, err := plain.SubmitJob(ctxT(t), bigReq)
	if err != nil {
		t.Fatalf("submit %d bytes under the limit of %d: %v", proto.Size(bigReq), jmLimit, err)
	}
	jmNames := fmt.Sprintf("is over the JobMaster's message limit of %d bytes (--max-message-size)", jmLimit)
	_, err = plain.GetJob(ctxT(t), &pb.GetJobRequest{JobId: resp.JobId})
	wantTooLarge(t, "GetJob reply over the JM's limit", err, jmNames)
	watch, err := plain.WatchJob(ctxT(t), &pb.WatchJobRequest{JobId: resp.JobId})
	if err == nil {
		_, err = watch.Recv()
	}
	wantTooLarge(t, "WatchJob message over the JM's limit", err, jmNames)
	if !strings.HasPrefix(status.Convert(err).Message(), "reply of ") {
		t.Errorf("a reply over the JM's limit is not called a reply: %v", err)
	}

	// A client whose limit lies between a small job's request and its job record.
	small := testcluster.StreamingChain("small", 8, 10, 0)
	sresp, err := plain.SubmitJob(ctxT(t), &pb.SubmitJobRequest{JobGraph: small})
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := l.A.State.Job(sresp.JobId)
	reqSize, replySize := proto.Size(&pb.SubmitJobRequest{JobGraph: small}), proto.Size(&pb.GetJobResponse{Job: rec})
	if replySize < reqSize+200 {
		t.Fatalf("the small job's record (%d bytes) is not much larger than its request (%d)", replySize, reqSize)
	}
	clLimit := (reqSize + replySize) / 2
	cl := pb.NewClientServiceClient(limitedConn(t, l.GRPCAddr, clLimit))
	clNames := fmt.Sprintf("is over the jmnode client's message limit of %d bytes (--max-message-size)", clLimit)
	_, err = cl.SubmitJob(ctxT(t), bigReq)
	wantTooLarge(t, "request over the client's limit", err, fmt.Sprintf("request of %d bytes %s", proto.Size(bigReq), clNames))
	_, err = cl.GetJob(ctxT(t), &pb.GetJobRequest{JobId: sresp.JobId, View: pb.JobView_JOB_VIEW_FULL})
	wantTooLarge(t, "reply over the client's limit", err, clNames)
	if !strings.HasPrefix(status.Convert(err).Message(), "reply of ") {
		t.Errorf("a reply over the client's limit is not called a reply: %v", err)
	}
}

// dialFrom connects to addr from the local IP from (a second client identity on loopback).
func dialFrom(t *testing.T, from, addr string) pb.ClientServiceClient {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	probe, err := d.Dial("tcp", addr)
	if err != nil {
		t.Skipf("cannot connect from %s on this host: %v", from, err)
	}
	probe.Close()
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return d.DialContext(ctx, "tcp", a) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return pb.NewClientServiceClient(cc)
}

// TestWriteRateLimitPerClient: a burst of submissions from one client over its limit is refused
// with RESOURCE_EXHAUSTED naming the limit and a RetryInfo; another client (a second IP) is not
// affected; after the retry-after the first client's next submission is admitted. Calls the
// follower forwarded are not counted again on the leader, while a client that only claims to
// be forwarded is. (A call the limiter admitted may still fail UNAVAILABLE if leadership moves
// under load; it took its token all the same, so only the limiter's verdicts are counted.)
func TestWriteRateLimitPerClient(t *testing.T) {
	const burst, rate = 3, 0.5
	c := testcluster.New(t, testcluster.Options{JMs: 3, Raft: stable, JM: func(cfg *agent.JobMasterConfig) {
		cfg.WriteLimit = jmserver.WriteLimit{Rate: rate, Burst: burst}
	}})
	follower, leader := c.Follower(), c.Leader()
	one := dialFrom(t, "127.0.0.1", follower.GRPCAddr)
	two := dialFrom(t, "127.0.0.2", follower.GRPCAddr)
	n := 0
	submit := func(ctx context.Context, cl pb.ClientServiceClient) error {
		n++
		_, err := cl.SubmitJob(ctx, &pb.SubmitJobRequest{JobGraph: testcluster.StreamingChain(fmt.Sprintf("rl-%d", n), 1, 10, 0)})
		if err != nil && !transport.IsRateLimited(err) {
			t.Logf("submission %d admitted by the limiter, then: %v", n, err)
		}
		return err
	}
	// admitted makes k calls from cl and fails if the limiter refuses any.
	admitted := func(what string, k int, cl pb.ClientServiceClient, ctx func() context.Context) {
		t.Helper()
		for i := 0; i < k; i++ {
			if err := submit(ctx(), cl); transport.IsRateLimited(err) {
				t.Fatalf("%s: call %d of %d refused by the limit: %v", what, i+1, k, err)
			}
		}
	}
	plain := func() context.Context { return ctxT(t) }

	// Burst from 127.0.0.1 through the follower until refused.
	start := time.Now()
	took := 0 // calls the limiter admitted
	var refused error
	for refused == nil {
		if err := submit(ctxT(t), one); transport.IsRateLimited(err) {
			refused = err
			break
		}
		took++
		if max := burst + 1 + int(time.Since(start).Seconds()*rate); took > max {
			t.Fatalf("%d submissions admitted in %s, limit is %g per second, burst %d", took, time.Since(start), rate, burst)
		}
	}
	if took < burst {
		t.Fatalf("only %d of a burst of %d admitted before %v", took, burst, refused)
	}
	st := status.Convert(refused)
	want := "client 127.0.0.1 is over the write rate limit of 0.5 per second, burst 3 (--client-write-rate, --client-write-burst)"
	if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), want) {
		t.Fatalf("want ResourceExhausted (RATE_LIMITED) containing %q, got %v", want, refused)
	}
	retry, ok := transport.RetryAfter(refused)
	if !ok || retry <= 0 || retry > 2*time.Second+10*time.Millisecond {
		t.Fatalf("retry-after %v (present %v): want (0, 2s]", retry, ok)
	}

	// Another client identity has its own bucket.
	admitted("127.0.0.2 while 127.0.0.1 is limited", burst, two, plain)
	// The follower forwarded every admitted call to the leader, which did not count them: the
	// leader admits a full burst from 127.0.0.1 itself.
	admitted("127.0.0.1 directly to the leader after its forwarded calls", burst, dialFrom(t, "127.0.0.1", leader.GRPCAddr), plain)
	// A client that only claims to be a forwarding JM is counted like any other.
	spoof := dialFrom(t, "127.0.0.2", leader.GRPCAddr)
	var spoofErr error
	for i := 0; i <= burst+1 && !transport.IsRateLimited(spoofErr); i++ {
		spoofErr = submit(metadata.AppendToOutgoingContext(ctxT(t), "x-jmcluster-forwarded", follower.ID), spoof)
	}
	if !transport.IsRateLimited(spoofErr) {
		t.Fatalf("a client claiming to be forwarded was not limited: %v", spoofErr)
	}

	// After the retry-after, the first client is admitted again.
	<-time.After(retry)
	admitted("127.0.0.1 after waiting the retry-after "+retry.String(), 1, one, plain)
}
