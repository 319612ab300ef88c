package cluster

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// peerContacts follows what this node's Raft, while it leads, learns of each voter's
// reachability: hashicorp/raft reports a failed heartbeat to a peer with the time of the last
// successful contact (raft.FailedHeartbeatObservation), and the first successful one after
// failures (raft.ResumedHeartbeatObservation). A voter whose heartbeats fail and which has not
// been heard from for two heartbeat timeouts is unreachable: a kill -9'ed JobMaster is shown so
// within about that long, where gossip's suspicion takes seconds more.
type peerContacts struct {
	mu      sync.Mutex
	failing map[string]time.Time // peer id -> its last contact, while its heartbeats fail
	leader  string               // the last leader Raft named (raft.LeaderObservation)
}

// observe records one observation; it reports whether the observation was one of ours.
func (p *peerContacts) observe(o raft.Observation) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch d := o.Data.(type) {
	case raft.FailedHeartbeatObservation:
		if p.failing == nil {
			p.failing = map[string]time.Time{}
		}
		p.failing[string(d.PeerID)] = d.LastContact
	case raft.ResumedHeartbeatObservation:
		delete(p.failing, string(d.PeerID))
	case raft.LeaderObservation:
		if d.LeaderID != "" {
			p.leader = string(d.LeaderID)
		}
	default:
		return false
	}
	return true
}

// reset forgets every observation: a new leadership's replication starts afresh (a peer that
// failed in an earlier term and answers now sends no resumed observation in this one).
func (p *peerContacts) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.failing)
}

// unreachable lists the peers whose heartbeats fail and that were last heard from more than
// after ago (as of now), with that last contact (zero: never heard from in this term).
func (p *peerContacts) unreachable(now time.Time, after time.Duration) map[string]time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]time.Time{}
	for id, last := range p.failing {
		if now.Sub(last) > after {
			out[id] = last
		}
	}
	return out
}

// watchPeers registers an observer of the heartbeat observations and feeds peerContacts until
// the node shuts down (owned by n.wg).
func (n *Node) watchPeers() {
	defer n.wg.Done()
	ch := make(chan raft.Observation, 64)
	obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.FailedHeartbeatObservation, raft.ResumedHeartbeatObservation, raft.LeaderObservation:
			return true
		}
		return false
	})
	n.raft.RegisterObserver(obs)
	defer n.raft.DeregisterObserver(obs)
	for {
		select {
		case o := <-ch:
			n.peers.observe(o)
		case <-n.ctx.Done():
			return
		}
	}
}

// UnreachablePeers lists, on the leader, the voters its Raft has not heard from for two
// heartbeat timeouts while its heartbeats to them fail, with their last contact; nil on a
// follower (only the leader heartbeats).
func (n *Node) UnreachablePeers() map[string]time.Time {
	if n.raft.State() != raft.Leader {
		return nil
	}
	return n.peers.unreachable(time.Now(), 2*n.cfg.HeartbeatTimeout)
}

// SilentLeader returns, on a follower, the last leader its Raft knew when it has not heard from
// it for two heartbeat timeouts (a killed leader, before a new one is elected), or "".
func (n *Node) SilentLeader() string {
	if n.raft.State() == raft.Leader {
		return ""
	}
	n.peers.mu.Lock()
	id := n.peers.leader
	n.peers.mu.Unlock()
	if id == "" || id == n.cfg.ID || time.Since(n.raft.LastContact()) <= 2*n.cfg.HeartbeatTimeout {
		return ""
	}
	return id
}
