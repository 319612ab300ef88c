package cluster

import (
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// A replica whose disk fails does not stand for election.
//
// hashicorp/raft steps a leader down when it cannot write its own log (dispatchLogs), but the
// replica that stepped down is the one the followers still name as leader, and a follower
// grants its vote to the leader it knows: the replica with the full or failing disk wins the
// next election, fails its first write again, and so on. The fault suite's disk-full scenario
// saw this for 8 s (five elections won by the replica whose disk was full) while two healthy
// replicas stood by. So a replica whose log or stable-store write failed asks for no votes —
// RequestVote and RequestPreVote are refused locally — until diskFailHoldoff after its last
// failed write; granting votes and following are unaffected. The holdoff ends on its own (a
// replica that cannot campaign cannot learn that its disk is back from a write of its own when
// no leader sends it entries), so a cluster whose every disk failed elects again once one
// disk works.

// ErrDiskFailing is returned by a vote request of a replica whose disk failed recently.
var ErrDiskFailing = errors.New("cluster: this replica's disk failed a write recently: it stands for no election")

// diskFailHoldoff is how long after a failed write a replica stands for no election: a few
// election timeouts of the default Raft timings, so the healthy replicas elect one of theirs.
const diskFailHoldoff = 5 * time.Second

// diskHealth records the replica's last failed write.
type diskHealth struct {
	log      hclog.Logger
	holdoff  time.Duration
	mu       sync.Mutex
	failedAt time.Time
}

func newDiskHealth(log hclog.Logger, holdoff time.Duration) *diskHealth {
	return &diskHealth{log: log, holdoff: holdoff}
}

// note records the outcome of a write.
func (h *diskHealth) note(what string, err error) error {
	if err == nil || h == nil {
		return err
	}
	h.mu.Lock()
	first := h.failedAt.IsZero() || time.Since(h.failedAt) > h.holdoff
	h.failedAt = time.Now()
	h.mu.Unlock()
	if first {
		h.log.Warn("a Raft write failed: this replica stands for no election for the holdoff", "write", what, "holdoff", h.holdoff, "error", err)
	}
	return err
}

// failing reports whether a write failed within the holdoff.
func (h *diskHealth) failing() bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.failedAt.IsZero() && time.Since(h.failedAt) <= h.holdoff
}

// diskAwareTransport is the Raft transport of a replica that asks for no votes while its disk
// is failing. Everything else is the NetworkTransport's own.
type diskAwareTransport struct {
	*raft.NetworkTransport
	health *diskHealth
}

func (t diskAwareTransport) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	if t.health.failing() {
		return ErrDiskFailing
	}
	return t.NetworkTransport.RequestVote(id, target, args, resp)
}

func (t diskAwareTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	if t.health.failing() {
		return ErrDiskFailing
	}
	return t.NetworkTransport.RequestPreVote(id, target, args, resp)
}

var (
	_ raft.Transport   = diskAwareTransport{}
	_ raft.WithPreVote = diskAwareTransport{}
	_ raft.WithClose   = diskAwareTransport{}
)
