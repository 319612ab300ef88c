package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/transport/pb"
)

const waitTimeout = 10 * time.Second

// testWriter routes log lines to t.Log until the test's cleanup has finished.
type testWriter struct {
	t    testing.TB
	done atomic.Bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	if !w.done.Load() {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func testLogger(t testing.TB) hclog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(func() { w.done.Store(true) }) // registered first, so it runs last
	return hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: hclog.Info, Output: w})
}

// waitFor polls cond until it holds or the deadline passes; on failure it reports what cond
// last saw.
func waitFor(t testing.TB, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last string
	for {
		ok, seen := cond()
		if ok {
			return
		}
		last = seen
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; last seen: %s", what, last)
		}
		<-tick.C
	}
}

// recHooks records the leader hooks a node receives; fail, when set, decides the hook's error.
type recHooks struct {
	mu          sync.Mutex
	established []uint64
	revoked     int
	fail        func(epoch uint64) error
	ctx         context.Context // of the last EstablishLeadership: the leader's work
}

func (h *recHooks) EstablishLeadership(ctx context.Context, epoch uint64) error {
	h.mu.Lock()
	h.established = append(h.established, epoch)
	h.ctx = ctx
	fail := h.fail
	h.mu.Unlock()
	if fail != nil {
		return fail(epoch)
	}
	return nil
}

func (h *recHooks) RevokeLeadership() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.revoked++
}

func (h *recHooks) leaderCtx() context.Context {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ctx
}

func (h *recHooks) snapshot() ([]uint64, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]uint64(nil), h.established...), h.revoked
}

// testNode is a Node with its FSM, hooks and a gRPC server carrying opService.
type testNode struct {
	*Node
	cfg   Config
	fsm   *testFSM
	hooks *recHooks
	srv   *grpc.Server
}

// newTestNode listens for gRPC on grpcAddr ("127.0.0.1:0" for a fresh port) and builds the node
// with cfg (ID and DataDir must be set; GRPCAddr is filled in). The node is not started.
func newTestNode(t *testing.T, cfg Config, grpcLis net.Listener) *testNode {
	t.Helper()
	cfg.GRPCAddr = grpcLis.Addr().String()
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	tn := &testNode{cfg: cfg, fsm: newTestFSM(), hooks: &recHooks{}}
	n, err := NewNode(cfg, tn.fsm, tn.hooks)
	if err != nil {
		_ = grpcLis.Close()
		t.Fatalf("NewNode %s: %v", cfg.ID, err)
	}
	tn.Node = n
	tn.srv = grpc.NewServer()
	pb.RegisterOperatorServiceServer(tn.srv, &opService{n: n})
	go func() { _ = tn.srv.Serve(grpcLis) }()
	t.Cleanup(tn.stop)
	return tn
}

// stop shuts the node down and stops its gRPC server; safe to call twice.
func (tn *testNode) stop() {
	tn.srv.Stop()
	_ = tn.Kill()
}

func listen(t *testing.T, addr string) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	return lis
}

func nodeConfig(t *testing.T, id string) Config {
	cfg := TestConfig()
	cfg.ID = id
	cfg.DataDir = t.TempDir()
	return cfg
}

// setPeers installs an explicit peer list before Start (the ports are only known after the
// transports are bound).
func (tn *testNode) setPeers(peers []Peer) {
	tn.cfg.Peers = peers
	tn.Node.cfg.Peers = peers
	for _, p := range peers {
		tn.learnGRPCAddr(p.ID, p.GRPCAddr)
	}
}

// startStatic builds n nodes with an explicit peer list and starts them.
func startStatic(t *testing.T, n int, hooks func(i int) *recHooks) []*testNode {
	t.Helper()
	return startStaticWith(t, n, hooks, nil)
}

// startStaticWith is startStatic with each node's configuration edited first (edit may be nil).
func startStaticWith(t *testing.T, n int, hooks func(i int) *recHooks, edit func(*Config)) []*testNode {
	t.Helper()
	nodes := make([]*testNode, n)
	peers := make([]Peer, n)
	for i := range nodes {
		cfg := nodeConfig(t, fmt.Sprintf("jm%d", i+1))
		if edit != nil {
			edit(&cfg)
		}
		nodes[i] = newTestNode(t, cfg, listen(t, "127.0.0.1:0"))
		if hooks != nil {
			nodes[i].hooks = hooks(i)
			nodes[i].Node.hooks = nodes[i].hooks
		}
		peers[i] = Peer{ID: nodes[i].ID(), RaftAddr: nodes[i].RaftAddr(), GRPCAddr: nodes[i].GRPCAddr()}
	}
	for _, tn := range nodes {
		tn.setPeers(peers)
		if err := tn.Start(context.Background()); err != nil {
			t.Fatalf("start %s: %v", tn.ID(), err)
		}
	}
	return nodes
}

// establishedLeader waits until exactly one running node is the established leader with an
// epoch of at least minEpoch, and returns it.
func establishedLeader(t *testing.T, nodes []*testNode, minEpoch uint64) *testNode {
	t.Helper()
	var leader *testNode
	waitFor(t, fmt.Sprintf("an established leader with epoch >= %d", minEpoch), func() (bool, string) {
		leader = nil
		var seen []string
		count := 0
		for _, tn := range nodes {
			if tn.closed.Load() {
				continue
			}
			seen = append(seen, fmt.Sprintf("%s:%s/est=%v/epoch=%d", tn.ID(), tn.State(), tn.Established(), tn.Epoch()))
			if tn.Established() && tn.Epoch() >= minEpoch {
				leader = tn
				count++
			}
		}
		return count == 1, strings.Join(seen, " ")
	})
	return leader
}

func followers(nodes []*testNode, leader *testNode) []*testNode {
	var out []*testNode
	for _, tn := range nodes {
		if tn != leader && !tn.closed.Load() {
			out = append(out, tn)
		}
	}
	return out
}

// applyValue commits a CancelJob command carrying v through n.
func applyValue(ctx context.Context, n *Node, v string) (*fsm.Result, error) {
	cmd, err := fsm.Encode(pb.CommandType_COMMAND_TYPE_CANCEL_JOB, &pb.CancelJobCommand{JobId: v})
	if err != nil {
		return nil, err
	}
	return n.Apply(ctx, cmd)
}

func mustApply(t *testing.T, n *Node, v string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := applyValue(ctx, n, v)
	if err == nil && res.Err != nil {
		err = res.Err
	}
	if err != nil {
		t.Fatalf("apply %q on %s: %v", v, n.ID(), err)
	}
}

// waitValues waits until every given node's FSM holds exactly want.
func waitValues(t *testing.T, nodes []*testNode, want []string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("values %v on every node", want), func() (bool, string) {
		var seen []string
		ok := true
		for _, tn := range nodes {
			got := tn.fsm.Values()
			seen = append(seen, fmt.Sprintf("%s=%v", tn.ID(), got))
			ok = ok && strings.Join(got, ",") == strings.Join(want, ",")
		}
		return ok, strings.Join(seen, " ")
	})
}

func isErr(err, target error) bool { return errors.Is(err, target) }

// opService serves the Raft part of OperatorService that discovery and these tests call, on
// the node's own methods. The JobMaster's OperatorService lives in jmserver (above
// this package), where its edge also forwards RaftJoin and RaftRemove to the leader; here a
// follower answers them with ErrNotLeader, and discovery asks the next node.
type opService struct {
	pb.UnimplementedOperatorServiceServer
	n *Node
}

func (s *opService) NodeInfo(context.Context, *pb.NodeInfoRequest) (*pb.NodeInfoResponse, error) {
	return s.n.Info(), nil
}

func (s *opService) RaftPeers(context.Context, *pb.RaftPeersRequest) (*pb.RaftPeersResponse, error) {
	peers, err := s.n.Peers()
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	leader, _ := s.n.Leader()
	return &pb.RaftPeersResponse{Peers: peers, LeaderId: leader}, nil
}

func (s *opService) RaftJoin(_ context.Context, req *pb.RaftJoinRequest) (*pb.RaftJoinResponse, error) {
	idx, err := s.n.AddVoter(req.GetId(), req.GetRaftAddress(), req.GetGrpcAddress())
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return &pb.RaftJoinResponse{Index: idx}, nil
}

func (s *opService) RaftRemove(_ context.Context, req *pb.RaftRemoveRequest) (*pb.RaftRemoveResponse, error) {
	idx, err := s.n.RemoveServer(req.GetId())
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return &pb.RaftRemoveResponse{Index: idx}, nil
}
