package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/agent"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

func TestLoadJobFileNamesTheField(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"name": "x", "vertices": [{"id": "a", "paralelism": 2}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadJobFile(bad)
	if err == nil || !strings.Contains(err.Error(), "paralelism") || !strings.Contains(err.Error(), bad) {
		t.Fatalf("want an error naming the file and the unknown field, got %v", err)
	}
	wrongType := filepath.Join(dir, "type.json")
	if err := os.WriteFile(wrongType, []byte(`{"name": "x", "type": "JOB_TYPE_NOPE"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadJobFile(wrongType); err == nil || !strings.Contains(err.Error(), "JOB_TYPE_NOPE") {
		t.Fatalf("want an error naming the bad enum value, got %v", err)
	}
	for _, f := range []string{"../../examples/streaming-checksum.json", "../../examples/batch-wordsum.json", "../../examples/invalid.json"} {
		if _, err := LoadJobFile(f); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
}

func TestUnreachableClusterNamesTheAddress(t *testing.T) {
	addr := testcluster.FreePorts(t, 1)[0] // nothing listens there
	err := runCLI([]string{"job", "list", "--addr", addr, "--timeout", "300ms"})
	if err == nil || !strings.Contains(err.Error(), addr) {
		t.Fatalf("want an error naming %s, got %v", addr, err)
	}
}

func TestFlagPrecedence(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "c.json")
	if err := os.WriteFile(cfg, []byte(`{"id": "from-file", "slots": 7, "jm": ["a:1", "b:2"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("JMNODE_SLOTS", "5")
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	id := fs.String("id", "", "")
	slots := fs.Int("slots", 1, "")
	jm := fs.String("jm", "", "")
	grace := fs.Duration("leader-grace", time.Minute, "")
	if err := parseFlags(fs, []string{"--config", cfg, "--leader-grace", "2m"}); err != nil {
		t.Fatal(err)
	}
	if *id != "from-file" || *slots != 5 || *jm != "a:1,b:2" || *grace != 2*time.Minute {
		t.Fatalf("id=%q slots=%d jm=%q grace=%s: want file id, env slots, file list, flag grace", *id, *slots, *jm, *grace)
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`{"nope": 1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	fs2 := flag.NewFlagSet("y", flag.ContinueOnError)
	fs2.String("id", "", "")
	if err := parseFlags(fs2, []string{"--config", bad}); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("want an unknown-key error, got %v", err)
	}
}

// TestCLIAgainstACluster runs the operator commands against a real in-process cluster.
func TestCLIAgainstACluster(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{JMs: 3, TMs: 2})
	addr := c.Follower().GRPCAddr
	out := captureStdout(t, func() error {
		return run([]string{"job", "submit", "../../examples/batch-wordsum.json", "--wait", "--addr", addr})
	})
	if !strings.Contains(out, "submitted job") || !strings.Contains(out, "FINISHED") {
		t.Fatalf("submit --wait output:\n%s", out)
	}
	id := strings.Fields(strings.SplitN(out, "submitted job ", 2)[1])[0]
	// By default a row per vertex; subtasks with --vertex (an id or a name) or --all.
	out = captureStdout(t, func() error { return run([]string{"job", "status", id, "--consistent", "--addr", addr}) })
	for _, want := range []string{"VERTEX", "PARALLELISM", "STATES", "source", "sink", "FINISHED 2", "attempts changed"} {
		if !strings.Contains(out, want) {
			t.Fatalf("job status lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "ATTEMPT ID") {
		t.Fatalf("job status lists subtasks without --vertex or --all:\n%s", out)
	}
	out = captureStdout(t, func() error { return run([]string{"job", "status", id, "--vertex", "checksum sink", "--addr", addr}) })
	if rows := subtaskRows(out); len(rows) != 2 || !strings.HasPrefix(rows[0], "sink ") || !strings.Contains(rows[1], "FINISHED") || !strings.Contains(rows[1], "tm") {
		t.Fatalf("job status --vertex 'checksum sink': rows %q\n%s", rows, out)
	}
	out = captureStdout(t, func() error { return run([]string{"job", "status", id, "--all", "--addr", addr}) })
	if rows := subtaskRows(out); len(rows) != 6 || !strings.HasPrefix(rows[0], "source ") || !strings.HasPrefix(rows[5], "sink ") {
		t.Fatalf("job status --all: rows %q\n%s", rows, out)
	}
	if err := runCLI([]string{"job", "status", id, "--vertex", "nope", "--addr", addr}); err == nil || !strings.Contains(err.Error(), `no vertex "nope"`) {
		t.Fatalf("job status --vertex nope: %v", err)
	}
	out = captureStdout(t, func() error { return run([]string{"job", "list", "--json", "--consistent", "--addr", addr}) })
	if !strings.Contains(out, id) || !strings.Contains(out, "JOB_STATUS_FINISHED") {
		t.Fatalf("job list --json:\n%s", out)
	}
	out = captureStdout(t, func() error { return run([]string{"raft", "peers", "--addr", addr}) })
	if strings.Count(out, "voter") < 3 || !strings.Contains(out, "true") {
		t.Fatalf("raft peers:\n%s", out)
	}
	out = captureStdout(t, func() error { return run([]string{"members", "--addr", addr}) })
	if !strings.Contains(out, "taskmanager") || !strings.Contains(out, "jobmaster") {
		t.Fatalf("members:\n%s", out)
	}
	out = captureStdout(t, func() error { return run([]string{"status", "--addr", addr}) })
	if !strings.Contains(out, "leader") || !strings.Contains(out, "tm1") {
		t.Fatalf("status:\n%s", out)
	}
	err := runCLI([]string{"job", "submit", "../../examples/invalid.json", "--addr", addr})
	if err == nil || !strings.Contains(err.Error(), "InvalidArgument") || !strings.Contains(err.Error(), "parallelism") {
		t.Fatalf("invalid job: %v", err)
	}
	err = runCLI([]string{"job", "status", "0123456789abcdef0123456789abcdef", "--addr", addr})
	if err == nil || !strings.Contains(err.Error(), "unknown job") {
		t.Fatalf("unknown job: %v", err)
	}
	// A streaming job, then cancel.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err2 := c.Client(c.Leader()).SubmitJob(ctx, &pb.SubmitJobRequest{JobGraph: testcluster.StreamingChain("s", 1, 10, 0)})
	if err2 != nil {
		t.Fatal(err2)
	}
	c.WaitJob(resp.JobId, "streaming job running", 20*time.Second, testcluster.AllRunning)
	out = captureStdout(t, func() error { return run([]string{"job", "cancel", resp.JobId, "--addr", addr}) })
	if !strings.Contains(out, "CANCEL") {
		t.Fatalf("cancel: %s", out)
	}
	c.WaitJob(resp.JobId, "job canceled", 20*time.Second, func(r *pb.JobRecord) bool { return r.Status == pb.JobStatus_JOB_STATUS_CANCELED })
}

// subtaskRows returns the rows of the subtask table of `job status --vertex/--all`.
func subtaskRows(out string) []string {
	_, table, ok := strings.Cut(out, "ATTEMPT ID")
	if !ok {
		return nil
	}
	var rows []string
	for _, l := range strings.Split(table, "\n")[1:] {
		if l == "" || strings.HasPrefix(l, "(served by") {
			break
		}
		rows = append(rows, l)
	}
	return rows
}

// stdoutMu is held while a command runs in the test process (captureStdout, runCLI): commands
// print to os.Stdout, which captureStdout replaces for the whole process, and tests run in
// parallel.
var stdoutMu sync.Mutex

// runCLI runs a jmnode command in the test process; what it prints goes to the test's output.
func runCLI(args []string) error {
	stdoutMu.Lock()
	defer stdoutMu.Unlock()
	return run(args)
}

// captureStdout returns what fn, which calls run, prints; the test fails if fn does.
func captureStdout(t *testing.T, fn func() error) string {
	t.Helper()
	stdoutMu.Lock()
	defer stdoutMu.Unlock()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() {
		b := new(strings.Builder)
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		done <- b.String()
	}()
	ferr := fn()
	os.Stdout = old
	w.Close()
	out := <-done
	if ferr != nil {
		t.Fatalf("command failed: %v\noutput:\n%s", ferr, out)
	}
	return out
}

// TestIsolationTimingsRefusedAtStart: a JobMaster whose redeploy delay (--heartbeat-timeout)
// does not exceed what the TaskManagers' fence timeout and pool timings need refuses to start,
// naming every term; the defaults start.
func TestIsolationTimingsRefusedAtStart(t *testing.T) {
	ports := testcluster.FreePorts(t, 2)
	err := runCLI([]string{"jobmaster", "--id", "jm1", "--data-dir", t.TempDir(), "--raft-addr", ports[0], "--grpc-addr", ports[1],
		"--heartbeat-timeout", "8s", "--fence-timeout", "5s"})
	for _, want := range []string{"--heartbeat-timeout 8s", "fence timeout 5s", "heartbeat interval 1s", "pool query timeout", "pool query interval", "--fence-timeout"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("want an error naming %q, got %v", want, err)
		}
	}
}

// TestCLIJobCheckpoints: `job submit --checkpoint-interval` checkpoints a spec's job; `job
// checkpoints` lists its checkpoints (table and --json), `job status` counts them, and the REST
// view /api/v1/jobs/{id}/checkpoints answers the same.
func TestCLIJobCheckpoints(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{JMs: 3, TMs: 3, Checkpoints: true, JM: func(cfg *agent.JobMasterConfig) { cfg.HTTPAddr = "127.0.0.1:0" }})
	addr := c.Follower().GRPCAddr
	out := captureStdout(t, func() error {
		return run([]string{"job", "submit", "../../examples/streaming-checksum.json", "--checkpoint-interval", "100ms", "--wait", "--addr", addr})
	})
	id := strings.Fields(strings.SplitN(out, "submitted job ", 2)[1])[0]
	testcluster.WaitFor(t, 30*time.Second, "two checkpoints completed", func() (bool, string) {
		cp, _ := c.Leader().A.State.Checkpoints(id)
		return cp.GetCompletedCount() >= 2, fmt.Sprint(cp)
	})
	out = captureStdout(t, func() error { return run([]string{"job", "checkpoints", id, "--consistent", "--addr", addr}) })
	for _, want := range []string{"every 100ms, timeout 10m0s, at most 1 pending, 1 retained", "ID", "STATUS", "TRIGGERED", "DURATION", "SIZE", "ALIGNMENT", "ACKNOWLEDGED", "COMPLETED", "9/9"} {
		if !strings.Contains(out, want) {
			t.Fatalf("job checkpoints lacks %q:\n%s", want, out)
		}
	}
	t.Logf("job checkpoints:\n%s", out)
	out = captureStdout(t, func() error { return run([]string{"job", "checkpoints", id, "--json", "--addr", addr}) })
	if !strings.Contains(out, "CHECKPOINT_STATUS_COMPLETED") || !strings.Contains(out, `"state_size_bytes"`) {
		t.Fatalf("job checkpoints --json:\n%s", out)
	}
	out = captureStdout(t, func() error { return run([]string{"job", "status", id, "--addr", addr}) })
	if !strings.Contains(out, "checkpoints: ") || !strings.Contains(out, "completed (latest ") {
		t.Fatalf("job status lacks the checkpoint counts:\n%s", out)
	}
	resp, err := http.Get("http://" + c.Follower().A.HTTPAddr() + "/api/v1/jobs/" + id + "/checkpoints")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "CHECKPOINT_STATUS_COMPLETED") || !strings.Contains(string(body), `"next_checkpoint_id"`) {
		t.Fatalf("GET /api/v1/jobs/%s/checkpoints: %s\n%s", id, resp.Status, body)
	}
}
