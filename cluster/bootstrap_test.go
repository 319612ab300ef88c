package cluster

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// peerIDs returns the sorted ids of n's Raft configuration.
func peerIDs(n *Node) string {
	peers, err := n.Peers()
	if err != nil {
		return err.Error()
	}
	ids := make([]string, 0, len(peers))
	for _, p := range peers {
		ids = append(ids, p.GetId())
	}
	sort.Strings(ids)
	return strings.Join(ids, ",")
}

func TestBootstrapExpectFormsOneClusterAndJoinRemove(t *testing.T) {
	const n = 3
	lis := make([]net.Listener, n)
	join := make([]string, n)
	for i := range lis {
		lis[i] = listen(t, "127.0.0.1:0")
		join[i] = lis[i].Addr().String()
	}
	nodes := make([]*testNode, n)
	for i := range nodes {
		cfg := nodeConfig(t, fmt.Sprintf("jm%d", i+1))
		cfg.BootstrapExpect = n
		cfg.Join = join // includes the node's own address, which discovery skips
		nodes[i] = newTestNode(t, cfg, lis[i])
	}
	for _, tn := range nodes {
		if err := tn.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	leader := establishedLeader(t, nodes, 1)
	waitFor(t, "one cluster of three with epoch 1 everywhere", func() (bool, string) {
		ok := true
		var seen []string
		for _, tn := range nodes {
			ids, e := peerIDs(tn.Node), tn.fsm.Epoch().GetEpoch()
			seen = append(seen, fmt.Sprintf("%s:[%s]/epoch=%d", tn.ID(), ids, e))
			ok = ok && ids == "jm1,jm2,jm3" && e == 1
		}
		return ok, strings.Join(seen, " ")
	})
	mustApply(t, leader.Node, "one")

	// A fourth node joins online through the Join addresses (any JM forwards to the leader).
	cfg := nodeConfig(t, "jm4")
	cfg.Join = join
	fourth := newTestNode(t, cfg, listen(t, "127.0.0.1:0"))
	if err := fourth.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	all := append(append([]*testNode(nil), nodes...), fourth)
	waitFor(t, "four voters", func() (bool, string) {
		ids := peerIDs(leader.Node)
		return ids == "jm1,jm2,jm3,jm4", ids
	})
	mustApply(t, leader.Node, "two")
	waitValues(t, all, []string{"one", "two"})
	waitFor(t, "jm4 knows the leader's gRPC address", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		id, addr, err := fourth.LeaderGRPCAddr(ctx)
		return id == leader.ID() && addr == leader.GRPCAddr(), fmt.Sprint(id, addr, err)
	})

	// Joining again is idempotent.
	again, err := leader.AddVoter(fourth.ID(), fourth.RaftAddr(), fourth.GRPCAddr())
	if err != nil || again == 0 {
		t.Fatalf("repeated AddVoter = %d, %v", again, err)
	}

	// Remove it through the leader's OperatorService. (That a follower's JobMaster forwards
	// RaftRemove to the leader is the edge's business: jmserver's TestForwardable.)
	lconn, err := grpc.NewClient(leader.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer lconn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := pb.NewOperatorServiceClient(lconn).RaftRemove(ctx, &pb.RaftRemoveRequest{Id: fourth.ID()}); err != nil {
		t.Fatalf("RaftRemove via the leader: %v", err)
	}
	follower := followers(nodes, leader)[0]
	conn, err := grpc.NewClient(follower.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	waitFor(t, "three voters again", func() (bool, string) {
		ids := peerIDs(leader.Node)
		return ids == "jm1,jm2,jm3", ids
	})
	if _, err := leader.RemoveServer(fourth.ID()); err != nil {
		t.Fatalf("removing a non-member: %v", err)
	}
	waitFor(t, "the follower's RaftPeers shows three voters", func() (bool, string) {
		resp, err := pb.NewOperatorServiceClient(conn).RaftPeers(ctx, &pb.RaftPeersRequest{})
		return err == nil && len(resp.GetPeers()) == 3 && resp.GetLeaderId() == leader.ID(), fmt.Sprint(resp, err)
	})
	if _, err := follower.AddVoter("x", "127.0.0.1:1", ""); !isErr(err, ErrNotLeader) {
		t.Fatalf("AddVoter on follower: %v, want ErrNotLeader", err)
	}
}
