package server

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/jmcluster/jmcluster/jobmaster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// DefaultMaxMessageSize bounds every gRPC message a JM receives (4 MiB).
const DefaultMaxMessageSize = 4 << 20

// NewGRPCServer builds a JM's gRPC server: ClientService, OperatorService, JobMasterService,
// health and reflection. The health server is returned so the caller can flip serving states.
func NewGRPCServer(d Deps, maxMsg int) (*grpc.Server, *health.Server) {
	if maxMsg <= 0 {
		maxMsg = DefaultMaxMessageSize
	}
	s := grpc.NewServer(grpc.MaxRecvMsgSize(maxMsg))
	pb.RegisterClientServiceServer(s, NewClientService(d))
	pb.RegisterOperatorServiceServer(s, NewOperatorService(d))
	pb.RegisterJobMasterServiceServer(s, jobmaster.NewService(d.JM))
	hs := health.NewServer()
	healthpb.RegisterHealthServer(s, hs)
	reflection.Register(s)
	return s, hs
}
