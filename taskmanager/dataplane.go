package taskmanager

import (
	"context"
	"sync/atomic"

	"google.golang.org/grpc"

	"github.com/jmcluster/jmcluster/dataplane"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// dataPlane is all the TaskManager asks of its data plane (*dataplane.Plane): serve the
// DataService, register a producer's partitions, release them, and give a consumer task its
// channel set. The data plane knows nothing of slots, leaders or fencing.
type dataPlane interface {
	// Register adds the DataService to the data server.
	Register(reg grpc.ServiceRegistrar)
	// Produce registers a producer attempt's partitions; answer tells the consumers waiting.
	Produce(job, attempt string, produced []*pb.ResultPartitionDeploymentDescriptor, bytesOut *atomic.Int64) (parts []*dataplane.Partition, keys []dataplane.PartitionKey, answer func())
	// NewChannelSet is a consumer attempt's set of input channels.
	NewChannelSet(ctx context.Context, job, consumer string, retry bool) *dataplane.ChannelSet
	Holds(k dataplane.PartitionKey) bool
	Release(k dataplane.PartitionKey)
	ReleaseAttempt(attempt string)
	ReleaseFailedAttempt(attempt, failure string)
	ReleaseAll()
	// Wait waits for the streams' goroutines once the TaskManager's context ended.
	Wait()
}

var _ dataPlane = (*dataplane.Plane)(nil)
