package jmserver

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// Job views. A wide job's record is tens of megabytes (an ALL_TO_ALL input channel per
// consumer subtask and producer), so no view copies it whole: every view reads the live record
// under the FSM's read lock (WithJob) and copies only what it answers.
const (
	// DefaultPageSize is the most subtasks of an EXECUTIONS page when the request names none,
	// and MaxPageSize the most it may name.
	DefaultPageSize = 1000
	MaxPageSize     = 10000
)

// JobView answers GetJob from this node's state (the REST view shares it): the summary by
// default, the whole record (FULL) when it fits in one message, or a page of executions.
// The summary view's vertices carry the leader's measure of their data flow (withFlow).
func JobView(ctx context.Context, d Deps, req *pb.GetJobRequest) (*pb.GetJobResponse, error) {
	if req.GetJobId() == "" {
		return nil, status.Error(codes.InvalidArgument, "job_id is required")
	}
	budget := transport.ChunkBudget(0)
	resp := &pb.GetJobResponse{ServedBy: d.Node.ID()}
	var err error
	found := d.State.WithJob(req.GetJobId(), func(rec *pb.JobRecord) {
		switch req.GetView() {
		case pb.JobView_JOB_VIEW_UNSPECIFIED, pb.JobView_JOB_VIEW_SUMMARY:
			resp.Job, resp.Summary = skeleton(rec), summarize(rec, true)
		case pb.JobView_JOB_VIEW_FULL:
			full := proto.CloneOf(rec)
			graph.MaterializeInputs(full.GetExecutionGraph()) // the state keeps no channels
			if n := proto.Size(full); n > budget {
				err = status.Errorf(codes.ResourceExhausted, "job %s is %d bytes in full, over the %d-byte message budget (the %d-byte message limit minus its margin): read it with view JOB_VIEW_EXECUTIONS, in pages",
					req.GetJobId(), n, budget, transport.ChunkedMessageLimit)
				return
			}
			resp.Job = full
		case pb.JobView_JOB_VIEW_EXECUTIONS:
			resp.Job, resp.Summary = skeleton(rec), summarize(rec, true)
			err = page(rec, req, budget-proto.Size(resp), resp)
		case pb.JobView_JOB_VIEW_CHECKPOINTS:
			resp.Job, resp.Summary = skeleton(rec), summarize(rec, true)
			resp.Checkpoints = checkpointsView(rec)
		default:
			err = status.Errorf(codes.InvalidArgument, "view %d is not a JobView", req.GetView())
		}
	})
	if !found {
		return nil, status.Errorf(codes.NotFound, "unknown job %s", req.GetJobId())
	}
	if err != nil {
		return nil, err
	}
	if resp.Checkpoints != nil {
		if s, on := d.State.CheckpointSettings(req.GetJobId()); on {
			resp.Checkpoints.Settings = &pb.CheckpointConfig{IntervalMs: s.IntervalMs, TimeoutMs: s.TimeoutMs, MaxConcurrent: int32(s.MaxConcurrent), Retained: int32(s.Retained)}
		}
	}
	resp.AppliedIndex = d.State.AppliedIndex()
	if v := req.GetView(); v == pb.JobView_JOB_VIEW_UNSPECIFIED || v == pb.JobView_JOB_VIEW_SUMMARY {
		withFlow(ctx, d, resp) // not on every page of executions: a follower asks the leader for it
	}
	if d.JM != nil && d.JM.Active() {
		if why, since := d.JM.Waiting(req.GetJobId()); why != "" {
			resp.Waiting, resp.WaitingSince = why, since.UnixMilli()
			resp.SlotTimeoutMs = max(d.JM.Config().SlotTimeout.Milliseconds(), 0)
		}
	} else if s := resp.GetSummary(); s != nil && s.Status == pb.JobStatus_JOB_STATUS_RUNNING && s.TasksRunning < s.Tasks && notFinished(s) {
		// Only the leader knows why a job waits; a job with tasks to deploy never shows RUNNING
		// without a word beside it.
		resp.Waiting = fmt.Sprintf("%d of %d tasks are not running; this node (%s) does not lead and cannot say why: ask the leader (--consistent)",
			s.Tasks-s.TasksRunning, s.Tasks, d.Node.ID())
	}
	return resp, nil
}

// notFinished reports whether some of the summary's tasks are neither running nor finished.
func notFinished(s *pb.JobSummary) bool {
	done := int32(0)
	for _, c := range s.GetStates() {
		if c.GetState() == pb.ExecutionState_EXECUTION_STATE_FINISHED || c.GetState() == pb.ExecutionState_EXECUTION_STATE_RUNNING {
			done += c.GetCount()
		}
	}
	return done < s.GetTasks()
}

// skeleton copies a record without its executions: the job graph, status, history, restarts
// and cause; the execution graph's vertices without subtasks and its results without
// partitions.
func skeleton(rec *pb.JobRecord) *pb.JobRecord {
	out := &pb.JobRecord{
		JobGraph: proto.CloneOf(rec.GetJobGraph()), Status: rec.GetStatus(), SubmittedAt: rec.GetSubmittedAt(),
		Restarts: rec.GetRestarts(), FailureCause: rec.GetFailureCause(), CreateIndex: rec.GetCreateIndex(), ModifyIndex: rec.GetModifyIndex(),
	}
	for _, h := range rec.GetHistory() {
		out.History = append(out.History, proto.CloneOf(h))
	}
	if eg := rec.GetExecutionGraph(); eg != nil {
		out.ExecutionGraph = &pb.ExecutionGraph{JobId: eg.GetJobId()}
		for _, v := range eg.GetVertices() {
			out.ExecutionGraph.Vertices = append(out.ExecutionGraph.Vertices, &pb.ExecutionJobVertex{VertexId: v.GetVertexId(), Parallelism: v.GetParallelism()})
		}
		for _, r := range eg.GetResults() {
			out.ExecutionGraph.Results = append(out.ExecutionGraph.Results, &pb.IntermediateResult{
				ResultId: r.GetResultId(), ProducerVertexId: r.GetProducerVertexId(), ConsumerVertexId: r.GetConsumerVertexId(),
				ResultType: r.GetResultType(), Distribution: r.GetDistribution(),
			})
		}
	}
	return out
}

// summarize counts a job's current executions by state, per vertex when perVertex is set
// (GetJob) and over the job always (ListJobs too). Never-deployed subtasks count as CREATED.
func summarize(rec *pb.JobRecord, perVertex bool) *pb.JobSummary {
	jg := rec.GetJobGraph()
	s := &pb.JobSummary{
		JobId: jg.GetJobId(), Name: jg.GetName(), Type: jg.GetType(), Status: rec.GetStatus(),
		SubmittedAt: rec.GetSubmittedAt(), Restarts: rec.GetRestarts(), FailureCause: rec.GetFailureCause(),
	}
	names := make(map[string]string, len(jg.GetVertices()))
	for _, v := range jg.GetVertices() {
		names[v.GetId()] = v.GetName()
	}
	total := map[pb.ExecutionState]int32{}
	for _, ejv := range rec.GetExecutionGraph().GetVertices() {
		vs := &pb.VertexSummary{VertexId: ejv.GetVertexId(), Name: names[ejv.GetVertexId()], Parallelism: ejv.GetParallelism()}
		counts := map[pb.ExecutionState]int32{}
		for _, ev := range ejv.GetSubtasks() {
			st := pb.ExecutionState_EXECUTION_STATE_CREATED
			if e := ev.GetCurrent(); e != nil {
				st = e.GetState()
				if e.GetAttemptNumber() > 0 {
					vs.AttemptsChanged++
				}
				vs.MaxAttemptNumber = max(vs.MaxAttemptNumber, e.GetAttemptNumber())
			}
			counts[st]++
			total[st]++
			s.Tasks++
			if st == pb.ExecutionState_EXECUTION_STATE_RUNNING {
				s.TasksRunning++
			}
		}
		s.AttemptsChanged += vs.AttemptsChanged
		if perVertex {
			vs.States = stateCounts(counts)
			s.Vertices = append(s.Vertices, vs)
		}
	}
	s.States = stateCounts(total)
	if cp := rec.GetCheckpoints(); cp != nil {
		s.Checkpoints = &pb.CheckpointCounts{Pending: int32(len(cp.GetPending())), Completed: cp.GetCompletedCount(), Aborted: cp.GetAbortedCount()}
		if done := cp.GetCompleted(); len(done) > 0 {
			s.Checkpoints.LatestCompletedId = done[len(done)-1].GetId()
		}
	}
	return s
}

// checkpointsView lists a job's checkpoints, by id, without their acknowledgements.
func checkpointsView(rec *pb.JobRecord) *pb.JobCheckpointsView {
	cp := rec.GetCheckpoints()
	v := &pb.JobCheckpointsView{NextCheckpointId: max(cp.GetNextCheckpointId(), 1), CompletedCount: cp.GetCompletedCount(), AbortedCount: cp.GetAbortedCount()}
	tasks := int32(0)
	for _, ejv := range rec.GetExecutionGraph().GetVertices() {
		tasks += int32(len(ejv.GetSubtasks()))
	}
	add := func(list []*pb.CheckpointRecord) {
		for _, ck := range list {
			row := &pb.CheckpointRow{Id: ck.GetId(), Status: ck.GetStatus(), Epoch: ck.GetEpoch(), TriggerUnixMs: ck.GetTriggerUnixMs(),
				Acknowledged: int32(len(ck.GetAcks())), Tasks: tasks, AbortReason: ck.GetAbortReason()}
			switch ck.GetStatus() {
			case pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED:
				row.EndUnixMs = ck.GetCompleteUnixMs()
			case pb.CheckpointStatus_CHECKPOINT_STATUS_ABORTED:
				row.EndUnixMs, row.Acknowledged = ck.GetAbortUnixMs(), ck.GetAcknowledged()
			}
			for _, a := range ck.GetAcks() {
				row.StateSizeBytes += a.GetStateSizeBytes()
				row.MaxAlignmentUs = max(row.MaxAlignmentUs, a.GetAlignmentUs())
			}
			v.Checkpoints = append(v.Checkpoints, row)
		}
	}
	add(cp.GetPending())
	add(cp.GetCompleted())
	add(cp.GetAborted())
	slices.SortFunc(v.Checkpoints, func(a, b *pb.CheckpointRow) int { return cmp.Compare(a.Id, b.Id) })
	return v
}

// stateCounts lists the non-zero counts in ascending state order (the enum is contiguous).
func stateCounts(m map[pb.ExecutionState]int32) []*pb.StateCount {
	var out []*pb.StateCount
	for st := pb.ExecutionState(0); int(st) < len(pb.ExecutionState_name); st++ {
		if n := m[st]; n > 0 {
			out = append(out, &pb.StateCount{State: st, Count: n})
		}
	}
	return out
}

// pageToken is where a page starts: a vertex's position in the execution graph and a subtask
// position in it. Opaque to clients ("<vertex>:<subtask>").
type pageToken struct{ vertex, subtask int }

func parsePageToken(s string) (pageToken, error) {
	if s == "" {
		return pageToken{}, nil
	}
	a, b, ok := strings.Cut(s, ":")
	v, err1 := strconv.Atoi(a)
	st, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || v < 0 || st < 0 {
		return pageToken{}, status.Errorf(codes.InvalidArgument, "page_token %q is not a token this server gave out", s)
	}
	return pageToken{v, st}, nil
}

func (p pageToken) String() string { return fmt.Sprintf("%d:%d", p.vertex, p.subtask) }

// page fills resp.Executions from the token on, within page_size subtasks and budget bytes,
// and sets next_page_token unless the page reached the end.
func page(rec *pb.JobRecord, req *pb.GetJobRequest, budget int, resp *pb.GetJobResponse) error {
	size := int(req.GetPageSize())
	switch {
	case size < 0 || size > MaxPageSize:
		return status.Errorf(codes.InvalidArgument, "page_size %d is outside [0, %d] (MaxPageSize)", size, MaxPageSize)
	case size == 0:
		size = DefaultPageSize
	}
	tok, err := parsePageToken(req.GetPageToken())
	if err != nil {
		return err
	}
	vertices := rec.GetExecutionGraph().GetVertices()
	if v := req.GetVertexId(); v != "" {
		found := false
		for _, ejv := range vertices {
			found = found || ejv.GetVertexId() == v
		}
		if !found {
			return status.Errorf(codes.NotFound, "job %s has no vertex %q", req.GetJobId(), v)
		}
	}
	used := 0
	for vi := tok.vertex; vi < len(vertices); vi++ {
		ejv := vertices[vi]
		if v := req.GetVertexId(); v != "" && ejv.GetVertexId() != v {
			continue
		}
		first := 0
		if vi == tok.vertex {
			first = tok.subtask
		}
		for si := first; si < len(ejv.GetSubtasks()); si++ {
			next := pageToken{vi, si}
			if len(resp.Executions) >= size {
				resp.NextPageToken = next.String()
				return nil
			}
			ev := pageVertex(rec.GetExecutionGraph(), ejv.GetSubtasks()[si], req.GetOmitInputs())
			n := protowire.SizeTag(5) + protowire.SizeBytes(proto.Size(ev))
			if used+n > budget {
				if len(resp.Executions) == 0 {
					return status.Errorf(codes.ResourceExhausted, "%s[%d] is %d bytes, over the page budget of %d bytes (the %d-byte message limit minus its margin and the summary): ask with omit_inputs",
						ev.GetVertexId(), ev.GetSubtaskIndex(), n, budget, transport.ChunkedMessageLimit)
				}
				resp.NextPageToken = next.String()
				return nil
			}
			used += n
			resp.Executions = append(resp.Executions, ev)
		}
	}
	return nil
}

// pageVertex copies one ExecutionVertex of eg for a page, with its input channels
// (graph.Inputs) unless asked not to.
func pageVertex(eg *pb.ExecutionGraph, ev *pb.ExecutionVertex, omitInputs bool) *pb.ExecutionVertex {
	out := &pb.ExecutionVertex{VertexId: ev.GetVertexId(), SubtaskIndex: ev.GetSubtaskIndex(), Current: proto.CloneOf(ev.GetCurrent())}
	for _, h := range ev.GetHistory() {
		out.History = append(out.History, proto.CloneOf(h))
	}
	if !omitInputs {
		out.Inputs = graph.Inputs(eg, ev)
	}
	return out
}

// jobSummaries lists every job's summary without copying any record (ListJobs, REST list).
func jobSummaries(d Deps) []*pb.JobSummary {
	var out []*pb.JobSummary
	for _, id := range d.State.JobIDs() {
		d.State.WithJob(id, func(rec *pb.JobRecord) { out = append(out, summarize(rec, false)) })
	}
	return out
}

// slotsUsed counts, per TM, the slots holding a non-terminal current execution of any job (a
// slot shared by several executions of one region counts once): the FSM keeps the count as it
// applies, so ClusterStatus, which every TaskManager that lost its leader asks of each
// JobMaster while a new leader reconciles, costs the TMs, not the executions.
func slotsUsed(d Deps) map[string]int32 { return d.State.SlotsUsed() }

// serveJobView is GET /api/v1/jobs/{id}: GetJob's answer as JSON. Query parameters: view
// (summary, the default; full; executions; checkpoints), and for executions vertex,
// page_token, page_size and omit_inputs (true or 1). GET /api/v1/jobs/{id}/checkpoints is the
// checkpoints view. Errors carry the HTTP status of their gRPC code.
func serveJobView(w http.ResponseWriter, r *http.Request, d Deps) {
	q := r.URL.Query()
	req := &pb.GetJobRequest{JobId: r.PathValue("id"), VertexId: q.Get("vertex"), PageToken: q.Get("page_token")}
	switch v := strings.ToLower(q.Get("view")); v {
	case "", "summary":
		req.View = pb.JobView_JOB_VIEW_SUMMARY
	case "full":
		req.View = pb.JobView_JOB_VIEW_FULL
	case "executions":
		req.View = pb.JobView_JOB_VIEW_EXECUTIONS
	case "checkpoints":
		req.View = pb.JobView_JOB_VIEW_CHECKPOINTS
	default:
		http.Error(w, fmt.Sprintf("view %q: want summary, full, executions or checkpoints", v), http.StatusBadRequest)
		return
	}
	if strings.HasSuffix(r.URL.Path, "/checkpoints") {
		req.View = pb.JobView_JOB_VIEW_CHECKPOINTS
	}
	if s := q.Get("page_size"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			http.Error(w, fmt.Sprintf("page_size %q is not a number", s), http.StatusBadRequest)
			return
		}
		req.PageSize = int32(min(max(n, -1), MaxPageSize+1))
	}
	switch s := q.Get("omit_inputs"); s {
	case "", "false", "0":
	case "true", "1":
		req.OmitInputs = true
	default:
		http.Error(w, fmt.Sprintf("omit_inputs %q: want true or false", s), http.StatusBadRequest)
		return
	}
	resp, err := JobView(r.Context(), d, req)
	if err != nil {
		st := status.Convert(err)
		code := http.StatusInternalServerError
		switch st.Code() {
		case codes.NotFound:
			code = http.StatusNotFound
		case codes.InvalidArgument:
			code = http.StatusBadRequest
		case codes.ResourceExhausted:
			code = http.StatusUnprocessableEntity
		}
		http.Error(w, st.Message(), code)
		return
	}
	writeJSON(w, resp)
}
