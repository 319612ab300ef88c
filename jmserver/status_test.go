package jmserver_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/cluster"
	tc "github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestFollowerStopsNamingADeadLeader: after the leader is killed its followers keep it as
// their Raft leader until their heartbeat timeout fires, but ClusterStatus names its address
// only while a follower heard from it within half the Raft heartbeat timeout. TaskManagers fence
// themselves when a JobMaster names a live leader they cannot reach, so naming a dead one made
// every TM cancel its tasks during an ordinary failover when the fence timeout was shorter than
// the followers' detection time. Measured against the request's send time, which precedes the
// follower's own check, so the bound holds on any machine.
func TestFollowerStopsNamingADeadLeader(t *testing.T) {
	c := tc.New(t, tc.Options{JMs: 3})
	l := c.Leader()
	hbt := cluster.DefaultConfig().HeartbeatTimeout // the timings testcluster runs
	dead := l.GRPCAddr
	var followers []*tc.JM
	for _, j := range c.Live() {
		if j != l {
			followers = append(followers, j)
		}
	}
	c.KillJM(l)
	killed := time.Now()
	named := 0
	tc.WaitFor(t, 30*time.Second, "a new leader named by both followers", func() (bool, string) {
		fresh := 0
		var seen []string
		for _, f := range followers {
			sent := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			resp, err := c.Client(f).ClusterStatus(ctx, &pb.ClusterStatusRequest{})
			cancel()
			if err != nil {
				seen = append(seen, f.ID+": "+err.Error())
				continue
			}
			seen = append(seen, fmt.Sprintf("%s names %q", f.ID, resp.LeaderGrpcAddress))
			switch resp.LeaderGrpcAddress {
			case dead:
				named++
				if since := sent.Sub(killed); since > hbt/2 {
					t.Fatalf("%s still names the dead leader %s %s after the kill (Raft heartbeat timeout %s)", f.ID, dead, since, hbt)
				}
			case "":
			default:
				fresh++
			}
		}
		return fresh == len(followers), fmt.Sprint(seen)
	})
	t.Logf("answers naming the dead leader within half the heartbeat timeout: %d", named)
}

// TestALeaderBehindTheTaskManagersNamesNoLeader: a leader that learns a TaskManager has seen an
// epoch above its state's (a wiped cluster that established before any TaskManager was in its
// pool, then was refused as stale) stops establishing and says why in ClusterStatus; it names
// no leader address, though its state still records itself as the epoch's leader.
func TestALeaderBehindTheTaskManagersNamesNoLeader(t *testing.T) {
	c := tc.New(t, tc.Options{JMs: 1})
	l := c.Leader()
	ctx := context.Background()
	resp, err := c.Client(l).ClusterStatus(ctx, &pb.ClusterStatusRequest{})
	if err != nil || resp.LeaderGrpcAddress != l.GRPCAddr || resp.StateBehind != "" {
		t.Fatalf("an established leader: %v, %v", resp, err)
	}
	l.A.Node.NoteSeenEpoch(resp.Epoch + 3)
	tc.WaitFor(t, 30*time.Second, "the leader reporting its state behind", func() (bool, string) {
		resp, err = c.Client(l).ClusterStatus(ctx, &pb.ClusterStatusRequest{})
		if err != nil {
			return false, err.Error()
		}
		return resp.StateBehind != "", fmt.Sprintf("epoch %d, leader %q, behind %q", resp.Epoch, resp.LeaderGrpcAddress, resp.StateBehind)
	})
	if resp.LeaderGrpcAddress != "" || resp.LeaderId != l.ID {
		t.Fatalf("a leader whose state is behind names %q as the leader's address (Raft leader %q): %v", resp.LeaderGrpcAddress, resp.LeaderId, resp)
	}
}
