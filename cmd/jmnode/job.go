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

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// LoadJobFile reads a job spec: the protobuf JSON mapping of a JobGraph. Errors name the file
// and the field.
func LoadJobFile(path string) (*pb.JobGraph, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseJob(path, b)
}

// parseJob decodes the job spec b read from name.
func parseJob(name string, b []byte) (*pb.JobGraph, error) {
	var jg pb.JobGraph
	if err := (protojson.UnmarshalOptions{}).Unmarshal(b, &jg); err != nil {
		return nil, fmt.Errorf("job file %s: %v", name, strings.TrimPrefix(err.Error(), "proto: "))
	}
	return &jg, nil
}

func newJobID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func jobSubmit(args []string) error {
	fs := flag.NewFlagSet("job submit", flag.ContinueOnError)
	usageFor(fs, "jmnode job submit FILE [--wait] [--checkpoint-interval DUR]", "Submits a job spec (the protobuf JSON mapping of a JobGraph; see examples/). A wasm vertex whose artifact is a file path (relative to the spec) rather than a sha256 has the file uploaded first (jmnode artifact put) and its hash put in its place.")
	cf := newCLIFlags(fs, false)
	wait := fs.Bool("wait", false, "wait until a streaming job runs every task or a batch job ends")
	interval := fs.Duration("checkpoint-interval", 0, "checkpoint the job this often (the spec's checkpoint_config.interval_ms; at least 10ms; the cluster needs --checkpoint-dir; docs/checkpoints.md). 0: as the spec says")
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
	switch {
	case *interval < 0:
		return fmt.Errorf("--checkpoint-interval %s: must not be negative", *interval)
	case *interval > 0:
		if jg.CheckpointConfig == nil {
			jg.CheckpointConfig = &pb.CheckpointConfig{}
		}
		jg.CheckpointConfig.IntervalMs = interval.Milliseconds() // the leader checks the range
	}
	c, err := cf.dial()
	if err != nil {
		return err
	}
	if err := uploadSpecArtifacts(c, fs.Arg(0), jg); err != nil {
		return fmt.Errorf("submit %s: %w", fs.Arg(0), err)
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
