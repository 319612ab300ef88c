package jmserver_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/jmcluster/jmcluster/internal/failpoint"
	tc "github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// Each column of the policy table (transport.Policies), shown enforced on a real cluster.

func call(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestGatedRefusedWhileReconciling: while the new leader reconciles (held there by the
// failpoint stuck-reconciling), every gated method is refused RECONCILING with the leader's
// configured retry delay — on the leader, and through a follower, which forwards a
// forwardable write to it — while the leader-only methods reconciliation needs (registration,
// heartbeats) are served.
func TestGatedRefusedWhileReconciling(t *testing.T) {
	c := tc.New(t, tc.Options{JMs: 3, TMs: 1, ReportDeadline: time.Second})
	id := c.Submit(tc.StreamingChain("gate", 1, 50, 0))
	c.WaitJob(id, "the job RUNNING", 30*time.Second, tc.AllRunning)
	failpoint.Set(t, failpoint.StuckReconciling.Name())
	c.KillJM(c.Leader())
	l := c.ReconcilingLeader(20 * time.Second)
	retry := l.A.JM.Config().RetryAfter

	jm := pb.NewJobMasterServiceClient(c.Conn(l.GRPCAddr))
	cl := c.Client(l)
	gated := map[string]error{}
	_, gated["UpdateTaskExecutionState"] = jm.UpdateTaskExecutionState(call(t), &pb.UpdateTaskExecutionStateRequest{
		JobId: id, AttemptId: "a", TmId: "tm1", State: pb.ExecutionState_EXECUTION_STATE_RUNNING})
	_, gated["ScheduleOrUpdateConsumers"] = jm.ScheduleOrUpdateConsumers(call(t), &pb.ScheduleOrUpdateConsumersRequest{JobId: id})
	_, gated["RequestPartitionState"] = jm.RequestPartitionState(call(t), &pb.RequestPartitionStateRequest{JobId: id})
	_, gated["SubmitJob"] = cl.SubmitJob(call(t), &pb.SubmitJobRequest{JobGraph: tc.StreamingChain("refused", 1, 1, 0)})
	_, gated["CancelJob"] = cl.CancelJob(call(t), &pb.CancelJobRequest{JobId: id})
	_, gated["RemoveArtifact"] = pb.NewArtifactServiceClient(c.Conn(l.GRPCAddr)).RemoveArtifact(call(t), &pb.RemoveArtifactRequest{Sha256: strings.Repeat("a", 64)})
	for _, f := range c.Live() {
		if f != l {
			_, gated["SubmitJob via follower "+f.ID] = c.Client(f).SubmitJob(call(t), &pb.SubmitJobRequest{JobGraph: tc.StreamingChain("refused", 1, 1, 0)})
		}
	}
	for m, err := range gated {
		got, ok := transport.RetryAfter(err)
		if !transport.IsReconciling(err) || !ok || got != retry {
			t.Errorf("%s on a reconciling leader: %v (retry-after %v), want RECONCILING with retry-after %v", m, err, got, retry)
		}
	}
	if !l.A.JM.Reconciling() {
		t.Fatalf("%s is no longer reconciling: the refusals above prove nothing", l.ID)
	}

	if _, err := jm.Heartbeat(call(t), &pb.HeartbeatRequest{TmId: "tm1"}); err != nil {
		t.Errorf("Heartbeat while reconciling: %v, want it served", err)
	}
	reg, err := jm.RegisterTaskManager(call(t), &pb.RegisterTaskManagerRequest{TmId: "tm-new", GrpcAddress: "127.0.0.1:1", DataAddress: "127.0.0.1:2", Slots: 1})
	if err != nil || reg.Epoch != l.A.JM.Epoch() {
		t.Errorf("RegisterTaskManager while reconciling: %v, %v; want it served at epoch %d", reg, err, l.A.JM.Epoch())
	}
}

// TestLeaderOnlyRefusedOnFollower: a follower refuses every JobMasterService call NOT_LEADER
// naming the leader's gRPC address (TaskManagers follow it), gated or not, and forwards none;
// the leader serves them.
func TestLeaderOnlyRefusedOnFollower(t *testing.T) {
	c := tc.New(t, tc.Options{JMs: 3})
	l, f := c.Leader(), c.Follower()
	jm := pb.NewJobMasterServiceClient(c.Conn(f.GRPCAddr))
	var seen string
	tc.WaitFor(t, 10*time.Second, "every JobMasterService call refused on "+f.ID+" naming "+l.GRPCAddr, func() (bool, string) {
		errs := map[string]error{}
		_, errs["Heartbeat"] = jm.Heartbeat(call(t), &pb.HeartbeatRequest{TmId: "tm1"})
		_, errs["RegisterTaskManager"] = jm.RegisterTaskManager(call(t), &pb.RegisterTaskManagerRequest{TmId: "tm1", GrpcAddress: "127.0.0.1:1", DataAddress: "127.0.0.1:2", Slots: 1})
		_, errs["UpdateTaskExecutionState"] = jm.UpdateTaskExecutionState(call(t), &pb.UpdateTaskExecutionStateRequest{
			JobId: "j", AttemptId: "a", TmId: "tm1", State: pb.ExecutionState_EXECUTION_STATE_RUNNING})
		_, errs["RequestPartitionState"] = jm.RequestPartitionState(call(t), &pb.RequestPartitionStateRequest{JobId: "j"})
		ok := true
		seen = ""
		for m, err := range errs {
			seen += fmt.Sprintf("%s: %v (reason %q, hint %q); ", m, err, transport.Reason(err), transport.LeaderHint(err))
			ok = ok && transport.Reason(err) == transport.ReasonNotLeader && transport.LeaderHint(err) == l.GRPCAddr
		}
		return ok, seen
	})
	t.Log(seen)
	hb, err := pb.NewJobMasterServiceClient(c.Conn(l.GRPCAddr)).Heartbeat(call(t), &pb.HeartbeatRequest{TmId: "tm1"})
	if err != nil || !hb.UnknownTaskManager || hb.Epoch != l.A.JM.Epoch() {
		t.Fatalf("Heartbeat of an unknown TM on the leader: %v, %v; want UnknownTaskManager at epoch %d", hb, err, l.A.JM.Epoch())
	}
}

// TestForwardableForwarded: a follower forwards the forwardable calls to the leader — writes,
// consistent reads, Raft membership changes — and serves the rest itself; a call another node
// already forwarded is refused, never forwarded again.
func TestForwardableForwarded(t *testing.T) {
	c := tc.New(t, tc.Options{JMs: 3})
	l := c.Leader()
	var fs []*tc.JM
	for _, j := range c.Live() {
		if j != l {
			fs = append(fs, j)
		}
	}
	f := fs[0]
	cl := c.Client(f)

	sub, err := cl.SubmitJob(call(t), &pb.SubmitJobRequest{JobGraph: tc.StreamingChain("forwarded", 1, 1, 0)})
	if err != nil {
		t.Fatalf("SubmitJob via %s: %v", f.ID, err)
	}
	if _, ok := l.A.State.Job(sub.JobId); !ok {
		t.Fatalf("SubmitJob via %s acknowledged %s, which the leader has not applied", f.ID, sub.JobId)
	}
	if _, err := cl.CancelJob(call(t), &pb.CancelJobRequest{JobId: sub.JobId}); err != nil {
		t.Fatalf("CancelJob via %s: %v", f.ID, err)
	}

	consistent, err := cl.ListJobs(call(t), &pb.ListJobsRequest{Consistent: true})
	if err != nil || consistent.ServedBy != l.ID {
		t.Fatalf("consistent ListJobs via %s: served by %q (%v), want the leader %s", f.ID, consistent.GetServedBy(), err, l.ID)
	}
	local, err := cl.ListJobs(call(t), &pb.ListJobsRequest{})
	if err != nil || local.ServedBy != f.ID {
		t.Fatalf("ListJobs via %s: served by %q (%v), want %s itself", f.ID, local.GetServedBy(), err, f.ID)
	}
	if _, err := pb.NewArtifactServiceClient(c.Conn(f.GRPCAddr)).ListArtifacts(call(t), &pb.ListArtifactsRequest{Consistent: true}); err != nil {
		t.Fatalf("consistent ListArtifacts via %s: %v", f.ID, err)
	}
	job, err := cl.GetJob(call(t), &pb.GetJobRequest{JobId: sub.JobId, Consistent: true})
	if err != nil || job.ServedBy != l.ID {
		t.Fatalf("consistent GetJob via %s: served by %q (%v), want the leader %s", f.ID, job.GetServedBy(), err, l.ID)
	}

	// Removing a server that is not a member succeeds on the leader only: on a follower the
	// Raft node says it is not the leader, and the edge forwards the call.
	op := pb.NewOperatorServiceClient(c.Conn(f.GRPCAddr))
	if rm, err := op.RaftRemove(call(t), &pb.RaftRemoveRequest{Id: "not-a-member"}); err != nil || rm.Index == 0 {
		t.Fatalf("RaftRemove via %s: %v, %v; want it forwarded and done", f.ID, rm, err)
	}
	if _, err := f.A.Node.RemoveServer("not-a-member"); err == nil {
		t.Fatalf("RemoveServer on the follower %s itself succeeded: the forwarding above proves nothing", f.ID)
	}

	// A call marked as forwarded by another node is refused, so a call never bounces between
	// two nodes that disagree about the leader.
	marked := metadata.AppendToOutgoingContext(call(t), "x-jmcluster-forwarded", fs[1].ID)
	_, err = cl.SubmitJob(marked, &pb.SubmitJobRequest{JobGraph: tc.StreamingChain("bounced", 1, 1, 0)})
	if transport.Reason(err) != transport.ReasonNotLeader {
		t.Fatalf("SubmitJob already forwarded, to the follower %s: %v, want NOT_LEADER", f.ID, err)
	}
}
