package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// cliFlags are shared by every operator command.
type cliFlags struct {
	addr    *string
	json    *bool
	timeout *time.Duration
	maxMsg  *int
}

func newCLIFlags(fs *flag.FlagSet, read bool) cliFlags {
	def := os.Getenv("JMNODE_ADDR")
	if def == "" {
		def = "127.0.0.1:7100"
	}
	c := cliFlags{
		addr:    fs.String("addr", def, "gRPC address of any JobMaster (env JMNODE_ADDR)"),
		timeout: fs.Duration("timeout", 15*time.Second, "give up after this long (retries while there is no leader, it reconciles or this client is over its write rate limit)"),
		maxMsg:  fs.Int("max-message-size", transport.DefaultMaxMessageSize, "bound in bytes on every gRPC message this client sends or receives (the JobMasters have their own)"),
	}
	if read {
		c.json = fs.Bool("json", false, "print JSON")
	} else {
		c.json = new(bool)
	}
	return c
}

type conn struct {
	addr string
	cc   *grpc.ClientConn
}

// dial connects to a JobMaster; every message is bounded by maxMsg (0: the default), and a
// message over that limit or the JobMaster's is refused with an error naming the limit.
func dial(addr string, maxMsg int) (*conn, error) {
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())},
		transport.DialOptions(maxMsg, "jmnode client")...)
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("JobMaster address %q: %w", addr, err)
	}
	return &conn{addr: addr, cc: cc}, nil
}

func (c *conn) client() pb.ClientServiceClient     { return pb.NewClientServiceClient(c.cc) }
func (c *conn) operator() pb.OperatorServiceClient { return pb.NewOperatorServiceClient(c.cc) }

// call runs fn, retrying while the cluster has no leader, the call reached a follower that
// could not forward, the leader is reconciling, or this client is over its write rate limit
// (after the RetryInfo delay), until the timeout. Errors name the address.
func (c *conn) call(timeout time.Duration, fn func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	delay := 100 * time.Millisecond
	for {
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		err := fn(actx)
		acancel()
		if err == nil {
			return nil
		}
		st, _ := status.FromError(err)
		retry := st.Code() == codes.Unavailable || st.Code() == codes.DeadlineExceeded || transport.IsRateLimited(err)
		if !retry || ctx.Err() != nil {
			return c.explain(err)
		}
		if d, ok := transport.RetryAfter(err); ok {
			delay = d
		}
		select {
		case <-ctx.Done():
			return c.explain(err)
		case <-time.After(delay):
		}
		delay = min(delay*2, time.Second)
	}
}

func (c *conn) explain(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	switch {
	case st.Code() == codes.Unavailable && transport.Reason(err) == "":
		return fmt.Errorf("cannot reach JobMaster at %s: %s", c.addr, st.Message())
	case st.Code() == codes.DeadlineExceeded:
		return fmt.Errorf("JobMaster at %s did not answer in time: %s", c.addr, st.Message())
	}
	return fmt.Errorf("%s (%s, from %s)", st.Message(), st.Code(), c.addr)
}

// ask dials the JobMaster the flags name and makes one call with the CLI's retries.
func ask[T any](cf cliFlags, rpc func(context.Context, *conn) (T, error)) (T, error) {
	var resp T
	c, err := dial(*cf.addr, *cf.maxMsg)
	if err != nil {
		return resp, err
	}
	defer c.cc.Close()
	err = c.call(*cf.timeout, func(ctx context.Context) error {
		var err error
		resp, err = rpc(ctx, c)
		return err
	})
	return resp, err
}

func printJSON(m proto.Message) error {
	b, err := protojson.MarshalOptions{Indent: "  ", UseProtoNames: true}.Marshal(m)
	if err != nil {
		return err
	}
	fmt.Println(string(b))
	return nil
}

// LoadJobFile reads a job spec: the protobuf JSON mapping of a JobGraph. Errors name the file
// and the field.
func LoadJobFile(path string) (*pb.JobGraph, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var jg pb.JobGraph
	if err := (protojson.UnmarshalOptions{}).Unmarshal(b, &jg); err != nil {
		return nil, fmt.Errorf("job file %s: %v", path, strings.TrimPrefix(err.Error(), "proto: "))
	}
	return &jg, nil
}

func newJobID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func runJob(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: jmnode job submit|list|status|cancel ...")
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "submit":
		return jobSubmit(rest)
	case "list":
		return jobList(rest)
	case "status":
		return jobStatus(rest)
	case "cancel":
		return jobCancel(rest)
	}
	return fmt.Errorf("unknown job command %q (submit, list, status, cancel)", sub)
}

func jobSubmit(args []string) error {
	fs := flag.NewFlagSet("job submit", flag.ContinueOnError)
	usageFor(fs, "jmnode job submit FILE [--wait]", "Submits a job spec (the protobuf JSON mapping of a JobGraph; see examples/).")
	cf := newCLIFlags(fs, false)
	wait := fs.Bool("wait", false, "wait until a streaming job runs every task or a batch job ends")
	if err := parseFlags(fs, reorder(fs, args)); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errors.New("job submit needs exactly one FILE")
	}
	jg, err := LoadJobFile(fs.Arg(0))
	if err != nil {
		return err
	}
	if jg.JobId == "" {
		jg.JobId = newJobID() // chosen here so that a retried submit is recognised
	}
	c, err := dial(*cf.addr, *cf.maxMsg)
	if err != nil {
		return err
	}
	var resp *pb.SubmitJobResponse
	err = c.call(*cf.timeout, func(ctx context.Context) error {
		var err error
		resp, err = c.client().SubmitJob(ctx, &pb.SubmitJobRequest{JobGraph: jg})
		if status.Code(err) == codes.AlreadyExists {
			resp, err = &pb.SubmitJobResponse{JobId: jg.JobId}, nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("submit %s: %w", fs.Arg(0), err)
	}
	fmt.Printf("submitted job %s (%s)\n", resp.JobId, jg.Name)
	if !*wait {
		return nil
	}
	return waitJob(c, resp.JobId, jg.Type, 10*time.Minute)
}

// reorder moves flags after positional arguments to the front, so "job submit FILE --wait"
// works as well as "job submit --wait FILE". Whether a flag takes a value is asked of fs.
func reorder(fs *flag.FlagSet, args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if strings.HasPrefix(a, "-") {
			flags = append(flags, a)
			if !strings.Contains(a, "=") && i+1 < len(args) && takesValue(fs, a) {
				flags = append(flags, args[i+1])
				i++
			}
			continue
		}
		pos = append(pos, a)
	}
	return append(flags, pos...)
}

func takesValue(fs *flag.FlagSet, arg string) bool {
	name := strings.TrimLeft(arg, "-")
	if name == "config" {
		return true // registered by parseFlags, after reordering
	}
	f := fs.Lookup(name)
	if f == nil {
		return false // unknown: let the parser report it
	}
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return !ok || !b.IsBoolFlag()
}

func jobList(args []string) error {
	fs := flag.NewFlagSet("job list", flag.ContinueOnError)
	usageFor(fs, "jmnode job list [--json] [--consistent]", "Lists every job.")
	cf := newCLIFlags(fs, true)
	consistent := fs.Bool("consistent", false, "read from the leader, which confirms its leadership first")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	resp, err := ask(cf, func(ctx context.Context, c *conn) (*pb.ListJobsResponse, error) {
		return c.client().ListJobs(ctx, &pb.ListJobsRequest{Consistent: *consistent})
	})
	if err != nil {
		return err
	}
	if *cf.json {
		return printJSON(resp)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 2, 2, ' ', 0)
	fmt.Fprintln(w, "JOB ID\tNAME\tTYPE\tSTATUS\tTASKS\tRUNNING\tRESTARTS\tSUBMITTED")
	for _, j := range resp.Jobs {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\n", j.JobId, j.Name, strings.TrimPrefix(j.Type.String(), "JOB_TYPE_"),
			graph.JobStatusName(j.Status), j.Tasks, j.TasksRunning, j.Restarts, fmtTime(j.SubmittedAt))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if resp.RemovedJobs > 0 {
		fmt.Printf("%d earlier terminal jobs removed (retention: --retain-jobs, --retain-job-age)\n", resp.RemovedJobs)
	}
	return nil
}

func fmtTime(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return time.UnixMilli(ms).Format("15:04:05.000")
}

func jobCancel(args []string) error {
	fs := flag.NewFlagSet("job cancel", flag.ContinueOnError)
	usageFor(fs, "jmnode job cancel ID", "Cancels a job: its status becomes CANCELLING, then CANCELED once every task stopped.")
	cf := newCLIFlags(fs, false)
	if err := parseFlags(fs, reorder(fs, args)); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errors.New("job cancel needs exactly one job ID")
	}
	resp, err := ask(cf, func(ctx context.Context, c *conn) (*pb.CancelJobResponse, error) {
		return c.client().CancelJob(ctx, &pb.CancelJobRequest{JobId: fs.Arg(0)})
	})
	if err != nil {
		return err
	}
	fmt.Printf("job %s: %s\n", fs.Arg(0), graph.JobStatusName(resp.Status))
	return nil
}

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
	if *cf.json {
		return printJSON(resp)
	}
	fmt.Printf("node %s (%s), leader %s at %s, epoch %d, reconciling %v, applied %d\n", resp.NodeId, resp.RaftState,
		orDash(resp.LeaderId), orDash(resp.LeaderGrpcAddress), resp.Epoch, resp.Reconciling, resp.AppliedIndex)
	w := tabwriter.NewWriter(os.Stdout, 0, 2, 2, ' ', 0)
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

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func runRaft(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: jmnode raft peers|join|remove ...")
	}
	sub, rest := args[0], args[1:]
	fs := flag.NewFlagSet("raft "+sub, flag.ContinueOnError)
	cf := newCLIFlags(fs, sub == "peers")
	switch sub {
	case "peers":
		usageFor(fs, "jmnode raft peers [--json]", "Lists the Raft configuration.")
	case "join":
		usageFor(fs, "jmnode raft join ID RAFT_ADDR [GRPC_ADDR]", "Adds a JobMaster as a Raft voter (the request is forwarded to the leader).")
	case "remove":
		usageFor(fs, "jmnode raft remove ID", "Removes a JobMaster from the Raft configuration.")
	default:
		return fmt.Errorf("unknown raft command %q (peers, join, remove)", sub)
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
	fmt.Fprintln(w, "NAME\tADDRESS\tROLE\tSTATE\tGRPC\tDATA\tSLOTS\tEPOCH\tLEADER")
	for _, m := range resp.Members {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.Name, m.Address, m.Role, m.State,
			orDash(m.Meta["grpc"]), orDash(m.Meta["data"]), m.Meta["slots"], m.Meta["epoch"], m.Meta["leader"])
	}
	return w.Flush()
}
