package jobmaster_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

type badCall struct {
	name string
	call func(ctx context.Context) error
	code codes.Code
	msg  string // a substring of the status message
}

func runBadCalls(t *testing.T, calls []badCall) {
	t.Helper()
	ctx := ctxT(t)
	for _, bc := range calls {
		err := bc.call(ctx)
		st := status.Convert(err)
		if st.Code() != bc.code || !strings.Contains(st.Message(), bc.msg) {
			t.Errorf("%s: want %v containing %q, got %v", bc.name, bc.code, bc.msg, err)
		}
	}
}

// TestBadInputLeavesStateUnchanged: every TM -> JM call (JobMasterService on the leader) and
// every JM -> TM call (TaskManagerService on a TM) given bad input — unknown job, unknown
// attempt, wrong TM, stale attempt number, bad fields, oversized message — returns a clear
// error, and neither the replicated state (the leader's State.Hash) nor any TM's tasks change.
func TestBadInputLeavesStateUnchanged(t *testing.T) {
	c := newCluster(t)
	id := c.Submit(testcluster.StreamingChain("bad-input", 2, 100, 0))
	first := waitAllRunning(t, c, id)
	// A restart of region 0 gives map[0] a stale attempt in its history.
	old := testcluster.Attempts(first)["map[0]"]
	if err := tmByID(t, c, old.TM).A.TM.FailTask(old.ID, "make a stale attempt"); err != nil {
		t.Fatal(err)
	}
	rec := c.WaitJob(id, "region 0 restarted", 20*time.Second, func(r *pb.JobRecord) bool {
		return testcluster.AllRunning(r) && testcluster.Attempts(r)["map[0]"].Number == old.Number+1
	})
	l := c.Leader()
	atts := testcluster.Attempts(rec)
	cur := atts["map[0]"]
	var otherTM string
	for _, tm := range c.TMs {
		if tm.ID != cur.TM {
			otherTM = tm.ID
		}
	}
	var result string
	for _, r := range rec.ExecutionGraph.Results {
		if r.ProducerVertexId == "map" {
			result = r.ResultId
		}
	}
	huge := strings.Repeat("x", 5<<20)

	tasksBefore := map[string]string{}
	for _, tm := range c.TMs {
		tasksBefore[tm.ID] = tmTasks(tm)
	}
	hashBefore, indexBefore := l.A.State.Hash(), l.A.State.AppliedIndex()

	jmc := jmClient(c, l)
	upd := func(r *pb.UpdateTaskExecutionStateRequest) func(context.Context) error {
		return func(ctx context.Context) error { _, err := jmc.UpdateTaskExecutionState(ctx, r); return err }
	}
	sched := func(r *pb.ScheduleOrUpdateConsumersRequest) func(context.Context) error {
		return func(ctx context.Context) error { _, err := jmc.ScheduleOrUpdateConsumers(ctx, r); return err }
	}
	part := func(r *pb.RequestPartitionStateRequest) func(context.Context) error {
		return func(ctx context.Context) error { _, err := jmc.RequestPartitionState(ctx, r); return err }
	}
	reg := func(r *pb.RegisterTaskManagerRequest) func(context.Context) error {
		return func(ctx context.Context) error { _, err := jmc.RegisterTaskManager(ctx, r); return err }
	}
	hb := func(r *pb.HeartbeatRequest) func(context.Context) error {
		return func(ctx context.Context) error { _, err := jmc.Heartbeat(ctx, r); return err }
	}
	failed := pb.ExecutionState_EXECUTION_STATE_FAILED
	runBadCalls(t, []badCall{
		{"update: unknown job", upd(&pb.UpdateTaskExecutionStateRequest{TmId: cur.TM, JobId: "no-such-job", AttemptId: cur.ID, State: failed}), codes.NotFound, "unknown job"},
		{"update: unknown attempt", upd(&pb.UpdateTaskExecutionStateRequest{TmId: cur.TM, JobId: id, AttemptId: "no-such-attempt", State: failed}), codes.NotFound, "unknown attempt"},
		{"update: wrong TM", upd(&pb.UpdateTaskExecutionStateRequest{TmId: otherTM, JobId: id, AttemptId: cur.ID, State: failed}), codes.PermissionDenied, "is assigned to " + cur.TM},
		{"update: stale attempt number", upd(&pb.UpdateTaskExecutionStateRequest{TmId: old.TM, JobId: id, AttemptId: old.ID, State: failed}), codes.FailedPrecondition, "stale attempt"},
		{"update: no state", upd(&pb.UpdateTaskExecutionStateRequest{TmId: cur.TM, JobId: id, AttemptId: cur.ID}), codes.InvalidArgument, "invalid execution state"},
		{"update: unknown state", upd(&pb.UpdateTaskExecutionStateRequest{TmId: cur.TM, JobId: id, AttemptId: cur.ID, State: 99}), codes.InvalidArgument, "invalid execution state"},
		{"update: no tm_id", upd(&pb.UpdateTaskExecutionStateRequest{JobId: id, AttemptId: cur.ID, State: failed}), codes.InvalidArgument, "tm_id"},
		{"update: no ids", upd(&pb.UpdateTaskExecutionStateRequest{TmId: cur.TM, State: failed}), codes.InvalidArgument, "required"},
		{"update: oversized", upd(&pb.UpdateTaskExecutionStateRequest{TmId: cur.TM, JobId: id, AttemptId: cur.ID, State: failed, FailureCause: huge}), codes.ResourceExhausted, "larger than max"},

		{"consumers: unknown job", sched(&pb.ScheduleOrUpdateConsumersRequest{TmId: cur.TM, JobId: "no-such-job", ProducerAttemptId: cur.ID, ResultId: result}), codes.NotFound, "unknown job"},
		{"consumers: unknown attempt", sched(&pb.ScheduleOrUpdateConsumersRequest{TmId: cur.TM, JobId: id, ProducerAttemptId: "no-such-attempt", ResultId: result}), codes.NotFound, "unknown attempt"},
		{"consumers: wrong TM", sched(&pb.ScheduleOrUpdateConsumersRequest{TmId: otherTM, JobId: id, ProducerAttemptId: cur.ID, ResultId: result}), codes.PermissionDenied, "is assigned to"},
		{"consumers: stale attempt number", sched(&pb.ScheduleOrUpdateConsumersRequest{TmId: old.TM, JobId: id, ProducerAttemptId: old.ID, ResultId: result}), codes.FailedPrecondition, "stale attempt"},
		{"consumers: unknown result", sched(&pb.ScheduleOrUpdateConsumersRequest{TmId: cur.TM, JobId: id, ProducerAttemptId: cur.ID, ResultId: "no-such-result"}), codes.NotFound, "unknown result"},
		{"consumers: wrong partition", sched(&pb.ScheduleOrUpdateConsumersRequest{TmId: cur.TM, JobId: id, ProducerAttemptId: cur.ID, ResultId: result, PartitionIndex: 1}), codes.InvalidArgument, "is not produced by"},
		{"consumers: oversized", sched(&pb.ScheduleOrUpdateConsumersRequest{TmId: cur.TM, JobId: id, ProducerAttemptId: cur.ID, ResultId: huge}), codes.ResourceExhausted, "larger than max"},

		{"partition state: unknown job", part(&pb.RequestPartitionStateRequest{JobId: "no-such-job", ResultId: result}), codes.NotFound, "unknown job"},
		{"partition state: unknown result", part(&pb.RequestPartitionStateRequest{JobId: id, ResultId: "no-such-result"}), codes.NotFound, "unknown result"},
		{"partition state: partition out of range", part(&pb.RequestPartitionStateRequest{JobId: id, ResultId: result, PartitionIndex: 7}), codes.InvalidArgument, "partitions"},
		{"partition state: negative partition", part(&pb.RequestPartitionStateRequest{JobId: id, ResultId: result, PartitionIndex: -1}), codes.InvalidArgument, "partitions"},

		{"register: no addresses", reg(&pb.RegisterTaskManagerRequest{TmId: "ghost", Slots: 2}), codes.InvalidArgument, "required"},
		{"register: no slots", reg(&pb.RegisterTaskManagerRequest{TmId: "ghost", GrpcAddress: "127.0.0.1:1", DataAddress: "127.0.0.1:2"}), codes.InvalidArgument, "slots"},
		{"register: from a later epoch", reg(&pb.RegisterTaskManagerRequest{TmId: "ghost", GrpcAddress: "127.0.0.1:1", DataAddress: "127.0.0.1:2", Slots: 2, EpochSeen: l.A.JM.Epoch() + 5}), codes.FailedPrecondition, "stale leader epoch"},
		{"register: oversized", reg(&pb.RegisterTaskManagerRequest{TmId: huge}), codes.ResourceExhausted, "larger than max"},
		{"heartbeat: no tm_id", hb(&pb.HeartbeatRequest{}), codes.InvalidArgument, "tm_id"},
	})
	// A heartbeat from a TM the leader does not know is answered with unknown_task_manager.
	resp, err := jmc.Heartbeat(ctxT(t), &pb.HeartbeatRequest{TmId: "ghost", Deployed: []*pb.DeployedExecution{{JobId: id, AttemptId: cur.ID, State: stRunning}}})
	if err != nil || !resp.UnknownTaskManager {
		t.Errorf("heartbeat from an unknown TM: %v %v", resp, err)
	}
	if _, ok := l.A.JM.Registry().Get("ghost"); ok {
		t.Errorf("a refused registration entered the registry")
	}
	// A heartbeat in which a TM claims another TM's attempt: the leader cancels the claim on
	// the claiming TM (which does not run it) and commits nothing.
	foreign := l.A.JM.ForeignCancels()
	if _, err := jmc.Heartbeat(ctxT(t), &pb.HeartbeatRequest{TmId: otherTM, EpochSeen: l.A.JM.Epoch(),
		Deployed: []*pb.DeployedExecution{{JobId: id, AttemptId: cur.ID, State: stRunning}}}); err != nil {
		t.Fatalf("heartbeat claiming a foreign attempt: %v", err)
	}
	testcluster.WaitFor(t, 10*time.Second, "the claimed attempt to be cancelled on the claiming TM", func() (bool, string) {
		n := l.A.JM.ForeignCancels()
		return n > foreign, fmt.Sprintf("foreign cancels %d (was %d)", n, foreign)
	})

	// JM -> TM: TaskManagerService on the TM running map[0], with its current epoch.
	tm := tmByID(t, c, cur.TM)
	tmc := tmClient(c, tm)
	epoch := tm.A.TM.Epoch()
	tdd, err := graph.TaskDeploymentDescriptor(rec, "map", 0)
	if err != nil {
		t.Fatal(err)
	}
	with := func(edit func(d *pb.TaskDeploymentDescriptor)) *pb.TaskDeploymentDescriptor {
		d := proto.Clone(tdd).(*pb.TaskDeploymentDescriptor)
		d.AttemptId, d.AttemptNumber = "fresh-attempt", cur.Number+1
		edit(d)
		return d
	}
	submit := func(d *pb.TaskDeploymentDescriptor) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := tmc.SubmitTask(ctx, &pb.SubmitTaskRequest{Epoch: epoch, Task: d})
			return err
		}
	}
	cancel := func(jobID, attemptID string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := tmc.CancelTask(ctx, &pb.CancelTaskRequest{Epoch: epoch, JobId: jobID, AttemptId: attemptID})
			return err
		}
	}
	partInfo := func(r *pb.UpdatePartitionInfoRequest) func(context.Context) error {
		return func(ctx context.Context) error {
			r.Epoch = epoch
			_, err := tmc.UpdatePartitionInfo(ctx, r)
			return err
		}
	}
	runBadCalls(t, []badCall{
		{"submit: no task", submit(nil), codes.InvalidArgument, "task is missing"},
		{"submit: no ids", submit(with(func(d *pb.TaskDeploymentDescriptor) { d.JobId, d.AttemptId = "", "" })), codes.InvalidArgument, "job_id is empty"},
		{"submit: slot out of range", submit(with(func(d *pb.TaskDeploymentDescriptor) { d.SlotIndex = 99 })), codes.InvalidArgument, "slot_index 99"},
		{"submit: subtask out of range", submit(with(func(d *pb.TaskDeploymentDescriptor) { d.SubtaskIndex = 5 })), codes.InvalidArgument, "subtask_index 5"},
		{"submit: busy slot", submit(with(func(*pb.TaskDeploymentDescriptor) {})), codes.ResourceExhausted, "is busy"},
		{"submit: stale attempt number", submit(with(func(d *pb.TaskDeploymentDescriptor) { d.AttemptNumber = cur.Number })), codes.FailedPrecondition, "stale attempt number"},
		{"submit: oversized", submit(with(func(d *pb.TaskDeploymentDescriptor) { d.VertexId = huge })), codes.ResourceExhausted, "larger than max"},
		{"cancel: unknown job", cancel("no-such-job", cur.ID), codes.NotFound, "belongs to job " + id},
		{"cancel: no attempt", cancel(id, ""), codes.InvalidArgument, "required"},
		{"cancel: oversized", cancel(id, huge), codes.ResourceExhausted, "larger than max"},
		{"partition info: unknown attempt", partInfo(&pb.UpdatePartitionInfoRequest{JobId: id, ConsumerAttemptId: "no-such-attempt"}), codes.NotFound, "is not on " + tm.ID},
		{"partition info: unknown result", partInfo(&pb.UpdatePartitionInfoRequest{JobId: id, ConsumerAttemptId: cur.ID,
			Channels: []*pb.InputChannelDescriptor{{ResultId: "no-such-result"}}}), codes.InvalidArgument, "no input channel"},
	})
	// Cancelling an attempt the TM does not have is a no-op answered CANCELED.
	if r, err := tmc.CancelTask(ctxT(t), &pb.CancelTaskRequest{Epoch: epoch, JobId: id, AttemptId: "no-such-attempt"}); err != nil || r.State != stCanceled {
		t.Errorf("cancel of an unknown attempt: %v %v", r, err)
	}

	for _, tm := range c.TMs {
		if got := tmTasks(tm); got != tasksBefore[tm.ID] {
			t.Errorf("%s tasks changed:\nbefore %s\nafter  %s", tm.ID, tasksBefore[tm.ID], got)
		}
	}
	if h, i := l.A.State.Hash(), l.A.State.AppliedIndex(); h != hashBefore || i != indexBefore {
		t.Fatalf("replicated state changed by bad input: index %d -> %d; %s", indexBefore, i, testcluster.Describe(c.Job(id)))
	}
}
