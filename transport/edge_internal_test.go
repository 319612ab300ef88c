package transport

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/transport/pb"
)

var (
	errNotLeader   = errors.New("not the leader")
	errReconciling = errors.New("reconciling")
	errLimited     = errors.New("over the write limit")
	errHandler     = errors.New("the handler's own error")
)

// situation is the node a call lands on, as a guard sees it.
type situation struct {
	leader, reconciling, forwarded, overLimit bool
	handlerErr                                error
}

func (s situation) Limit(context.Context) error {
	if s.overLimit {
		return errLimited
	}
	return nil
}

func (s situation) Admit(_ context.Context, p Policy, _ bool) error {
	switch {
	case !s.leader:
		return errNotLeader
	case p.Gated && s.reconciling:
		return errReconciling
	}
	return nil
}

func (s situation) Forwardable(_ context.Context, err error) bool {
	return errors.Is(err, errNotLeader) && !s.forwarded
}

func (s situation) Forward(context.Context, string, any) (any, error) { return "forwarded", nil }

func (s situation) Status(_ context.Context, err error) error { return err }

// TestEdgeDecides: what the interceptor does with a call, for each kind of row and each
// situation of the node it lands on — every rule a named case, the way TestMerge states
// reconciliation's rules. The columns are shown on a real cluster in jmserver.
func TestEdgeDecides(t *testing.T) {
	submit := pb.ClientService_SubmitJob_FullMethodName
	list := pb.ClientService_ListJobs_FullMethodName
	heartbeat := pb.JobMasterService_Heartbeat_FullMethodName
	update := pb.JobMasterService_UpdateTaskExecutionState_FullMethodName
	join := pb.OperatorService_RaftJoin_FullMethodName
	status := pb.ClientService_ClusterStatus_FullMethodName
	cases := []struct {
		name   string
		method string
		req    any
		at     situation
		want   string // "served", "forwarded", or the refusal
	}{
		{"a local method is served by a follower", status, nil, situation{}, "served"},
		{"a leader-only method is refused on a follower", heartbeat, nil, situation{}, errNotLeader.Error()},
		{"a leader-only method is served by the leader", heartbeat, nil, situation{leader: true}, "served"},
		{"a leader-only, ungated method is served while reconciling", heartbeat, nil, situation{leader: true, reconciling: true}, "served"},
		{"a gated method is refused while reconciling", update, nil, situation{leader: true, reconciling: true}, errReconciling.Error()},
		{"a gated method is refused NOT_LEADER on a follower, not forwarded", update, nil, situation{}, errNotLeader.Error()},
		{"a forwardable write is forwarded by a follower", submit, nil, situation{}, "forwarded"},
		{"a forwardable write already forwarded once is refused", submit, nil, situation{forwarded: true}, errNotLeader.Error()},
		{"a forwardable write is refused while the leader reconciles", submit, nil, situation{leader: true, reconciling: true}, errReconciling.Error()},
		{"the write limit comes first, even on a follower", submit, nil, situation{overLimit: true}, errLimited.Error()},
		{"the write limit comes first, even while reconciling", submit, nil, situation{leader: true, reconciling: true, overLimit: true}, errLimited.Error()},
		{"a read served where it lands", list, &pb.ListJobsRequest{}, situation{}, "served"},
		{"a consistent read is forwarded by a follower", list, &pb.ListJobsRequest{Consistent: true}, situation{}, "forwarded"},
		{"a consistent read is served by the leader", list, &pb.ListJobsRequest{Consistent: true}, situation{leader: true}, "served"},
		{"a consistent read is served while reconciling (not gated)", list, &pb.ListJobsRequest{Consistent: true}, situation{leader: true, reconciling: true}, "served"},
		{"a local forwardable call runs here first", join, nil, situation{}, "served"},
		{"a local forwardable call is forwarded when the handler says not-leader", join, nil, situation{handlerErr: errNotLeader}, "forwarded"},
		{"a local forwardable call already forwarded keeps the handler's not-leader", join, nil, situation{handlerErr: errNotLeader, forwarded: true}, errNotLeader.Error()},
		{"any other handler error is returned, not forwarded", join, nil, situation{handlerErr: errHandler}, errHandler.Error()},
		{"a method without a row is refused", "/jmcluster.v1.ClientService/Nope", nil, situation{leader: true}, "Unimplemented"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := &edge{g: c.at, who: "JobMaster"}
			handler := func(context.Context, any) (any, error) {
				if c.at.handlerErr != nil {
					return nil, c.at.handlerErr
				}
				return "served", nil
			}
			reply, err := e.unary(context.Background(), c.req, &grpc.UnaryServerInfo{FullMethod: c.method}, handler)
			got := describe(reply, err)
			if got != c.want {
				t.Fatalf("got %q, want %q", got, c.want)
			}
		})
	}
}

// TestEdgeWithoutGuard: a TaskManager's server (no guard) serves its Local rows and refuses,
// rather than serves, a method whose row needs a JobMaster.
func TestEdgeWithoutGuard(t *testing.T) {
	e := &edge{who: "TaskManager"}
	served := func(context.Context, any) (any, error) { return "served", nil }
	for method, want := range map[string]string{
		pb.TaskManagerService_SubmitTasks_FullMethodName: "served",
		pb.DataService_ReadPartition_FullMethodName:      "served",
		pb.ClientService_SubmitJob_FullMethodName:        "Internal",
	} {
		reply, err := e.unary(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: method}, served)
		if got := describe(reply, err); got != want {
			t.Errorf("%s: got %q, want %q", method, got, want)
		}
	}
}

func describe(reply any, err error) string {
	if err == nil {
		return reply.(string)
	}
	if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
		return st.Code().String()
	}
	return err.Error()
}
