package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/jmserver"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestWideJobIsReadableInEveryView: a 512 -> 512 ALL_TO_ALL job (1024 executions, 262,144
// input channels; the job just under the default expanded-size limits) has a record over the
// 4 MiB message limit. GetJob answers its summary by default, refuses the full record naming
// the limit, and serves every execution in pages within the message budget; the REST view
// does the same; `jmnode job status` shows a row per vertex and, with --vertex or --all, every
// subtask. No TaskManager runs here: the job waits for slots, its graph complete.
func TestWideJobIsReadableInEveryView(t *testing.T) {
	start := time.Now()
	c := testcluster.New(t, testcluster.Options{JMs: 3})
	id := c.Submit(testcluster.WideAllToAll("wide-512", 512, 1))
	t.Logf("cluster up and job committed in %s", time.Since(start).Round(time.Millisecond))
	f := c.Follower()
	cl := c.Client(f)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	testcluster.WaitFor(t, 20*time.Second, "the job on "+f.ID, func() (bool, string) {
		_, ok := f.A.State.Job(id)
		return ok, "not applied yet"
	})
	t.Logf("applied on %s (%s)", f.ID, time.Since(start).Round(time.Millisecond))
	full := 0
	f.A.State.WithJob(id, func(rec *pb.JobRecord) {
		// As the full view and a snapshot encode it: with the channels the state derives.
		c := proto.CloneOf(rec)
		graph.MaterializeInputs(c.ExecutionGraph)
		full = proto.Size(c)
	})
	if full <= transport.ChunkedMessageLimit {
		t.Fatalf("the job's record is %d bytes: not over the %d-byte limit this test is about", full, transport.ChunkedMessageLimit)
	}

	// The summary (the default view): small, a row per vertex.
	sum, err := cl.GetJob(ctx, &pb.GetJobRequest{JobId: id})
	if err != nil {
		t.Fatal(err)
	}
	s := sum.Summary
	if s.Tasks != 1024 || len(s.Vertices) != 2 || s.Vertices[1].VertexId != "sink" || s.Vertices[1].Parallelism != 512 ||
		len(sum.Job.GetExecutionGraph().GetVertices()) != 2 || len(sum.Job.ExecutionGraph.Vertices[0].Subtasks) != 0 {
		t.Fatalf("summary: %v", s)
	}
	if n := proto.Size(sum); n > 64<<10 {
		t.Fatalf("the summary of a %d-byte job is %d bytes", full, n)
	}
	t.Logf("summary read (%s)", time.Since(start).Round(time.Millisecond))
	// The full record does not fit one message: refused, naming the limit and the way out.
	_, err = cl.GetJob(ctx, &pb.GetJobRequest{JobId: id, View: pb.JobView_JOB_VIEW_FULL})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), fmt.Sprintf("%d-byte message limit", transport.ChunkedMessageLimit)) ||
		!strings.Contains(err.Error(), "JOB_VIEW_EXECUTIONS") {
		t.Fatalf("full view: %v", err)
	}
	t.Logf("full refused (%s)", time.Since(start).Round(time.Millisecond))
	// Pages, with their inputs: every execution once, in order, each page within the budget.
	seen, pages := 0, 0
	req := &pb.GetJobRequest{JobId: id, View: pb.JobView_JOB_VIEW_EXECUTIONS}
	for {
		p, err := cl.GetJob(ctx, req)
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		if n := proto.Size(p); n > transport.ChunkBudget(0) {
			t.Fatalf("page %d is %d bytes, over the %d-byte budget", pages, n, transport.ChunkBudget(0))
		}
		for _, ev := range p.Executions {
			want := fmt.Sprintf("%s[%d]", []string{"src", "sink"}[seen/512], seen%512)
			if got := fmt.Sprintf("%s[%d]", ev.VertexId, ev.SubtaskIndex); got != want {
				t.Fatalf("page %d: %s where %s comes next", pages, got, want)
			}
			if ev.VertexId == "sink" && len(ev.Inputs) != 512 {
				t.Fatalf("%s[%d] has %d inputs", ev.VertexId, ev.SubtaskIndex, len(ev.Inputs))
			}
			seen++
		}
		pages++
		if p.NextPageToken == "" {
			break
		}
		req.PageToken = p.NextPageToken
	}
	if seen != 1024 || pages < 2 {
		t.Fatalf("%d executions in %d pages", seen, pages)
	}
	t.Logf("record %d bytes; summary %d bytes; %d pages with inputs (%s)", full, proto.Size(sum), pages, time.Since(start).Round(time.Millisecond))
	// One vertex, without inputs: one page.
	p, err := cl.GetJob(ctx, &pb.GetJobRequest{JobId: id, View: pb.JobView_JOB_VIEW_EXECUTIONS, VertexId: "sink", OmitInputs: true})
	if err != nil || len(p.Executions) != 512 || p.NextPageToken != "" || len(p.Executions[0].Inputs) != 0 {
		t.Fatalf("sink page without inputs: %d executions, next %q, %v", len(p.Executions), p.NextPageToken, err)
	}
	for _, bad := range []*pb.GetJobRequest{
		{JobId: id, View: pb.JobView_JOB_VIEW_EXECUTIONS, VertexId: "nope"},
		{JobId: id, View: pb.JobView_JOB_VIEW_EXECUTIONS, PageToken: "x"},
		{JobId: id, View: pb.JobView_JOB_VIEW_EXECUTIONS, PageSize: jmserver.MaxPageSize + 1},
	} {
		if _, err := cl.GetJob(ctx, bad); status.Code(err) != codes.NotFound && status.Code(err) != codes.InvalidArgument {
			t.Fatalf("%v: %v", bad, err)
		}
	}

	// The REST view: the same answers as JSON.
	hs := httptest.NewServer(jmserver.NewHTTPHandler(jmserver.Deps{Node: f.A.Node, State: f.A.State, JM: f.A.JM}))
	defer hs.Close()
	var rest pb.GetJobResponse
	restGet(t, hs.URL+"/api/v1/jobs/"+id, http.StatusOK, &rest)
	if rest.Summary.GetTasks() != 1024 || len(rest.Summary.Vertices) != 2 {
		t.Fatalf("REST summary: %v", rest.Summary)
	}
	restGet(t, hs.URL+"/api/v1/jobs/"+id+"?view=full", http.StatusUnprocessableEntity, nil)
	restSeen, tok := 0, ""
	for {
		var page pb.GetJobResponse
		restGet(t, hs.URL+"/api/v1/jobs/"+id+"?view=executions&omit_inputs=true&page_size=300&page_token="+tok, http.StatusOK, &page)
		restSeen += len(page.Executions)
		if tok = page.NextPageToken; tok == "" {
			break
		}
	}
	if restSeen != 1024 {
		t.Fatalf("REST pages: %d executions", restSeen)
	}
	restGet(t, hs.URL+"/api/v1/jobs/"+id+"?view=nope", http.StatusBadRequest, nil)

	t.Logf("REST views checked (%s)", time.Since(start).Round(time.Millisecond))

	// The CLI: a row per vertex by default; every subtask on request.
	addr := f.GRPCAddr
	out := captureStdout(t, func() error { return run([]string{"job", "status", id, "--addr", addr}) })
	for _, want := range []string{"1024 tasks", "src", "sink", "512", "CREATED 512"} {
		if !strings.Contains(out, want) {
			t.Fatalf("job status lacks %q:\n%s", want, out)
		}
	}
	out = captureStdout(t, func() error { return run([]string{"job", "status", id, "--all", "--addr", addr}) })
	if rows := subtaskRows(out); len(rows) != 1024 {
		t.Fatalf("job status --all: %d rows", len(rows))
	}
	out = captureStdout(t, func() error { return run([]string{"job", "status", id, "--vertex", "sink", "--json", "--addr", addr}) })
	var js struct {
		Executions []json.RawMessage `json:"executions"`
	}
	if err := json.Unmarshal([]byte(out), &js); err != nil || len(js.Executions) != 512 {
		t.Fatalf("job status --vertex sink --json: %d executions, %v", len(js.Executions), err)
	}
}

// restGet fetches url, checks the status code and decodes a GetJobResponse into out.
func restGet(t *testing.T, url string, code int, out *pb.GetJobResponse) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != code {
		t.Fatalf("GET %s: %d %s, want %d", url, resp.StatusCode, b, code)
	}
	if out != nil {
		if err := protojson.Unmarshal(b, out); err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
	}
}
