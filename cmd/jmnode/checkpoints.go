package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// jobCheckpoints prints a job's checkpoints: a row each for the pending ones, the retained
// completed ones and the latest aborted ones (docs/checkpoints.md).
func jobCheckpoints(args []string) error {
	fs := flag.NewFlagSet("job checkpoints", flag.ContinueOnError)
	usageFor(fs, "jmnode job checkpoints ID [--json] [--consistent]",
		"Shows a job's checkpoints: the settings that apply, the counts, and a row per checkpoint the record keeps (pending,\n"+
			"the retained completed ones, the latest aborted ones): id, status, trigger time, duration, state size,\n"+
			"acknowledged tasks and the abort reason.")
	cf := newCLIFlags(fs, true)
	consistent := fs.Bool("consistent", false, "read from the leader, which confirms its leadership first")
	if err := parseFlags(fs, reorder(fs, args)); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errors.New("job checkpoints needs exactly one job ID")
	}
	resp, err := ask(cf, func(ctx context.Context, c *conn) (*pb.GetJobResponse, error) {
		return c.client().GetJob(ctx, &pb.GetJobRequest{JobId: fs.Arg(0), Consistent: *consistent, View: pb.JobView_JOB_VIEW_CHECKPOINTS})
	})
	if err != nil {
		return err
	}
	if *cf.json {
		return printJSON(resp.GetCheckpoints())
	}
	printCheckpoints(os.Stdout, fs.Arg(0), resp.GetCheckpoints())
	return nil
}

func printCheckpoints(out io.Writer, jobID string, v *pb.JobCheckpointsView) {
	s := v.GetSettings()
	if s == nil {
		fmt.Fprintf(out, "job %s is not checkpointed (its JobGraph has no checkpoint_config.interval_ms)\n", jobID)
	} else {
		fmt.Fprintf(out, "job %s: every %s, timeout %s, at most %d pending, %d retained\n", jobID,
			time.Duration(s.IntervalMs)*time.Millisecond, time.Duration(s.TimeoutMs)*time.Millisecond, s.MaxConcurrent, s.Retained)
	}
	fmt.Fprintf(out, "%d completed, %d aborted; next id %d\n", v.GetCompletedCount(), v.GetAbortedCount(), max(v.GetNextCheckpointId(), 1))
	if len(v.GetCheckpoints()) == 0 {
		return
	}
	w := tabwriter.NewWriter(out, 0, 2, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tSTATUS\tTRIGGERED\tDURATION\tSIZE\tALIGNMENT\tACKNOWLEDGED\tEPOCH\tREASON")
	for _, r := range v.GetCheckpoints() {
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%d/%d\t%d\t%s\n", r.Id, strings.TrimPrefix(r.Status.String(), "CHECKPOINT_STATUS_"),
			fmtTime(r.TriggerUnixMs), checkpointDuration(r), byteSize(r.StateSizeBytes, r.Status), alignment(r), r.Acknowledged, r.Tasks, r.Epoch, orDash(r.AbortReason))
	}
	_ = w.Flush()
}

// checkpointDuration: from the trigger to the completion or abort; so far for a pending one.
func checkpointDuration(r *pb.CheckpointRow) string {
	end := r.EndUnixMs
	suffix := ""
	if end == 0 {
		end, suffix = time.Now().UnixMilli(), " so far"
	}
	if r.TriggerUnixMs == 0 || end < r.TriggerUnixMs {
		return "-"
	}
	return (time.Duration(end-r.TriggerUnixMs) * time.Millisecond).String() + suffix
}

// byteSize prints a state size; an aborted checkpoint's record keeps no sizes.
// alignment is the longest barrier alignment of the acknowledged tasks ("-" for an aborted
// checkpoint, whose record keeps no acknowledgements).
func alignment(r *pb.CheckpointRow) string {
	if r.Status == pb.CheckpointStatus_CHECKPOINT_STATUS_ABORTED {
		return "-"
	}
	return (time.Duration(r.MaxAlignmentUs) * time.Microsecond).String()
}

func byteSize(n int64, st pb.CheckpointStatus) string {
	switch {
	case st == pb.CheckpointStatus_CHECKPOINT_STATUS_ABORTED:
		return "-"
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
}

func idOrDash(id uint64) string {
	if id == 0 {
		return "-"
	}
	return fmt.Sprint(id)
}
