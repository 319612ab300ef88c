package dataplane

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// node is a data plane served as a TaskManager serves it: its DataService on a loopback
// listener behind the transport edge, its peer connections shared per address.
type node struct {
	*Plane
	srv    *grpc.Server
	lis    net.Listener
	cancel context.CancelFunc
	once   sync.Once

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

// newNode starts a node named id; adjust (nil: none) changes its Config first.
func newNode(t testing.TB, id string, adjust func(*Config)) *node {
	return startNode(t, id, testLogger(t), adjust)
}

// quietNode is newNode without logs, for measurements.
func quietNode(tb testing.TB, id string) *node {
	return startNode(tb, id, hclog.NewNullLogger(), nil)
}

func startNode(tb testing.TB, id string, log hclog.Logger, adjust func(*Config)) *node {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &node{lis: lis, cancel: cancel, conns: map[string]*grpc.ClientConn{}}
	cfg := Config{ID: id, DataAddr: lis.Addr().String(), MaxMessageSize: transport.DefaultMaxMessageSize,
		InputConnectTimeout: 2 * time.Minute, Logger: log, Dial: n.dial}
	if adjust != nil {
		adjust(&cfg)
	}
	n.Plane = New(ctx, cfg)
	var reg grpc.ServiceRegistrar
	n.srv, reg = transport.NewServer(cfg.MaxMessageSize, "TaskManager", nil, transport.Auth{})
	n.Register(reg)
	go func() { _ = n.srv.Serve(lis) }()
	tb.Cleanup(n.Kill)
	return n
}

// DataAddr is the node's DataService address.
func (n *node) DataAddr() string { return n.cfg.DataAddr }

func (n *node) dial(addr string) (*grpc.ClientConn, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.conns == nil {
		return nil, ErrStopped
	}
	if c := n.conns[addr]; c != nil {
		return c, nil
	}
	c, err := grpc.NewClient(addr, append([]grpc.DialOption{transport.DialCredentials(nil)},
		transport.DialOptions(n.cfg.MaxMessageSize, "TaskManager")...)...)
	if err != nil {
		return nil, err
	}
	n.conns[addr] = c
	return c, nil
}

// Kill ends the node as a crash would: its server, its connections and every stream at once.
func (n *node) Kill() {
	n.once.Do(func() {
		n.srv.Stop()
		_ = n.lis.Close()
		n.mu.Lock()
		cs := n.conns
		n.conns = nil
		n.mu.Unlock()
		for _, c := range cs {
			_ = c.Close()
		}
		n.cancel()
		n.ReleaseAll()
		n.Wait()
	})
}

// testLogger routes logs through t.Log.
func testLogger(t testing.TB) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: tWriter{t}})
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// waitFor polls cond until it holds or the deadline passes; it fails with what was last seen.
func waitFor(t testing.TB, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, seen := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s; last seen: %s", d, what, seen)
		}
		<-tick.C
	}
}

func produces(result string, index, subs int32, dist pb.Distribution, typ pb.ResultType) *pb.ResultPartitionDeploymentDescriptor {
	return &pb.ResultPartitionDeploymentDescriptor{ResultId: result, PartitionIndex: index, NumSubpartitions: subs, Distribution: dist, ResultType: typ}
}

func channel(result string, partition, sub int32, producer, addr string) *pb.InputChannelDescriptor {
	return &pb.InputChannelDescriptor{ResultId: result, PartitionIndex: partition, SubpartitionIndex: sub, ProducerAttemptId: producer, ProducerDataAddress: addr}
}

const (
	pipelined = pb.ResultType_RESULT_TYPE_PIPELINED
	forward   = pb.Distribution_DISTRIBUTION_FORWARD
	allToAll  = pb.Distribution_DISTRIBUTION_ALL_TO_ALL
)
