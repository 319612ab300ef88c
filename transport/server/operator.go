package server

import (
	"context"

	"github.com/jmcluster/jmcluster/cluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// OperatorService adds the gossip pool and the state hash to the cluster's Raft operator
// handlers.
type OperatorService struct {
	*cluster.OperatorHandlers
	d Deps
}

// NewOperatorService returns the operator service.
func NewOperatorService(d Deps) *OperatorService {
	h := cluster.NewOperatorHandlers(d.Node)
	h.MapError = Status
	return &OperatorService{OperatorHandlers: h, d: d}
}

func (s *OperatorService) Members(context.Context, *pb.MembersRequest) (*pb.MembersResponse, error) {
	out := &pb.MembersResponse{}
	if s.d.Members != nil {
		out.Members = s.d.Members()
	}
	return out, nil
}

func (s *OperatorService) StateHash(context.Context, *pb.StateHashRequest) (*pb.StateHashResponse, error) {
	hash, index := s.d.State.HashAt()
	return &pb.StateHashResponse{Hash: hash, AppliedIndex: index, NodeId: s.d.Node.ID()}, nil
}
