package agent_test

import (
	"context"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// saveSnapshot streams a snapshot file from the JobMaster j (OperatorService.SnapshotSave).
func saveSnapshot(t *testing.T, c *testcluster.Cluster, j *testcluster.JM) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := pb.NewOperatorServiceClient(c.Conn(j.GRPCAddr)).SnapshotSave(ctx, &pb.SnapshotSaveRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var file []byte
	for {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return file
		}
		if err != nil {
			t.Fatalf("snapshot save from %s: %v", j.ID, err)
		}
		file = append(file, chunk.Data...)
	}
}

func restoreSnapshot(c *testcluster.Cluster, j *testcluster.JM, file []byte, force bool) (*pb.SnapshotRestoreResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := pb.NewOperatorServiceClient(c.Conn(j.GRPCAddr)).SnapshotRestore(ctx)
	if err != nil {
		return nil, err
	}
	if err := stream.Send(&pb.SnapshotChunk{Data: file, Force: force}); err != nil {
		return nil, err
	}
	return stream.CloseAndRecv()
}

// TestWipedClusterWithoutGossipWaitsForARestore: with gossip off, a new leader cannot read the
// TaskManagers' epochs from gossip. Three JobMasters are wiped while a streaming job runs (after
// a failover, so the TaskManagers have seen an epoch above the snapshot's) and start again
// empty: their leader establishes at first, the TaskManagers' registrations and heartbeats
// name the higher epoch they have seen, and the leader falls back to the state-behind guard
// instead of keeping an empty term. The tasks keep running. A restore is refused on a healthy
// cluster without force; on the wiped one it brings the job back with every attempt kept.
func TestWipedClusterWithoutGossipWaitsForARestore(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{JMs: 3, TMs: 2, NoGossip: true})
	id := c.Submit(testcluster.StreamingChain("wiped", 2, 20, 0))
	before := c.WaitJob(id, "RUNNING", 30*time.Second, testcluster.AllRunning)
	l := c.Leader()
	file := saveSnapshot(t, c, l)
	if _, err := restoreSnapshot(c, l, file, false); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a restore on a healthy cluster without force: %v, want FAILED_PRECONDITION", err)
	}
	epoch := l.A.JM.Epoch()
	c.KillJM(l)
	c.CompletedAfter(epoch, 30*time.Second)
	seen := c.Leader().A.JM.Epoch()

	for _, j := range c.JMs {
		c.KillJM(j)
		if err := os.RemoveAll(j.DataDir); err != nil {
			t.Fatal(err)
		}
	}
	for _, j := range c.JMs {
		c.StartJM(j)
	}
	var behind *testcluster.JM
	testcluster.WaitFor(t, 60*time.Second, "the new leader finding its state behind the TaskManagers", func() (bool, string) {
		for _, j := range c.Live() {
			if b := j.A.Node.Behind(); b != "" {
				behind = j
				return true, b
			}
		}
		return false, "no JobMaster reports its state behind"
	})
	t.Logf("%s: %s", behind.ID, behind.A.Node.Behind())
	for _, tm := range c.TMs {
		for _, task := range tm.A.TM.Tasks() {
			if task.State != pb.ExecutionState_EXECUTION_STATE_RUNNING {
				t.Fatalf("%s: task %s/%s[%d] is %s while the state is lost", tm.ID, task.JobID, task.VertexID, task.Subtask, task.State)
			}
		}
	}
	// The state of a behind leader may be the best copy left: it can be saved.
	if empty := saveSnapshot(t, c, behind); len(empty) == 0 {
		t.Fatal("a behind leader saved an empty file")
	}
	resp, err := restoreSnapshot(c, behind, file, false)
	if err != nil {
		t.Fatalf("restore onto the wiped cluster: %v", err)
	}
	if resp.EpochFloor < seen {
		t.Fatalf("epoch floor %d below the %d the TaskManagers had seen", resp.EpochFloor, seen)
	}
	after := c.WaitJob(id, "RUNNING after the restore", 60*time.Second, testcluster.AllRunning)
	if ch := testcluster.Changed(testcluster.Attempts(before), testcluster.Attempts(after)); len(ch) > 0 {
		t.Fatalf("attempts changed across the restore: %v", ch)
	}
	now := c.Leader()
	if now.A.JM.Epoch() <= seen {
		t.Fatalf("the restored leader's epoch %d is not above %d", now.A.JM.Epoch(), seen)
	}
	t.Logf("restored at epoch %d (floor %d; the TaskManagers had seen %d): every attempt kept", now.A.JM.Epoch(), resp.EpochFloor, seen)
}
