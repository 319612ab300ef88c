// Package dataplane moves records between tasks: the result partitions a TaskManager's
// producer tasks write, the DataService that serves them to consumer TaskManagers (the
// Exchange stream, and ReadPartition for tools and older builds), the client side of those
// streams, and the channel sets a consumer task reads its inputs with. It knows nothing of
// slots, leaders or fencing: its owner (the TaskManager) hands it a Config and calls it.
package dataplane

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"github.com/jmcluster/jmcluster/transport/pb"
)

var (
	// ErrPartitionReleased: a result partition was released (producer failed, cancelled or
	// the TM stopped) while it was being written or read.
	ErrPartitionReleased = errors.New("result partition released")
	// ErrStopped: the data plane is stopping (its owner's context ended).
	ErrStopped = errors.New("data plane stopped")
)

// Config is what the data plane needs of its owner.
type Config struct {
	// ID names the TaskManager in refusals ("not found on tm1").
	ID string
	// DataAddr is the advertised address of this TaskManager's DataService: a channel whose
	// producer is there is read in memory.
	DataAddr string
	// MaxMessageSize bounds the gRPC messages; an Exchange message's batches take at most half.
	MaxMessageSize int
	// InputConnectTimeout bounds how long a task's channel retries its producer.
	InputConnectTimeout time.Duration
	// ExchangeWithoutGroups serves Exchange as a build before channel groups did (tests).
	ExchangeWithoutGroups bool
	// Int64Records consumes as a build before bytes records did (tests): its requests carry
	// no record format, so its producers send it numeric records or refuse the channel.
	Int64Records bool
	// Logger is the owner's logger.
	Logger hclog.Logger
	// Dial is the shared client connection to the DataService of the TaskManager at addr.
	Dial func(addr string) (*grpc.ClientConn, error)
}

// Plane is one TaskManager's data plane: its partitions, the Exchange streams it serves and
// reads, and the channel sets of its tasks.
type Plane struct {
	cfg   Config
	log   hclog.Logger
	ctx   context.Context // the owner's: its end stops every stream
	wg    sync.WaitGroup  // the streams' goroutines
	parts *registry

	exMu      sync.Mutex
	exchanges map[string]*exchangeClient // the Exchange streams to producer TMs, by data address
	legacy    map[string]time.Time       // producers without Exchange (an older build), by data address: when found
	// openers bounds the tasks opening their input channels at once (AddGates): a token each.
	openers chan struct{}
	// opensServed counts the channel opens served on Exchange streams: one control each
	// (single) and the channel groups (group, with groupChannels channels in all).
	opensServed struct{ single, group, groupChannels atomic.Int64 }
}

// New makes the data plane; ctx is its owner's life (its end ends every stream).
func New(ctx context.Context, cfg Config) *Plane {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	return &Plane{
		cfg:       cfg,
		log:       cfg.Logger,
		ctx:       ctx,
		parts:     newRegistry(),
		exchanges: map[string]*exchangeClient{},
		legacy:    map[string]time.Time{},
		openers:   make(chan struct{}, max(1, runtime.GOMAXPROCS(0))),
	}
}

// Register adds the DataService (Exchange, ReadPartition) to a server.
func (dp *Plane) Register(reg grpc.ServiceRegistrar) {
	pb.RegisterDataServiceServer(reg, &dataService{dp: dp})
}

// Wait waits for the streams' goroutines, once the owner's context ended.
func (dp *Plane) Wait() { dp.wg.Wait() }

// Produce creates and registers the result partitions of a producer attempt; bytesOut counts
// what they send over Exchange streams. answer (idempotent) answers the consumers that were
// already waiting for them: a producer reports RUNNING first, then answers.
func (dp *Plane) Produce(job, attempt string, produced []*pb.ResultPartitionDeploymentDescriptor, bytesOut *atomic.Int64) (_ []*Partition, _ []PartitionKey, answer func()) {
	parts := make([]*Partition, 0, len(produced))
	keys := make([]PartitionKey, 0, len(produced))
	answers := make([]func(), 0, len(produced))
	for _, pd := range produced {
		k := PartitionKey{job: job, result: pd.GetResultId(), index: pd.GetPartitionIndex(), attempt: attempt}
		p := newPartition(k, pd)
		p.bytesOut = bytesOut
		answers = append(answers, dp.parts.addLater(p))
		parts = append(parts, p)
		keys = append(keys, k)
	}
	var once sync.Once
	return parts, keys, func() {
		once.Do(func() {
			for _, a := range answers {
				a()
			}
		})
	}
}

// Holds reports whether the partition is still held.
func (dp *Plane) Holds(k PartitionKey) bool { return dp.parts.has(k) }

// Release drops a partition and releases it (its writer and readers abort).
func (dp *Plane) Release(k PartitionKey) { dp.parts.remove(k) }

// ReleaseAttempt releases every partition of a producer attempt.
func (dp *Plane) ReleaseAttempt(attempt string) { dp.parts.removeAttempt(attempt, "") }

// ReleaseFailedAttempt releases every partition of a producer attempt that failed: a consumer
// reading one fails naming the producer's failure, so whichever failure the JobMaster sees
// first names the root cause.
func (dp *Plane) ReleaseFailedAttempt(attempt, failure string) {
	dp.parts.removeAttempt(attempt, failure)
}

// ReleaseAll releases every partition (the TaskManager stops).
func (dp *Plane) ReleaseAll() { dp.parts.removeAll() }
