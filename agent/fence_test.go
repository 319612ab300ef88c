package agent

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/jmcluster/jmcluster/membership"
	"github.com/jmcluster/jmcluster/taskmanager"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// follower answers ClusterStatus as a JobMaster follower does: naming an established leader.
type follower struct {
	pb.UnimplementedClientServiceServer
	leader string
}

func (f *follower) ClusterStatus(context.Context, *pb.ClusterStatusRequest) (*pb.ClusterStatusResponse, error) {
	return &pb.ClusterStatusResponse{NodeId: "jm2", LeaderGrpcAddress: f.leader, Epoch: 1}, nil
}

// TestSelfFenceWorksWithGossipAlone: a TaskManager started with gossip and no --jm list holds a
// task of epoch 1 and cannot reach the leader, while a JobMaster it knows only through gossip
// names that leader as established. The TM cancels its tasks after FenceTimeout, long before
// the leader grace, as it does when the JobMasters are configured: the fence check asks the
// JobMasters gossip knows.
func TestSelfFenceWorksWithGossipAlone(t *testing.T) {
	// The leader: an address nothing answers on any more.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	leader := l.Addr().String()
	_ = l.Close()
	// The follower, with its gRPC server and its seat in the gossip pool.
	fl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterClientServiceServer(srv, &follower{leader: leader})
	go func() { _ = srv.Serve(fl) }()
	t.Cleanup(srv.Stop)
	g, err := membership.New(membership.TestConfig(membership.Meta{Role: membership.RoleJobMaster, ID: "jm2", GRPCAddr: fl.Addr().String(), Epoch: 1}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Shutdown() })

	const fence = 300 * time.Millisecond
	cfg := taskmanager.DefaultConfig()
	cfg.ID, cfg.WorkDir = "tm1", t.TempDir()
	cfg.GRPCAddr, cfg.DataAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.FenceTimeout, cfg.LeaderGrace, cfg.ShutdownTimeout = fence, 10*time.Minute, 100*time.Millisecond
	cfg.HeartbeatInterval = 100 * time.Millisecond // the fence timeout must exceed two of them
	gc := membership.TestConfig(membership.Meta{})
	gc.Join = []string{g.Addr()}
	tm, err := StartTaskManager(TaskManagerConfig{TM: cfg, Gossip: &gc, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tm.Kill)
	if len(cfg.JobMasters) != 0 {
		t.Fatal("the TM must know the JobMasters through gossip only")
	}

	conn, err := grpc.NewClient(tm.TM.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The leader of epoch 1 announces itself as a new leader does, with RequestReport, and
	// deploys one task.
	tmc := pb.NewTaskManagerServiceClient(conn)
	rs, err := tmc.RequestReport(context.Background(), &pb.RequestReportRequest{Epoch: 1, LeaderId: "jm1", LeaderGrpcAddress: leader})
	if err != nil {
		t.Fatal(err)
	}
	for {
		r, err := rs.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if r.GetLast() {
			break
		}
	}
	task := &pb.TaskDeploymentDescriptor{JobId: "job", VertexId: "src", Parallelism: 1, AttemptId: "a", StartTimestamp: 1,
		Operator: &pb.Operator{Kind: &pb.Operator_SequenceSource{SequenceSource: &pb.SequenceSource{Keys: 1}}}}
	if _, err := tmc.SubmitTask(context.Background(), &pb.SubmitTaskRequest{Epoch: 1, Task: task}); err != nil {
		t.Fatal(err)
	}
	// Bound: gossip converging plus a few fence checks; the grace (10 minutes) is far away.
	deadline := 50 * fence
	start := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	last := ""
	for {
		ts := tm.TM.Tasks()
		if len(ts) == 1 && ts[0].State == pb.ExecutionState_EXECUTION_STATE_CANCELED {
			t.Logf("fenced %s after the task was submitted: %s", time.Since(start).Round(time.Millisecond), ts[0].FailureCause)
			return
		}
		last = fmt.Sprintf("tasks %+v; JobMasters by gossip %d", ts, len(tm.Gossip.JobMasters()))
		if time.Since(start) > deadline {
			t.Fatalf("the TM did not fence itself within %v (FenceTimeout %v); last seen: %s", deadline, fence, last)
		}
		<-tick.C
	}
}
