package taskmanager

import (
	gproto "google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/transport/pb"
)

func cloneTDD(d *pb.TaskDeploymentDescriptor) *pb.TaskDeploymentDescriptor {
	return gproto.Clone(d).(*pb.TaskDeploymentDescriptor)
}
