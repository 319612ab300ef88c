package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/jmcluster/jmcluster/jmserver"
	"github.com/jmcluster/jmcluster/transport/pb"
)

func runStatus(args []string) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	usageFor(fs, "jmnode status [--json]", "Shows the cluster as one JobMaster sees it: leader, epoch, reconciliation, peers, TaskManagers.")
	cf := newCLIFlags(fs, true)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	resp, err := ask(cf, func(ctx context.Context, c *conn) (*pb.ClusterStatusResponse, error) {
		return c.client().ClusterStatus(ctx, &pb.ClusterStatusRequest{})
	})
	if err != nil {
		return err
	}
	markUnreachableByLeader(cf, resp)
	if *cf.json {
		return printJSON(resp)
	}
	fmt.Printf("node %s (%s), leader %s at %s, epoch %d, reconciling %v, applied %d\n", resp.NodeId, resp.RaftState,
		orDash(resp.LeaderId), orDash(resp.LeaderGrpcAddress), resp.Epoch, resp.Reconciling, resp.AppliedIndex)
	if resp.StateBehind != "" {
		fmt.Printf("NOT ESTABLISHED: %s\n  the replicated state was lost; bring it back with: jmnode snapshot restore FILE\n", resp.StateBehind)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 2, 2, ' ', 0)
	// The JobMasters: gossip's state, or "unreachable" once the leader's Raft has not heard
	// from a voter for two heartbeat timeouts.
	fmt.Fprintln(w, "JOBMASTER\tRAFT\tGRPC\tROLE\tSTATE")
	for _, p := range resp.Peers {
		role := p.Suffrage
		if p.Leader {
			role = "leader"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", p.Id, p.Address, orDash(p.GrpcAddress), role, orDash(p.State))
	}
	_ = w.Flush()
	w = tabwriter.NewWriter(os.Stdout, 0, 2, 2, ' ', 0)
	fmt.Fprintln(w, "TASKMANAGER\tGRPC\tDATA\tSLOTS\tUSED\tSTATE")
	for _, tm := range resp.TaskManagers {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%s\n", tm.Id, tm.GrpcAddress, tm.DataAddress, tm.Slots, tm.SlotsUsed, tm.State)
	}
	_ = w.Flush()
	for _, r := range resp.Reconciliations {
		fmt.Printf("reconciliation epoch %d by %s: %s, %s, %s\n", r.Epoch, r.LeaderId, r.Outcome, recDuration(r), recCounts(r.Counts))
	}
	return nil
}

func recDuration(r *pb.ReconciliationRecord) string {
	if r.EndedAt == 0 {
		return "running"
	}
	return (time.Duration(r.EndedAt-r.StartedAt) * time.Millisecond).String()
}

func recCounts(c *pb.ReconciliationCounts) string {
	if c == nil {
		return "no counts"
	}
	return fmt.Sprintf("%d executions: %d kept running, %d finished, %d failed, %d canceled, %d missing; cancelled %d unknown, %d stale, %d duplicate; %d rejected; %d reports, %d TMs missing",
		c.Executions, c.KeptRunning, c.Finished, c.Failed, c.Canceled, c.Missing, c.CancelledUnknown, c.CancelledStale, c.CancelledDuplicate, c.Rejected, c.Reports, c.TmsMissing)
}

// markUnreachableByLeader: only the leader's Raft knows which voters it has not heard from (a
// kill -9'ed JobMaster is "unreachable" there within two heartbeat timeouts, while gossip still
// says alive), and only the leader which TaskManagers it refused; a follower's answer takes
// those states from the leader, asked once. Not answered, the follower's (gossip's) states
// stand.
func markUnreachableByLeader(cf cliFlags, resp *pb.ClusterStatusResponse) {
	if resp.RaftState == "Leader" || resp.LeaderGrpcAddress == "" {
		return
	}
	c, err := dialAs(cf, resp.LeaderGrpcAddress)
	if err != nil {
		return
	}
	defer c.cc.Close()
	lead, err := askOnce(c, func(ctx context.Context) (*pb.ClusterStatusResponse, error) {
		return c.client().ClusterStatus(ctx, &pb.ClusterStatusRequest{})
	})
	if err != nil {
		return
	}
	jmserver.TakeLeaderVerdicts(resp, lead)
}
