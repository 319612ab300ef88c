package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// runRaft runs `jmnode raft SUB` with the arguments after SUB.
func runRaft(sub string, rest []string) error {
	fs := flag.NewFlagSet("raft "+sub, flag.ContinueOnError)
	cf := newCLIFlags(fs, sub == "peers")
	switch sub {
	case "peers":
		usageFor(fs, "jmnode raft peers [--json]", "Lists the Raft configuration.")
	case "join":
		usageFor(fs, "jmnode raft join ID RAFT_ADDR [GRPC_ADDR]", "Adds a JobMaster as a Raft voter (the request is forwarded to the leader).")
	case "remove":
		usageFor(fs, "jmnode raft remove ID", "Removes a JobMaster from the Raft configuration.")
	case "transfer-leadership":
		usageFor(fs, "jmnode raft transfer-leadership [--to ID]", "Hands leadership to another voter (--to, or any up-to-date one) without waiting an election\n"+
			"timeout: the leader brings it up to date and tells it to start an election at once. Running\n"+
			"tasks keep running; the new leader reconciles with the TaskManagers as after any failover.")
	default:
		return fmt.Errorf("unknown raft command %q (peers, join, remove, transfer-leadership)", sub)
	}
	var to *string
	if sub == "transfer-leadership" {
		to = fs.String("to", "", "the voter to lead (default: any up-to-date voter)")
	}
	if err := parseFlags(fs, reorder(fs, rest)); err != nil {
		return err
	}
	switch sub {
	case "peers":
		resp, err := ask(cf, func(ctx context.Context, c *conn) (*pb.RaftPeersResponse, error) {
			return c.operator().RaftPeers(ctx, &pb.RaftPeersRequest{})
		})
		if err != nil {
			return err
		}
		if *cf.json {
			return printJSON(resp)
		}
		w := tabwriter.NewWriter(os.Stdout, 0, 2, 2, ' ', 0)
		fmt.Fprintln(w, "ID\tRAFT ADDRESS\tGRPC ADDRESS\tSUFFRAGE\tLEADER")
		for _, p := range resp.Peers {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%v\n", p.Id, p.Address, orDash(p.GrpcAddress), p.Suffrage, p.Leader)
		}
		return w.Flush()
	case "join":
		if fs.NArg() < 2 {
			fs.Usage()
			return errors.New("raft join needs ID and RAFT_ADDR")
		}
		req := &pb.RaftJoinRequest{Id: fs.Arg(0), RaftAddress: fs.Arg(1), GrpcAddress: fs.Arg(2)}
		resp, err := ask(cf, func(ctx context.Context, c *conn) (*pb.RaftJoinResponse, error) {
			return c.operator().RaftJoin(ctx, req)
		})
		if err != nil {
			return err
		}
		fmt.Printf("%s joined at index %d\n", req.Id, resp.Index)
	case "remove":
		if fs.NArg() != 1 {
			fs.Usage()
			return errors.New("raft remove needs ID")
		}
		resp, err := ask(cf, func(ctx context.Context, c *conn) (*pb.RaftRemoveResponse, error) {
			return c.operator().RaftRemove(ctx, &pb.RaftRemoveRequest{Id: fs.Arg(0)})
		})
		if err != nil {
			return err
		}
		fmt.Printf("%s removed at index %d\n", fs.Arg(0), resp.Index)
	case "transfer-leadership":
		if fs.NArg() != 0 {
			fs.Usage()
			return errors.New("raft transfer-leadership takes no arguments (--to ID names the voter)")
		}
		start := time.Now()
		resp, err := ask(cf, func(ctx context.Context, c *conn) (*pb.RaftTransferLeadershipResponse, error) {
			return c.operator().RaftTransferLeadership(ctx, &pb.RaftTransferLeadershipRequest{ToId: *to})
		})
		if err != nil {
			return err
		}
		to := resp.LeaderId
		if to == "" {
			to = "a voter not heard from yet (jmnode status names it)"
		}
		fmt.Printf("leadership moved from %s to %s in %s\n", resp.FromId, to, time.Since(start).Round(time.Millisecond))
	}
	return nil
}

func runMembers(args []string) error {
	fs := flag.NewFlagSet("members", flag.ContinueOnError)
	usageFor(fs, "jmnode members [--json]", "Lists the gossip pool as one JobMaster sees it.")
	cf := newCLIFlags(fs, true)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	resp, err := ask(cf, func(ctx context.Context, c *conn) (*pb.MembersResponse, error) {
		return c.operator().Members(ctx, &pb.MembersRequest{})
	})
	if err != nil {
		return err
	}
	if *cf.json {
		return printJSON(resp)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 2, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tADDRESS\tROLE\tSTATE\tGRPC\tDATA\tSLOTS\tEPOCH\tLEADER\tFSM LEVEL")
	for _, m := range resp.Members {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.Name, m.Address, m.Role, m.State,
			orDash(m.Meta["grpc"]), orDash(m.Meta["data"]), m.Meta["slots"], m.Meta["epoch"], m.Meta["leader"], orDash(m.Meta["fsm_level"]))
	}
	return w.Flush()
}
