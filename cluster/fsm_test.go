package cluster

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// testFSM is a small StateMachine for this package's tests: it tracks the leader epoch with
// the committed+1 rule and records CancelJob commands as an ordered list of values (a job id
// "reject" is refused as a domain error).
type testFSM struct {
	mu     sync.Mutex
	epoch  *pb.LeaderEpoch
	values []string
}

func newTestFSM() *testFSM { return &testFSM{epoch: &pb.LeaderEpoch{}} }

func (f *testFSM) Apply(l *raft.Log) any {
	cmd, err := fsm.Decode(l.Data)
	if err != nil {
		panic(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch cmd.GetType() {
	case pb.CommandType_COMMAND_TYPE_ESTABLISH_LEADERSHIP:
		var c pb.EstablishLeadershipCommand
		if err := proto.Unmarshal(cmd.GetPayload(), &c); err != nil {
			panic(err)
		}
		if c.GetEpoch() != f.epoch.GetEpoch()+1 {
			return &fsm.Result{Index: l.Index, Err: fmt.Errorf("epoch %d is not %d+1", c.GetEpoch(), f.epoch.GetEpoch())}
		}
		f.epoch = &pb.LeaderEpoch{Epoch: c.GetEpoch(), LeaderId: c.GetLeaderId(), LeaderGrpcAddress: c.GetLeaderGrpcAddress(), Timestamp: c.GetTimestamp()}
		return &fsm.Result{Index: l.Index}
	case pb.CommandType_COMMAND_TYPE_CANCEL_JOB:
		var c pb.CancelJobCommand
		if err := proto.Unmarshal(cmd.GetPayload(), &c); err != nil {
			panic(err)
		}
		if c.GetJobId() == "reject" {
			return &fsm.Result{Index: l.Index, Err: fmt.Errorf("rejected")}
		}
		f.values = append(f.values, c.GetJobId())
		return &fsm.Result{Index: l.Index}
	}
	panic(fmt.Sprintf("unknown command type %s", cmd.GetType()))
}

func (f *testFSM) Epoch() *pb.LeaderEpoch {
	f.mu.Lock()
	defer f.mu.Unlock()
	return proto.Clone(f.epoch).(*pb.LeaderEpoch)
}

func (f *testFSM) Values() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.values)
}

type testFSMState struct {
	Epoch    uint64
	LeaderID string
	GRPCAddr string
	Values   []string
}

func (f *testFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &testSnapshot{state: testFSMState{
		Epoch: f.epoch.GetEpoch(), LeaderID: f.epoch.GetLeaderId(), GRPCAddr: f.epoch.GetLeaderGrpcAddress(),
		Values: slices.Clone(f.values),
	}}, nil
}

func (f *testFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var s testFSMState
	if err := json.NewDecoder(rc).Decode(&s); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.epoch = &pb.LeaderEpoch{Epoch: s.Epoch, LeaderId: s.LeaderID, LeaderGrpcAddress: s.GRPCAddr}
	f.values = s.Values
	return nil
}

type testSnapshot struct{ state testFSMState }

func (s *testSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := json.NewEncoder(sink).Encode(s.state); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s *testSnapshot) Release() {}
