package main

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestJSONLogsCarryTheEpochThroughAReconciliation: JobMasters and TaskManagers run with
// --log-format json (and debug level); after a leader kill, every line the processes wrote is
// one JSON object with a timestamp, a level and a message, and every line of the new leader's
// reconciliation (module reconcile) carries the epoch it reconciles for.
func TestJSONLogsCarryTheEpochThroughAReconciliation(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds jmnode and runs processes")
	}
	o := fastProcs
	o.JMFlags = append(slices.Clone(o.JMFlags), "--log-format", "json", "--log-level", "debug")
	o.TMFlags = append(slices.Clone(o.TMFlags), "--log-format", "json")
	d := newProcessCluster(t, o)
	submitChain(t, d, "json-logs", 3)
	leader, err := d.waitLeader(context.Background(), "", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Proc(leader.LeaderId).Kill(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	now := waitReconciledAfter(t, d, leader.Epoch, []string{leader.LeaderId}, 9)

	reconcileLines := 0
	for _, p := range d.Procs() {
		b, err := os.ReadFile(p.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		for n, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if strings.HasPrefix(line, "=== ") { // the harness's start marker
				continue
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("%s line %d is not JSON: %v\n%s", p.Name, n+1, err, line)
			}
			if m["@timestamp"] == nil || m["@level"] == nil || m["@message"] == nil {
				t.Fatalf("%s line %d lacks @timestamp, @level or @message: %s", p.Name, n+1, line)
			}
			module, _ := m["@module"].(string)
			if p.Name != now.LeaderId || !strings.HasSuffix(module, ".reconcile") {
				continue
			}
			reconcileLines++
			if e, ok := m["epoch"].(float64); !ok || e <= 0 {
				t.Fatalf("%s: a reconciliation line without the epoch: %s", p.Name, line)
			}
		}
	}
	if reconcileLines < 3 {
		t.Fatalf("%d reconciliation lines in %s's log, want the steps of its reconciliation", reconcileLines, now.LeaderId)
	}
	t.Logf("%d reconciliation lines of %s, each with its epoch; every line of %d processes is JSON", reconcileLines, now.LeaderId, len(d.Procs()))
}
