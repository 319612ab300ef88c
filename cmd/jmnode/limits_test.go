package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/agent"
	"github.com/jmcluster/jmcluster/cluster"
	"github.com/jmcluster/jmcluster/jmserver"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
)

// TestCLINamesTheLimits: `jmnode job submit` of a job over the message limit fails at once with
// the limit and the flag named — the CLI's own limit, or with a larger --max-message-size the
// JobMaster's; a submission over the write rate limit is retried after the JobMaster's
// retry-after within --timeout, and reported with the limit named when the timeout is shorter.
func TestCLINamesTheLimits(t *testing.T) {
	// Not parallel: the third submission must come within the 2 s the rate limit's token takes.
	c := testcluster.New(t, testcluster.Options{JMs: 3,
		Raft: func(cc *cluster.Config) {
			cc.HeartbeatTimeout, cc.ElectionTimeout, cc.LeaderLeaseTimeout = time.Second, time.Second, 500*time.Millisecond
		},
		JM: func(cfg *agent.JobMasterConfig) { cfg.WriteLimit = jmserver.WriteLimit{Rate: 0.5, Burst: 1} }})
	addr := c.Follower().GRPCAddr
	huge := filepath.Join(t.TempDir(), "huge.json")
	spec := fmt.Sprintf(`{"name": %q, "vertices": [{"id": "a", "parallelism": 1}]}`, strings.Repeat("x", 5<<20))
	if err := os.WriteFile(huge, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	err := runCLI([]string{"job", "submit", huge, "--addr", addr})
	if want := "is over the jmnode client's message limit of 4194304 bytes (--max-message-size)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("oversized job: want %q, got %v", want, err)
	}
	err = runCLI([]string{"job", "submit", huge, "--addr", addr, "--max-message-size", "16777216"})
	if want := "is over the JobMaster's message limit of 4194304 bytes (--max-message-size)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("oversized job with a larger client limit: want %q, got %v", want, err)
	}

	job := "../../examples/batch-wordsum.json"
	captureStdout(t, func() error { return run([]string{"job", "submit", job, "--addr", addr}) }) // takes the one token
	start := time.Now()
	out := captureStdout(t, func() error { return run([]string{"job", "submit", job, "--addr", addr}) })
	if !strings.Contains(out, "submitted job") {
		t.Fatalf("a rate-limited submission was not retried to success: %s", out)
	}
	t.Logf("the rate-limited submission succeeded after %s", time.Since(start))
	err = runCLI([]string{"job", "submit", job, "--addr", addr, "--timeout", "300ms"})
	want := "is over the write rate limit of 0.5 per second, burst 1 (--client-write-rate, --client-write-burst); retry after"
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "ResourceExhausted") {
		t.Fatalf("rate-limited submission with a short timeout: want %q, got %v", want, err)
	}
	t.Logf("CLI error: %v", err)
}
