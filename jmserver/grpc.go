package jmserver

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/jmcluster/jmcluster/membership"
	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// DefaultMaxMessageSize bounds every gRPC message a JM receives or sends (4 MiB); it is
// transport.DefaultMaxMessageSize, the one source of the limit.
const DefaultMaxMessageSize = transport.DefaultMaxMessageSize

// NewGRPCServer builds a JM's gRPC server: ClientService, OperatorService, JobMasterService,
// ArtifactService, GossipService, health and reflection, behind the edge (transport.NewServer): every call passes the policy
// interceptor with this replica's guard, and every message it receives or sends is bounded by
// maxMsg (0: the default), a message over it refused with a status naming the limit and
// --max-message-size. It panics when a registered method has no policy row. The health server
// is returned so the caller can flip serving states.
func NewGRPCServer(d Deps, maxMsg int) (*grpc.Server, *health.Server) {
	var observe []transport.CallObserver
	if d.Metrics != nil {
		observe = append(observe, d.Metrics.ServedRPC)
	}
	s, reg := transport.NewServer(maxMsg, "JobMaster", newGuard(d), transport.Auth{TLS: d.TLS, Tokens: d.Tokens}, observe...)
	pb.RegisterClientServiceServer(reg, NewClientService(d))
	pb.RegisterOperatorServiceServer(reg, NewOperatorService(d))
	pb.RegisterJobMasterServiceServer(reg, NewJobMasterService(d.JM))
	pb.RegisterArtifactServiceServer(reg, NewArtifactService(d))
	pb.RegisterGossipServiceServer(reg, NewGossipService(func() *membership.Membership { return d.Gossip }, d.audit))
	hs := health.NewServer()
	healthpb.RegisterHealthServer(reg, hs)
	reflection.Register(s)
	transport.MustCover(s, true)
	return s, hs
}
