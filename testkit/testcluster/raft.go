package testcluster

import (
	"time"

	"github.com/jmcluster/jmcluster/cluster"
)

// SlowLease edits a replica's Raft timings so that a leader which lost its quorum keeps
// believing it leads for a full second before it steps down: long enough for a test to make
// it try (and fail) a commit in that window without racing the lease.
func SlowLease(c *cluster.Config) {
	c.HeartbeatTimeout = time.Second
	c.ElectionTimeout = time.Second
	c.LeaderLeaseTimeout = time.Second
}
