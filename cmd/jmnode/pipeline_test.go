package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// buildNatsServer builds the NATS server demo-pipeline starts from the Go module, as the
// Makefile's bin/nats-server does, into dir.
func buildNatsServer(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "nats-server")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput(); err != nil {
		t.Fatalf("go build nats-server: %v\n%s", err, out)
	}
	return bin
}

// TestPipelineExactlyOnceThroughKills runs `jmnode demo-pipeline` as a user would, once per
// sink: a NATS server and (for postgres) a PostgreSQL server of its own, 3 JobMaster and 3
// TaskManager processes, clicks published to JetStream with known totals, the job JetStream ->
// key by user -> one-minute tumbling window -> sink, a TaskManager killed (SIGKILL) once
// output is committed and the leader killed later. The demo fails unless the job finishes and
// the sink's rows equal the published totals, each window once (the table has no unique key:
// a duplicate would be a second row; the stream's messages are counted by content and
// message id), with no dead letter, no prepared transaction left, and no credential's value
// in any log, Raft log, snapshot, job view, work directory or checkpoint.
func TestPipelineExactlyOnceThroughKills(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs NATS, PostgreSQL and a cluster of six processes through two kills")
	}
	dir := t.TempDir()
	bin := buildJmnode(t)
	nats := buildNatsServer(t, dir)
	for _, sink := range []string{"postgres", "nats"} {
		t.Run(sink, func(t *testing.T) {
			work := filepath.Join(t.TempDir(), "pipeline")
			cmd := exec.Command(bin, "demo-pipeline", "--sink", sink, "--events", "20000", "--rate", "2500",
				"--nats-server", nats, "--dir", work)
			out, err := cmd.CombinedOutput()
			text := string(out)
			if err != nil {
				keepPipelineLogs(t, work)
				t.Fatalf("jmnode demo-pipeline --sink %s: %v\n%s", sink, err, text)
			}
			for _, want := range []string{"KILLED tm", "KILLED the leader", "job FINISHED", "EQUAL: every window exactly once, no duplicate row",
				"dead letters: 0", "secrets: no credential's value in"} {
				if !strings.Contains(text, want) {
					t.Errorf("the output lacks %q", want)
				}
			}
			if sink == "postgres" && !strings.Contains(text, "pg_prepared_xacts: 0 transactions left") {
				t.Errorf("the output lacks the empty pg_prepared_xacts")
			}
			if t.Failed() {
				t.Logf("output:\n%s", text)
			}
		})
	}
}

// keepPipelineLogs copies the demo's logs where CI keeps a failed test's (JMC_TEST_LOG_DIR);
// without that directory it prints the last lines of each (the work dir is deleted with the
// test).
func keepPipelineLogs(t *testing.T, work string) {
	logs, _ := filepath.Glob(filepath.Join(work, "*.log"))
	more, _ := filepath.Glob(filepath.Join(work, "cluster", "*.log"))
	dst := os.Getenv("JMC_TEST_LOG_DIR")
	to := filepath.Join(dst, strings.ReplaceAll(t.Name(), "/", "-"))
	if dst != "" {
		_ = os.MkdirAll(to, 0o755)
	}
	for _, f := range append(logs, more...) {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if dst != "" {
			_ = os.WriteFile(filepath.Join(to, filepath.Base(f)), b, 0o644)
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		t.Logf("last lines of %s:\n%s", filepath.Base(f), strings.Join(lines[max(0, len(lines)-40):], "\n"))
	}
}
