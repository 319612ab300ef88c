package jmserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/jobmaster"
	"github.com/jmcluster/jmcluster/membership"
	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// OperatorService implements pb.OperatorServiceServer on the Raft node's plain methods
// (cluster.Node), the gossip pool and the state hash. RaftJoin and RaftRemove are tried here
// and, when this node is not the Raft leader, forwarded to it by the edge (their policy rows);
// the rest answer as this node sees the cluster.
type OperatorService struct {
	pb.UnimplementedOperatorServiceServer
	d Deps
}

// NewOperatorService returns the operator service.
func NewOperatorService(d Deps) *OperatorService { return &OperatorService{d: d} }

// NodeInfo describes this node (bootstrap discovery).
func (s *OperatorService) NodeInfo(context.Context, *pb.NodeInfoRequest) (*pb.NodeInfoResponse, error) {
	return s.d.Node.Info(), nil
}

// RaftPeers lists the Raft configuration as this node sees it.
func (s *OperatorService) RaftPeers(context.Context, *pb.RaftPeersRequest) (*pb.RaftPeersResponse, error) {
	peers, err := s.d.Node.Peers()
	if err != nil {
		return nil, err
	}
	leader, _ := s.d.Node.Leader()
	return &pb.RaftPeersResponse{Peers: peers, LeaderId: leader}, nil
}

// RaftJoin adds a voter (cluster.ErrNotLeader on a follower: the edge forwards the call).
func (s *OperatorService) RaftJoin(ctx context.Context, req *pb.RaftJoinRequest) (*pb.RaftJoinResponse, error) {
	if req.GetId() == "" || req.GetRaftAddress() == "" {
		return nil, status.Error(codes.InvalidArgument, "id and raft_address are required")
	}
	idx, err := s.d.Node.AddVoter(req.GetId(), req.GetRaftAddress(), req.GetGrpcAddress())
	s.d.audit(ctx, "raft join", err, "server", req.GetId(), "raft_address", req.GetRaftAddress(), "grpc_address", req.GetGrpcAddress(), "index", idx)
	if err != nil {
		return nil, err
	}
	return &pb.RaftJoinResponse{Index: idx}, nil
}

// RaftRemove removes a server (cluster.ErrNotLeader on a follower: the edge forwards the call).
func (s *OperatorService) RaftRemove(ctx context.Context, req *pb.RaftRemoveRequest) (*pb.RaftRemoveResponse, error) {
	if req.GetId() == "" {
		return nil, status.Error(codes.InvalidArgument, "id is required")
	}
	idx, err := s.d.Node.RemoveServer(req.GetId())
	s.d.audit(ctx, "raft remove", err, "server", req.GetId(), "index", idx)
	if err != nil {
		return nil, err
	}
	return &pb.RaftRemoveResponse{Index: idx}, nil
}

// RaftTransferLeadership hands this leader's leadership to another voter.
func (s *OperatorService) RaftTransferLeadership(ctx context.Context, req *pb.RaftTransferLeadershipRequest) (*pb.RaftTransferLeadershipResponse, error) {
	to, err := s.d.Node.TransferLeadership(req.GetToId())
	s.d.audit(ctx, "raft transfer leadership", err, "to", req.GetToId(), "leader", to)
	if err != nil {
		return nil, err
	}
	return &pb.RaftTransferLeadershipResponse{FromId: s.d.Node.ID(), LeaderId: to}, nil
}

// snapshotChunk is the size of SnapshotSave's chunks: well under the message size limit.
const snapshotChunk = 1 << 20

// SnapshotSave streams a snapshot file of the replicated state, from the established leader
// once Raft confirms it still leads (so the copy is not a deposed leader's).
func (s *OperatorService) SnapshotSave(_ *pb.SnapshotSaveRequest, stream pb.OperatorService_SnapshotSaveServer) error {
	ctx := stream.Context()
	// The established leader, or a Raft leader whose state is behind the TaskManagers (it
	// never establishes): its state may be the best copy left, to save and restore with its
	// epoch raised.
	if !s.d.Node.Established() && s.d.Node.Behind() == "" {
		hctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, addr, _ := s.d.Node.LeaderGRPCAddr(hctx)
		return transport.NotLeaderError(addr)
	}
	verify := s.d.Node.VerifyLeader
	if !s.d.Node.Established() {
		verify = s.d.Node.VerifyBehindLeader
	}
	if err := verify(ctx); err != nil {
		return err
	}
	snap, index, err := s.d.State.SnapshotAt()
	if err != nil {
		return err
	}
	defer snap.Release()
	w := &chunkWriter{send: func(b []byte) error { return stream.Send(&pb.SnapshotChunk{Data: b, Index: index}) }}
	if err := fsm.WriteSnapshotFileHeader(w, index); err != nil {
		return err
	}
	if err := snap.Persist(w); err != nil {
		return err
	}
	if err := w.flush(); err != nil {
		return err
	}
	s.d.audit(ctx, "snapshot save", nil, "index", index, "bytes", w.total)
	return nil
}

// MaxRestoreBytes bounds the snapshot file SnapshotRestore accepts (held in memory while it is
// checked and restored): far above the 100,000 executions the benchmarks hold (docs/benchmarks.md).
const MaxRestoreBytes = 1 << 30

// SnapshotRestore receives a snapshot file and has the Raft leader restore it (cluster.Node.Restore):
// the file is checked by restoring it offline first, so a damaged file changes nothing.
func (s *OperatorService) SnapshotRestore(stream pb.OperatorService_SnapshotRestoreServer) error {
	ctx := stream.Context()
	if !s.d.Node.IsLeader() {
		hctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, addr, _ := s.d.Node.LeaderGRPCAddr(hctx)
		return transport.NotLeaderError(addr)
	}
	var file []byte
	for first := true; ; first = false {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if first && s.d.Node.Behind() == "" && !chunk.GetForce() {
			err := status.Errorf(codes.FailedPrecondition, "snapshot restore: this cluster's state is not behind its TaskManagers (leader %s, epoch %d): restoring would replace the state it holds and cancel every task the file does not know; to do that anyway, --force", s.d.Node.ID(), s.d.State.Epoch().GetEpoch())
			s.d.audit(ctx, "snapshot restore", err)
			return err
		}
		if len(file)+len(chunk.GetData()) > MaxRestoreBytes {
			return status.Errorf(codes.ResourceExhausted, "snapshot restore: the file is over the limit of %d bytes (MaxRestoreBytes)", MaxRestoreBytes)
		}
		file = append(file, chunk.GetData()...)
	}
	sum, err := fsm.InspectSnapshotFile(bytes.NewReader(file))
	if err != nil {
		s.d.audit(ctx, "snapshot restore", err, "bytes", len(file))
		return fmt.Errorf("snapshot restore: the file does not restore: %w", err)
	}
	// The TaskManagers the restored state knows are asked which epoch they have seen: gossip may
	// not know them (a rebuilt cluster), and the restored leader must establish above them all.
	if addrs, err := fsm.SnapshotPoolAddresses(file); err == nil && s.d.JM != nil {
		s.d.Node.RaiseEpochFloor(probeEpochs(ctx, s.d.JM, addrs))
	}
	index, floor, err := s.d.Node.Restore(ctx, func(minEpoch uint64) ([]byte, error) { return fsm.RestoreStream(file, minEpoch) })
	s.d.audit(ctx, "snapshot restore", err, "saved_index", sum.Index, "jobs", len(sum.Jobs), "hash", sum.Hash, "index", index, "epoch_floor", floor)
	if err != nil {
		return err
	}
	return stream.SendAndClose(&pb.SnapshotRestoreResponse{Index: index, EpochFloor: floor, SavedIndex: sum.Index, Jobs: int32(len(sum.Jobs)), Hash: sum.Hash})
}

// probeEpochs asks the TaskManagers at addrs, a few at a time and within 2 s each, which epoch
// they have seen, and returns the highest answer (0 when none answers).
func probeEpochs(ctx context.Context, jm *jobmaster.JobMaster, addrs []string) uint64 {
	var (
		mu   sync.Mutex
		best uint64
		wg   sync.WaitGroup
	)
	sem := make(chan struct{}, 16)
	for _, a := range addrs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			if seen, err := jm.ProbeEpoch(pctx, a); err == nil {
				mu.Lock()
				best = max(best, seen)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return best
}

// chunkWriter is a raft.SnapshotSink that sends what is written in chunks of snapshotChunk.
type chunkWriter struct {
	send  func([]byte) error
	buf   []byte
	total int
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	w.total += len(p)
	w.buf = append(w.buf, p...)
	for len(w.buf) >= snapshotChunk {
		if err := w.send(w.buf[:snapshotChunk]); err != nil {
			return 0, err
		}
		w.buf = append([]byte(nil), w.buf[snapshotChunk:]...)
	}
	return len(p), nil
}

func (w *chunkWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	err := w.send(w.buf)
	w.buf = nil
	return err
}

func (w *chunkWriter) Close() error  { return nil }
func (w *chunkWriter) Cancel() error { return nil }
func (w *chunkWriter) ID() string    { return "snapshot-save" }

// Snapshot takes a snapshot on this node.
func (s *OperatorService) Snapshot(context.Context, *pb.SnapshotRequest) (*pb.SnapshotResponse, error) {
	id, index, err := s.d.Node.Snapshot()
	if err != nil {
		return nil, err
	}
	return &pb.SnapshotResponse{Id: id, Index: index}, nil
}

// DrainTaskManager drains a TaskManager or ends its drain (jobmaster.Drain), on the established
// leader (the edge forwards it there), with an audit line.
func (s *OperatorService) DrainTaskManager(ctx context.Context, req *pb.DrainTaskManagerRequest) (*pb.DrainTaskManagerResponse, error) {
	res, err := s.d.JM.Drain(ctx, req.GetTmId(), !req.GetUndo(), req.GetForce())
	action := "tm drain"
	if req.GetUndo() {
		action = "tm drain undo"
	}
	s.d.audit(ctx, action, err, "tm", req.GetTmId(), "force", req.GetForce(), "executions", res.Executions, "regions", res.Regions, "index", res.Index)
	if err != nil {
		return nil, err
	}
	return &pb.DrainTaskManagerResponse{Executions: int32(res.Executions), Regions: int32(res.Regions), Index: res.Index}, nil
}

// Members lists the gossip pool (empty when gossip is off).
func (s *OperatorService) Members(context.Context, *pb.MembersRequest) (*pb.MembersResponse, error) {
	out := &pb.MembersResponse{}
	if s.d.Members != nil {
		out.Members = s.d.Members()
	}
	return out, nil
}

// GossipKeyring lists or changes the gossip keyring of every live member of the pool
// (keyringFanout), writing an audit line for a change.
func (s *OperatorService) GossipKeyring(ctx context.Context, req *pb.KeyringRequest) (*pb.GossipKeyringResponse, error) {
	if s.d.Gossip == nil {
		return nil, status.Error(codes.FailedPrecondition, "gossip is off on this JobMaster (--gossip-addr)")
	}
	resp, err := keyringFanout(ctx, s.d.Gossip, s.d.TLS, req)
	if req.GetOp() != pb.KeyringOp_KEYRING_OP_LIST {
		if err == nil && resp.Failed > 0 {
			err = fmt.Errorf("%d of %d members failed", resp.Failed, len(resp.Members))
		}
		s.d.audit(ctx, "gossip keyring "+opName(req.GetOp())+" on the pool", err, "key", membership.KeyFingerprint(req.GetKey()))
	}
	return resp, err
}

// StateHash is the hash of this replica's state and the index it was taken at.
func (s *OperatorService) StateHash(context.Context, *pb.StateHashRequest) (*pb.StateHashResponse, error) {
	hash, index := s.d.State.HashAt()
	return &pb.StateHashResponse{Hash: hash, AppliedIndex: index, NodeId: s.d.Node.ID()}, nil
}
