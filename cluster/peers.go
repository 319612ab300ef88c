package cluster

import (
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// Peers returns the Raft configuration, with the leader flagged and gRPC addresses where
// known.
func (n *Node) Peers() ([]*pb.RaftPeer, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("cluster: configuration: %w", mapRaftErr(err))
	}
	leader, _ := n.Leader()
	servers := f.Configuration().Servers
	out := make([]*pb.RaftPeer, 0, len(servers))
	for _, s := range servers {
		suffrage := "voter"
		if s.Suffrage != raft.Voter {
			suffrage = "nonvoter"
		}
		out = append(out, &pb.RaftPeer{
			Id:          string(s.ID),
			Address:     string(s.Address),
			Suffrage:    suffrage,
			Leader:      string(s.ID) == leader,
			GrpcAddress: n.grpcAddrFor(string(s.ID)),
		})
	}
	return out, nil
}

// AddVoter adds (or updates) a voter on the leader and returns the configuration index. It is
// idempotent: a server already a voter at that address is left alone (the index returned is
// then the last log index, at which the membership holds). A different server
// registered at the same Raft address is removed first. Followers get ErrNotLeader.
func (n *Node) AddVoter(id, raftAddr, grpcAddr string) (uint64, error) {
	if id == "" || raftAddr == "" {
		return 0, fmt.Errorf("cluster: add voter: id and raft address are required")
	}
	if err := n.checkLeader(); err != nil {
		return 0, err
	}
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return 0, fmt.Errorf("cluster: configuration: %w", mapRaftErr(err))
	}
	n.learnGRPCAddr(id, grpcAddr)
	for _, s := range f.Configuration().Servers {
		switch {
		case string(s.ID) == id && string(s.Address) == raftAddr && s.Suffrage == raft.Voter:
			return n.raft.LastIndex(), nil
		case string(s.ID) != id && string(s.Address) == raftAddr:
			n.logger.Warn("removing server registered at the joining address", "old_id", s.ID, "addr", raftAddr)
			if err := n.raft.RemoveServer(s.ID, 0, n.cfg.ApplyTimeout).Error(); err != nil {
				return 0, fmt.Errorf("cluster: remove %s: %w", s.ID, mapRaftErr(err))
			}
		}
	}
	af := n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, n.cfg.ApplyTimeout)
	if err := af.Error(); err != nil {
		return 0, fmt.Errorf("cluster: add voter %s: %w", id, mapRaftErr(err))
	}
	n.logger.Info("voter added", "id", id, "raft_addr", raftAddr, "grpc_addr", grpcAddr, "index", af.Index())
	return af.Index(), nil
}

// RemoveServer removes a server on the leader and returns the configuration index; removing a
// server that is not a member succeeds (returning the last log index). Followers get ErrNotLeader.
func (n *Node) RemoveServer(id string) (uint64, error) {
	if err := n.checkLeader(); err != nil {
		return 0, err
	}
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return 0, fmt.Errorf("cluster: configuration: %w", mapRaftErr(err))
	}
	member := false
	for _, s := range f.Configuration().Servers {
		member = member || string(s.ID) == id
	}
	if !member {
		return n.raft.LastIndex(), nil
	}
	rf := n.raft.RemoveServer(raft.ServerID(id), 0, n.cfg.ApplyTimeout)
	if err := rf.Error(); err != nil {
		return 0, fmt.Errorf("cluster: remove server %s: %w", id, mapRaftErr(err))
	}
	n.logger.Info("server removed", "id", id, "index", rf.Index())
	return rf.Index(), nil
}

// TransferLeadership hands leadership to the voter to (any up-to-date voter when to is empty)
// with hashicorp/raft's leadership transfer: the leader stops taking entries, brings the
// target's log up to date and tells it to start an election at once (TimeoutNow), so the
// cluster does not wait an election timeout. It returns when the transfer is done or failed
// (within raft's transfer timeout), with the new leader's id as this node sees it.
func (n *Node) TransferLeadership(to string) (string, error) {
	if err := n.checkLeader(); err != nil {
		return "", err
	}
	if to == n.cfg.ID {
		return "", fmt.Errorf("%w: %s already leads (name another voter, or none)", ErrNoTransferTarget, to)
	}
	var fut raft.Future
	if to == "" {
		if !n.otherVoters() {
			return "", fmt.Errorf("%w: this leader is the only voter", ErrNoTransferTarget)
		}
		fut = n.raft.LeadershipTransfer()
	} else {
		f := n.raft.GetConfiguration()
		if err := f.Error(); err != nil {
			return "", fmt.Errorf("cluster: configuration: %w", mapRaftErr(err))
		}
		var target *raft.Server
		for _, s := range f.Configuration().Servers {
			if string(s.ID) == to {
				target = &s
			}
		}
		switch {
		case target == nil:
			return "", fmt.Errorf("%w: %q", ErrUnknownServer, to)
		case target.Suffrage != raft.Voter:
			return "", fmt.Errorf("%w: %s is a %s, and only a voter can lead", ErrNoTransferTarget, to, target.Suffrage)
		}
		fut = n.raft.LeadershipTransferToServer(target.ID, target.Address)
	}
	if err := fut.Error(); err != nil {
		return "", fmt.Errorf("cluster: leadership transfer: %w", mapRaftErr(err))
	}
	// The new leader's first heartbeat names it here; wait for it a little, for the answer.
	deadline := time.Now().Add(2 * n.cfg.HeartbeatTimeout)
	_, id := n.raft.LeaderWithID()
	for (id == "" || string(id) == n.cfg.ID) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		_, id = n.raft.LeaderWithID()
	}
	n.logger.Info("leadership transferred", "to", string(id))
	return string(id), nil
}

// otherVoters reports whether the configuration has a voter besides this node.
func (n *Node) otherVoters() bool {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter && string(s.ID) != n.cfg.ID {
			return true
		}
	}
	return false
}
