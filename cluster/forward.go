package cluster

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
)

// forwarder caches one gRPC connection to the current leader.
type forwarder struct {
	mu   sync.Mutex
	addr string
	conn *grpc.ClientConn
}

// LeaderGRPCAddr returns the current leader's id and gRPC address, waiting up to
// ForwardHoldTime (or ctx) for a leader whose address is known. The address comes from the
// committed epoch record when it names raft's current leader (a new leader commits its
// address in EstablishLeadership), else from the Peers config or bootstrap discovery.
// It returns an error wrapping ErrNoLeader when the hold time passes.
func (n *Node) LeaderGRPCAddr(ctx context.Context) (id, addr string, err error) {
	hold := time.NewTimer(n.cfg.ForwardHoldTime)
	defer hold.Stop()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		if n.closed.Load() {
			return "", "", ErrShutdown
		}
		if id, _ = n.Leader(); id != "" {
			if addr = n.grpcAddrFor(id); addr != "" {
				return id, addr, nil
			}
		}
		select {
		case <-ctx.Done():
			return "", "", fmt.Errorf("%w: %w", ErrNoLeader, ctx.Err())
		case <-hold.C:
			if id != "" {
				return "", "", fmt.Errorf("%w: gRPC address of leader %s unknown after %s", ErrNoLeader, id, n.cfg.ForwardHoldTime)
			}
			return "", "", fmt.Errorf("%w after %s", ErrNoLeader, n.cfg.ForwardHoldTime)
		case <-tick.C:
		}
	}
}

// LeaderConn returns a cached gRPC connection to the current leader and the leader's id, so a
// server can forward a client RPC. The connection is re-dialled when the leader changes; the
// caller must not close it. Only the absence of a leader is waited for (bounded by
// ForwardHoldTime); every other failure is returned at once. When this node is the leader the
// connection points to itself: callers normally serve locally when IsLeader.
func (n *Node) LeaderConn(ctx context.Context) (*grpc.ClientConn, string, error) {
	id, addr, err := n.LeaderGRPCAddr(ctx)
	if err != nil {
		return nil, "", err
	}
	n.fwd.mu.Lock()
	defer n.fwd.mu.Unlock()
	if n.closed.Load() {
		return nil, "", ErrShutdown
	}
	if n.fwd.conn != nil && n.fwd.addr == addr {
		return n.fwd.conn, id, nil
	}
	conn, err := grpc.NewClient(addr, n.dialOptions()...)
	if err != nil {
		return nil, "", fmt.Errorf("cluster: dial leader %s at %s: %w", id, addr, err)
	}
	if n.fwd.conn != nil {
		_ = n.fwd.conn.Close()
	}
	n.fwd.conn, n.fwd.addr = conn, addr
	n.logger.Debug("leader connection", "leader", id, "addr", addr)
	return conn, id, nil
}

func (n *Node) closeLeaderConn() {
	n.fwd.mu.Lock()
	defer n.fwd.mu.Unlock()
	if n.fwd.conn != nil {
		_ = n.fwd.conn.Close()
		n.fwd.conn, n.fwd.addr = nil, ""
	}
}
