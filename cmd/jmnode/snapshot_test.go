package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/fsm"
)

// TestSnapshotSaveAndInspect: `jmnode snapshot save`, sent to a follower, saves the leader's
// state (a running streaming job among it) and `snapshot inspect` shows it, restoring the file
// offline; a damaged file is refused by both inspect and a JobMaster's restore.
func TestSnapshotSaveAndInspect(t *testing.T) {
	if testing.Short() {
		t.Skip("builds jmnode and runs processes")
	}
	d := newProcessCluster(t, defaultRaftProcs)
	rec := submitChain(t, d, "snap", 3)
	leader, err := d.waitLeader(context.Background(), "", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	follower := ""
	for _, p := range d.JMs {
		if p.Name != leader.LeaderId {
			follower = p.Addrs.GRPC
		}
	}
	path := filepath.Join(t.TempDir(), "state.snap")
	out := captureStdout(t, func() error { return run([]string{"snapshot", "save", path, "--addr", follower, "--timeout", "10s"}) })
	if !strings.Contains(out, "saved the state at index") || !strings.Contains(out, "from "+leader.LeaderId) {
		t.Fatalf("snapshot save: %q", out)
	}
	out = captureStdout(t, func() error { return run([]string{"snapshot", "inspect", path}) })
	id := rec.JobGraph.JobId
	if !strings.Contains(out, id) || !strings.Contains(out, "JOB_STATUS_RUNNING") {
		t.Fatalf("snapshot inspect does not show the running job %s:\n%s", id, out)
	}
	js := captureStdout(t, func() error { return run([]string{"snapshot", "inspect", path, "--json"}) })
	var s fsm.SnapshotSummary
	if err := json.Unmarshal([]byte(js), &s); err != nil {
		t.Fatalf("inspect --json: %v\n%s", err, js)
	}
	found := false
	for _, j := range s.Jobs {
		found = found || (j.ID == id && j.Running == 9 && j.Executions == 9)
	}
	if !found || s.Index == 0 || s.Epoch == 0 || s.Records["job"] != len(s.Jobs) || s.Records["header"] != 1 {
		t.Fatalf("inspect --json: %+v", s)
	}
	t.Logf("saved at index %d, epoch %d: %d jobs, %d bytes; records %v", s.Index, s.Epoch, len(s.Jobs), s.Bytes, s.Records)

	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.snap")
	if err := os.WriteFile(bad, b[:len(b)-7], 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"snapshot", "inspect", bad}); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("inspect of a truncated file: %v", err)
	}
	if err := run([]string{"snapshot", "inspect", "/etc/hostname"}); err == nil || !strings.Contains(err.Error(), "not a jmcluster snapshot") {
		t.Fatalf("inspect of another file: %v", err)
	}
}
