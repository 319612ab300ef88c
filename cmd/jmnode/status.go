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

	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/operator"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// jobStatus prints a job: a row per vertex by default (its subtasks counted by state), every
// subtask of one vertex with --vertex, or of every vertex with --all. Subtasks are read in
// pages without their input channels, so a job of any width can be shown.
func jobStatus(args []string) error {
	fs := flag.NewFlagSet("job status", flag.ContinueOnError)
	usageFor(fs, "jmnode job status ID [--vertex NAME | --all] [--json]",
		"Shows a job: its status and a row per vertex with the subtasks counted by state. --vertex NAME (a vertex id or\n"+
			"name) lists that vertex's subtasks, --all every subtask: attempt, state, TaskManager, slot, start time.")
	cf := newCLIFlags(fs, true)
	consistent := fs.Bool("consistent", false, "read from the leader, which confirms its leadership first")
	vertex := fs.String("vertex", "", "list the subtasks of this vertex (id or name)")
	all := fs.Bool("all", false, "list every subtask of every vertex")
	if err := parseFlags(fs, reorder(fs, args)); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errors.New("job status needs exactly one job ID")
	}
	if *all && *vertex != "" {
		return errors.New("job status: --vertex and --all exclude each other")
	}
	c, err := cf.dial()
	if err != nil {
		return err
	}
	defer c.cc.Close()
	id := fs.Arg(0)
	var resp *pb.GetJobResponse
	if err := c.call(*cf.timeout, func(ctx context.Context) error {
		var err error
		resp, err = c.client().GetJob(ctx, &pb.GetJobRequest{JobId: id, Consistent: *consistent})
		return err
	}); err != nil {
		return err
	}
	if !*all && *vertex == "" {
		if *cf.json {
			return printJSON(resp)
		}
		printSummary(os.Stdout, resp)
		fmt.Printf("(served by %s at applied index %d; subtasks: --vertex NAME or --all)\n", resp.ServedBy, resp.AppliedIndex)
		return nil
	}
	vid := ""
	if *vertex != "" {
		if vid, err = findVertex(resp.GetSummary(), *vertex); err != nil {
			return err
		}
	}
	evs, err := readExecutions(c, *cf.timeout, &pb.GetJobRequest{JobId: id, Consistent: *consistent, VertexId: vid})
	if err != nil {
		return err
	}
	if *cf.json {
		out := proto.CloneOf(resp)
		out.Executions = evs
		return printJSON(out)
	}
	printSummary(os.Stdout, resp)
	w := tabwriter.NewWriter(os.Stdout, 0, 2, 2, ' ', 0)
	printSubtasks(w, evs)
	_ = w.Flush()
	fmt.Printf("(served by %s; %d subtasks)\n", resp.ServedBy, len(evs))
	return nil
}

// findVertex resolves a vertex id or name among the summary's vertices.
func findVertex(s *pb.JobSummary, name string) (string, error) {
	var ids []string
	for _, v := range s.GetVertices() {
		if v.VertexId == name {
			return v.VertexId, nil
		}
		ids = append(ids, v.VertexId)
	}
	for _, v := range s.GetVertices() {
		if v.Name == name {
			return v.VertexId, nil
		}
	}
	return "", fmt.Errorf("job %s has no vertex %q (vertices: %s)", s.GetJobId(), name, strings.Join(ids, ", "))
}

// readExecutions reads every page of a job's executions (without their input channels),
// starting from req (its vertex filter and consistency kept). Each page is one call with the
// CLI's retries; pages may come from different applied indexes.
func readExecutions(c *conn, timeout time.Duration, req *pb.GetJobRequest) ([]*pb.ExecutionVertex, error) {
	req = proto.CloneOf(req)
	req.View, req.OmitInputs, req.PageToken = pb.JobView_JOB_VIEW_EXECUTIONS, true, ""
	var out []*pb.ExecutionVertex
	for {
		var page *pb.GetJobResponse
		if err := c.call(timeout, func(ctx context.Context) error {
			var err error
			page, err = c.client().GetJob(ctx, req)
			return err
		}); err != nil {
			return nil, err
		}
		out = append(out, page.Executions...)
		if page.NextPageToken == "" {
			return out, nil
		}
		req.PageToken = page.NextPageToken
	}
}

// readJob reads a job's record with every execution (without input channels) through the
// summary and the pages of executions: a job of any width.
func readJob(c *conn, timeout time.Duration, id string, consistent bool) (*pb.JobRecord, error) {
	var resp *pb.GetJobResponse
	if err := c.call(timeout, func(ctx context.Context) error {
		var err error
		resp, err = c.client().GetJob(ctx, &pb.GetJobRequest{JobId: id, Consistent: consistent})
		return err
	}); err != nil {
		return nil, err
	}
	evs, err := readExecutions(c, timeout, &pb.GetJobRequest{JobId: id, Consistent: consistent})
	if err != nil {
		return nil, err
	}
	return assemble(resp.Job, evs), nil
}

// assemble puts paged executions into a record's execution graph (which the summary sends
// without subtasks).
func assemble(rec *pb.JobRecord, evs []*pb.ExecutionVertex) *pb.JobRecord {
	byVertex := map[string]*pb.ExecutionJobVertex{}
	for _, v := range rec.GetExecutionGraph().GetVertices() {
		byVertex[v.VertexId] = v
	}
	for _, ev := range evs {
		if v := byVertex[ev.VertexId]; v != nil {
			v.Subtasks = append(v.Subtasks, ev)
		}
	}
	return rec
}

// waitJob polls the job's summary until a streaming job runs every task or a batch job ends.
func waitJob(c *conn, id string, typ pb.JobType, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	last := ""
	for time.Now().Before(deadline) {
		var s *pb.JobSummary
		err := c.call(10*time.Second, func(ctx context.Context) error {
			r, err := c.client().GetJob(ctx, &pb.GetJobRequest{JobId: id, Consistent: true, View: pb.JobView_JOB_VIEW_SUMMARY})
			if err == nil {
				s = r.Summary
			}
			return err
		})
		if err != nil {
			return err
		}
		line := fmt.Sprintf("job %s: %s, %d/%d tasks running", id, graph.JobStatusName(s.Status), s.TasksRunning, s.Tasks)
		if line != last {
			fmt.Println(line)
			last = line
		}
		switch {
		case s.Status == pb.JobStatus_JOB_STATUS_FINISHED:
			return nil
		case graph.IsGloballyTerminal(s.Status):
			return fmt.Errorf("job %s ended %s: %s", id, graph.JobStatusName(s.Status), s.FailureCause)
		case typ == pb.JobType_JOB_TYPE_STREAMING && s.Status == pb.JobStatus_JOB_STATUS_RUNNING && s.TasksRunning == s.Tasks:
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("job %s: still not done after %s", id, limit)
}

type counts struct{ total, running int }

func pbSummary(rec *pb.JobRecord) counts {
	var c counts
	for _, v := range rec.GetExecutionGraph().GetVertices() {
		for _, ev := range v.Subtasks {
			c.total++
			if ev.GetCurrent().GetState() == pb.ExecutionState_EXECUTION_STATE_RUNNING {
				c.running++
			}
		}
	}
	return c
}

// printSummary prints the job line and a row per vertex.
func printSummary(out io.Writer, resp *pb.GetJobResponse) {
	s := resp.GetSummary()
	fmt.Fprintf(out, "job %s  %q  %s  status %s  restarts %d\n", s.JobId, s.Name, strings.TrimPrefix(s.Type.String(), "JOB_TYPE_"),
		graph.JobStatusName(s.Status), s.Restarts)
	if s.FailureCause != "" {
		fmt.Fprintf(out, "cause: %s\n", s.FailureCause)
	}
	fmt.Fprintf(out, "%d tasks: %s; %d attempts changed\n", s.Tasks, stateList(s.States), s.AttemptsChanged)
	if ck := s.Checkpoints; ck != nil {
		fmt.Fprintf(out, "checkpoints: %d completed (latest %s), %d pending, %d aborted (jmnode job checkpoints %s)\n",
			ck.Completed, idOrDash(ck.LatestCompletedId), ck.Pending, ck.Aborted, s.JobId)
	}
	if resp.Waiting != "" {
		line := "WAITING: " + strings.TrimPrefix(resp.Waiting, "jobmaster: ")
		if resp.WaitingSince > 0 {
			waited := time.Since(time.UnixMilli(resp.WaitingSince)).Round(time.Second)
			line = fmt.Sprintf("WAITING for %s: %s", waited, strings.TrimPrefix(resp.Waiting, "jobmaster: "))
		}
		if resp.SlotTimeoutMs > 0 && strings.Contains(resp.Waiting, "free slots") {
			line += fmt.Sprintf(" (the job fails once it has waited the slot timeout, %s)", time.Duration(resp.SlotTimeoutMs)*time.Millisecond)
		}
		fmt.Fprintln(out, line)
	}
	w := tabwriter.NewWriter(out, 0, 2, 2, ' ', 0)
	fmt.Fprintln(w, "VERTEX\tNAME\tPARALLELISM\tSTATES\tATTEMPTS CHANGED\tMAX ATTEMPT\tIN/S\tOUT/S\tBACKPRESSURE\tWATERMARK (LAG)\tDEAD LETTERS")
	fed := map[string]bool{} // vertices with an input: a source's IN/S is "-", not 0
	for _, e := range resp.GetJob().GetJobGraph().GetEdges() {
		fed[e.GetTarget()] = true
	}
	for _, v := range s.Vertices {
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%d\t%d\t%s\n", v.VertexId, orDash(v.Name), v.Parallelism, stateList(v.States), v.AttemptsChanged, v.MaxAttemptNumber, flowColumns(v, fed[v.VertexId]))
	}
	_ = w.Flush()
	printWasmVertices(out, resp.GetJob().GetJobGraph())
}

// printWasmVertices names the module of each wasm vertex: its artifact's short hash (the first
// 12 characters of its sha256, as the TaskManager's log and a failed task's cause name it),
// function and kind.
func printWasmVertices(out io.Writer, jg *pb.JobGraph) {
	for _, v := range jg.GetVertices() {
		if w := v.GetOperator().GetWasm(); w != nil {
			a := w.GetArtifact()
			fmt.Fprintf(out, "wasm %s: artifact %s, function %s, %s\n", v.GetId(), a[:min(len(a), 12)], w.GetFunction(), strings.TrimPrefix(w.GetKind().String(), "WASM_KIND_"))
		}
	}
}

// flowColumns is a vertex's data flow as the leader measures it: records in and out per
// second, backpressure (the busiest subtask's share of time waiting for space downstream), the
// watermark with its lag behind the wall clock, and the dead letters; "-" where the leader has
// no measure (fewer than two heartbeats of a running subtask, a follower that could not ask it),
// no watermark (a job without event time, or a subtask before its first watermark) or, for
// records in, no input (fed false: a source).
func flowColumns(v *pb.VertexSummary, fed bool) string {
	if v.FlowSubtasks == nil {
		return "-\t-\t-\t-\t-"
	}
	wm := "-"
	if v.Watermark != nil {
		wm = watermarkText(v.GetWatermark(), time.Duration(v.GetWatermarkLagMs())*time.Millisecond)
	}
	in := "-" // a source reads no channel
	if fed {
		in = perSecond(v.GetRecordsInPerS())
	}
	return fmt.Sprintf("%s\t%s\t%.0f%%\t%s\t%d", in, perSecond(v.GetRecordsOutPerS()), v.GetBackpressure()*100, wm, v.GetDeadLetters())
}

// watermarkText shows a watermark (UTC; with its date when it is a day or more behind) and its
// lag behind the wall clock, rounded to what a reader compares: milliseconds under a second,
// tenths of a second under an hour, then hours, then days. The watermark after every input
// ended (operator.MaxWatermark) is "end of input".
func watermarkText(wm int64, lag time.Duration) string {
	if wm == operator.MaxWatermark {
		return "end of input"
	}
	layout := "15:04:05.000"
	if lag >= 24*time.Hour {
		layout = "2006-01-02 15:04:05"
	}
	var l string
	switch {
	case lag < time.Second:
		l = lag.String()
	case lag < time.Hour:
		l = lag.Round(100 * time.Millisecond).String()
	case lag < 48*time.Hour:
		l = lag.Round(time.Minute).String()
	default:
		l = fmt.Sprintf("%dd", lag/(24*time.Hour))
	}
	return fmt.Sprintf("%s (%s)", time.UnixMilli(wm).UTC().Format(layout), l)
}

// perSecond prints a rate with a precision that suits its size.
func perSecond(r float64) string {
	switch {
	case r >= 100:
		return fmt.Sprintf("%.0f", r)
	case r >= 1:
		return fmt.Sprintf("%.1f", r)
	default:
		return fmt.Sprintf("%.2f", r)
	}
}

func stateList(cs []*pb.StateCount) string {
	if len(cs) == 0 {
		return "-"
	}
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = fmt.Sprintf("%s %d", graph.ExecutionStateName(c.State), c.Count)
	}
	return strings.Join(parts, ", ")
}

// printSubtasks prints one row per subtask.
func printSubtasks(w io.Writer, evs []*pb.ExecutionVertex) {
	fmt.Fprintln(w, "VERTEX\tSUBTASK\tATTEMPT ID\tATTEMPT\tSTATE\tTM\tSLOT\tSTARTED")
	for _, ev := range evs {
		e := ev.GetCurrent()
		if e == nil {
			fmt.Fprintf(w, "%s\t%d\t-\t-\tCREATED\t-\t-\t-\n", ev.VertexId, ev.SubtaskIndex)
			continue
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%d\t%s\t%s\t%d\t%s\n", ev.VertexId, ev.SubtaskIndex, e.AttemptId, e.AttemptNumber,
			graph.ExecutionStateName(e.State), e.GetSlot().GetTmId(), e.GetSlot().GetIndex(), fmtTime(e.StartTimestamp))
	}
}

// printJob prints a job record with every subtask (the demo's view of a small job).
func printJob(out *os.File, rec *pb.JobRecord) {
	jg := rec.JobGraph
	fmt.Fprintf(out, "job %s  %q  %s  status %s  restarts %d\n", jg.JobId, jg.Name, strings.TrimPrefix(jg.Type.String(), "JOB_TYPE_"),
		graph.JobStatusName(rec.Status), rec.Restarts)
	if rec.FailureCause != "" {
		fmt.Fprintf(out, "cause: %s\n", rec.FailureCause)
	}
	w := tabwriter.NewWriter(out, 0, 2, 2, ' ', 0)
	var evs []*pb.ExecutionVertex
	for _, v := range rec.GetExecutionGraph().GetVertices() {
		evs = append(evs, v.Subtasks...)
	}
	printSubtasks(w, evs)
	_ = w.Flush()
}
