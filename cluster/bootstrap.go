package cluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"

	"github.com/jmcluster/jmcluster/internal/failpoint"
	"github.com/jmcluster/jmcluster/internal/logsum"
	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

const (
	discoveryCallTimeout = time.Second
	discoveryRetryMin    = 100 * time.Millisecond
	discoveryRetryMax    = 400 * time.Millisecond
)

// Start starts the leadership monitor and, when this node has no Raft state yet, the
// configured bootstrap: explicit Peers bootstrap at once; BootstrapExpect and Join run
// discovery in the background until the node is part of a cluster, ctx ends or the node
// shuts down. A node restarting from its data dir skips bootstrap.
func (n *Node) Start(ctx context.Context) error {
	if n.closed.Load() {
		return ErrShutdown
	}
	if !n.started.CompareAndSwap(false, true) {
		return errors.New("cluster: node already started")
	}
	n.wg.Add(1)
	go n.monitorLeadership()
	if failpoint.Enabled(failpoint.RemovedRejoins) && len(n.cfg.Join) > 0 {
		n.wg.Add(1)
		go n.plantedRejoin()
	}

	switch {
	case n.hasState():
		n.logger.Info("existing raft state found; skipping bootstrap")
	case len(n.cfg.Peers) > 0:
		return n.bootstrapPeers()
	case n.cfg.BootstrapExpect > 0 || len(n.cfg.Join) > 0:
		bctx, cancel := context.WithCancel(n.ctx)
		stopAfter := context.AfterFunc(ctx, cancel)
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			defer stopAfter()
			defer cancel()
			n.discover(bctx)
		}()
	default:
		n.logger.Info("no bootstrap configured; waiting to be added to a cluster")
	}
	return nil
}

// bootstrapPeers bootstraps the explicit static configuration. Every node does the same with
// the same servers, which Raft allows: the configurations are identical.
func (n *Node) bootstrapPeers() error {
	servers := make([]raft.Server, 0, len(n.cfg.Peers))
	for _, p := range n.cfg.Peers {
		servers = append(servers, raft.Server{ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddr), Suffrage: raft.Voter})
	}
	return n.bootstrap(servers)
}

func (n *Node) bootstrap(servers []raft.Server) error {
	sort.Slice(servers, func(i, j int) bool { return servers[i].ID < servers[j].ID })
	err := n.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error()
	if errors.Is(err, raft.ErrCantBootstrap) {
		n.logger.Info("raft state already exists; bootstrap skipped")
		return nil
	}
	if err != nil {
		return fmt.Errorf("cluster: bootstrap: %w", err)
	}
	n.logger.Info("cluster bootstrapped", "servers", len(servers), "first", logsum.List(servers))
	return nil
}

// discover polls the Join addresses until this node is part of a cluster. When a peer has
// Raft state or knows a leader, it asks to be added as a voter (RaftJoin, forwarded to the
// leader by whichever JobMaster receives it). Otherwise, with BootstrapExpect N, once exactly
// N distinct nodes (this one included) are seen, none with state, it bootstraps the sorted set
// of all N; every node computes the same set.
func (n *Node) discover(ctx context.Context) {
	for {
		if n.hasState() {
			n.logger.Info("raft state present; discovery done")
			return
		}
		if n.discoverOnce(ctx) {
			return
		}
		wait := discoveryRetryMin + rand.N(discoveryRetryMax-discoveryRetryMin)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// discoverOnce runs one round of discovery and reports whether this node is now a member.
func (n *Node) discoverOnce(ctx context.Context) bool {
	infos := n.pollJoin(ctx)
	var existing []*pb.NodeInfoResponse
	for _, info := range infos {
		n.learnGRPCAddr(info.GetId(), info.GetGrpcAddress())
		if info.GetHasState() || info.GetLeaderId() != "" {
			existing = append(existing, info)
		}
	}
	if len(existing) > 0 {
		// Ask a node that knows a leader first.
		sort.SliceStable(existing, func(i, j int) bool {
			return existing[i].GetLeaderId() != "" && existing[j].GetLeaderId() == ""
		})
		for _, info := range existing {
			if err := n.requestJoin(ctx, info.GetGrpcAddress()); err != nil {
				n.logger.Debug("join request failed", "via", info.GetGrpcAddress(), "error", err)
				continue
			}
			n.logger.Info("joined cluster", "via", info.GetGrpcAddress())
			return true
		}
		return false
	}
	expect := n.cfg.BootstrapExpect
	if expect == 0 {
		return false
	}
	members := map[string]string{n.cfg.ID: n.raftAddr}
	for _, info := range infos {
		members[info.GetId()] = info.GetRaftAddress()
	}
	switch {
	case len(members) < expect:
		n.logger.Debug("waiting for peers", "seen", len(members), "expect", expect)
		return false
	case len(members) > expect:
		n.logger.Warn("more nodes than bootstrap-expect; not bootstrapping", "seen", len(members), "expect", expect)
		return false
	}
	servers := make([]raft.Server, 0, len(members))
	for id, addr := range members {
		servers = append(servers, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(addr), Suffrage: raft.Voter})
	}
	if err := n.bootstrap(servers); err != nil {
		n.logger.Warn("bootstrap failed", "error", err)
		return false
	}
	return true
}

// pollJoin asks every Join address for its NodeInfo, in parallel, and returns the answers of
// the other nodes (unreachable ones and this node are left out), keyed by node id.
func (n *Node) pollJoin(ctx context.Context) map[string]*pb.NodeInfoResponse {
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		out = make(map[string]*pb.NodeInfoResponse)
	)
	for _, addr := range n.cfg.Join {
		if addr == n.cfg.GRPCAddr {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			info, err := n.nodeInfo(ctx, addr)
			if err != nil {
				n.logger.Debug("node info failed", "addr", addr, "error", err)
				return
			}
			if info.GetId() == "" || info.GetId() == n.cfg.ID || info.GetRaftAddress() == "" {
				return
			}
			mu.Lock()
			out[info.GetId()] = info
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

func (n *Node) nodeInfo(ctx context.Context, addr string) (*pb.NodeInfoResponse, error) {
	conn, err := grpc.NewClient(addr, n.dialOptions()...)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, discoveryCallTimeout)
	defer cancel()
	return pb.NewOperatorServiceClient(conn).NodeInfo(cctx, &pb.NodeInfoRequest{})
}

func (n *Node) requestJoin(ctx context.Context, addr string) error {
	conn, err := grpc.NewClient(addr, n.dialOptions()...)
	if err != nil {
		return err
	}
	defer conn.Close()
	// The receiver may wait up to its hold time for a leader before forwarding.
	cctx, cancel := context.WithTimeout(ctx, n.cfg.ForwardHoldTime+n.cfg.ApplyTimeout)
	defer cancel()
	_, err = pb.NewOperatorServiceClient(conn).RaftJoin(cctx, &pb.RaftJoinRequest{
		Id:          n.cfg.ID,
		RaftAddress: n.raftAddr,
		GrpcAddress: n.cfg.GRPCAddr,
	})
	return err
}

// dialOptions are the configured options (by default mutual TLS with cfg.TLS, else plaintext) with the message size limit.
func (n *Node) dialOptions() []grpc.DialOption {
	opts := []grpc.DialOption{transport.DialCredentials(n.cfg.TLS, transport.RoleJobMaster)}
	if len(n.cfg.DialOptions) > 0 {
		opts = append([]grpc.DialOption(nil), n.cfg.DialOptions...)
	}
	return append(opts, transport.DialOptions(n.cfg.MaxMessageSize, "JobMaster")...)
}

// plantedRejoinAfter is how long a node under the removed-rejoins failpoint waits without a
// leader before it asks to be added again.
const plantedRejoinAfter = 3 * time.Second

// plantedRejoin is the removed-rejoins planted bug: a node with Raft state that has known no
// leader for plantedRejoinAfter asks its Join addresses to add it as a voter, as a node without
// state does. A member removed while it was cut off knows no leader once the cut heals (nobody
// sends it entries), so it asks, and the leader adds it back. The correct build never asks
// once it has state: a removed member stays out until an operator adds it (DESIGN.md,
// "Removed members").
func (n *Node) plantedRejoin() {
	defer n.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var since time.Time
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		if id, _ := n.Leader(); id != "" || !n.hasState() {
			since = time.Time{}
			continue
		}
		if since.IsZero() {
			since = time.Now()
		}
		if time.Since(since) < plantedRejoinAfter {
			continue
		}
		for _, info := range n.pollJoin(n.ctx) {
			if info.GetLeaderId() == "" {
				continue
			}
			if err := n.requestJoin(n.ctx, info.GetGrpcAddress()); err == nil {
				n.logger.Warn("removed-rejoins: asked to be added as a voter again", "via", info.GetGrpcAddress())
				since = time.Time{}
				break
			}
		}
	}
}
