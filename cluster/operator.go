package cluster

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// forwardedKey marks a call that a JobMaster already forwarded to the leader, so a call never
// bounces between two nodes that disagree about the leader.
const forwardedKey = "x-jmcluster-forwarded"

// OperatorHandlers implements the Raft part of OperatorService (NodeInfo, RaftPeers, RaftJoin,
// RaftRemove, Snapshot) on a Node. Membership changes reaching a follower are forwarded to the
// leader. The main server embeds it and adds the other methods.
type OperatorHandlers struct {
	pb.UnimplementedOperatorServiceServer
	node *Node
	// MapError turns a node error into a gRPC status error; the default maps the sentinel
	// errors to UNAVAILABLE. The gRPC edge may replace it with its richer mapping.
	MapError func(error) error
}

// NewOperatorHandlers returns the operator handlers of n.
func NewOperatorHandlers(n *Node) *OperatorHandlers {
	return &OperatorHandlers{node: n, MapError: DefaultStatus}
}

// NodeInfo describes this node (bootstrap discovery).
func (h *OperatorHandlers) NodeInfo(context.Context, *pb.NodeInfoRequest) (*pb.NodeInfoResponse, error) {
	return h.node.Info(), nil
}

// RaftPeers lists the Raft configuration as this node sees it.
func (h *OperatorHandlers) RaftPeers(context.Context, *pb.RaftPeersRequest) (*pb.RaftPeersResponse, error) {
	peers, err := h.node.Peers()
	if err != nil {
		return nil, h.MapError(err)
	}
	leader, _ := h.node.Leader()
	return &pb.RaftPeersResponse{Peers: peers, LeaderId: leader}, nil
}

// RaftJoin adds a voter, on the leader or forwarded to it.
func (h *OperatorHandlers) RaftJoin(ctx context.Context, req *pb.RaftJoinRequest) (*pb.RaftJoinResponse, error) {
	if req.GetId() == "" || req.GetRaftAddress() == "" {
		return nil, status.Error(codes.InvalidArgument, "id and raft_address are required")
	}
	idx, err := h.node.AddVoter(req.GetId(), req.GetRaftAddress(), req.GetGrpcAddress())
	if err == nil {
		return &pb.RaftJoinResponse{Index: idx}, nil
	}
	if !errors.Is(err, ErrNotLeader) || forwarded(ctx) {
		return nil, h.MapError(err)
	}
	var resp *pb.RaftJoinResponse
	err = h.forward(ctx, func(ctx context.Context, c pb.OperatorServiceClient) (err error) {
		resp, err = c.RaftJoin(ctx, req)
		return err
	})
	return resp, err
}

// RaftRemove removes a server, on the leader or forwarded to it.
func (h *OperatorHandlers) RaftRemove(ctx context.Context, req *pb.RaftRemoveRequest) (*pb.RaftRemoveResponse, error) {
	if req.GetId() == "" {
		return nil, status.Error(codes.InvalidArgument, "id is required")
	}
	idx, err := h.node.RemoveServer(req.GetId())
	if err == nil {
		return &pb.RaftRemoveResponse{Index: idx}, nil
	}
	if !errors.Is(err, ErrNotLeader) || forwarded(ctx) {
		return nil, h.MapError(err)
	}
	var resp *pb.RaftRemoveResponse
	err = h.forward(ctx, func(ctx context.Context, c pb.OperatorServiceClient) (err error) {
		resp, err = c.RaftRemove(ctx, req)
		return err
	})
	return resp, err
}

// Snapshot takes a snapshot on this node.
func (h *OperatorHandlers) Snapshot(context.Context, *pb.SnapshotRequest) (*pb.SnapshotResponse, error) {
	id, index, err := h.node.Snapshot()
	if err != nil {
		return nil, h.MapError(err)
	}
	return &pb.SnapshotResponse{Id: id, Index: index}, nil
}

// forward runs call against the leader, marking the call as forwarded.
func (h *OperatorHandlers) forward(ctx context.Context, call func(context.Context, pb.OperatorServiceClient) error) error {
	conn, leader, err := h.node.LeaderConn(ctx)
	if err != nil {
		return h.MapError(err)
	}
	if leader == h.node.ID() {
		// Leadership moved here while waiting; the caller retries.
		return h.MapError(fmt.Errorf("%w: leadership is moving to this node", ErrNotLeader))
	}
	ctx = metadata.AppendToOutgoingContext(ctx, forwardedKey, h.node.ID())
	return call(ctx, pb.NewOperatorServiceClient(conn))
}

func forwarded(ctx context.Context) bool {
	md, ok := metadata.FromIncomingContext(ctx)
	return ok && len(md.Get(forwardedKey)) > 0
}

// DefaultStatus maps this package's errors to gRPC status errors: leadership and shutdown
// errors are UNAVAILABLE (retry elsewhere or later), context errors keep their code, status
// errors pass through, anything else is INTERNAL.
func DefaultStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, ErrNotLeader), errors.Is(err, ErrNoLeader), errors.Is(err, ErrShutdown),
		errors.Is(err, ErrNotEstablished), errors.Is(err, ErrLeadershipLost):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return status.FromContextError(err).Err()
	}
	return status.Error(codes.Internal, err.Error())
}
