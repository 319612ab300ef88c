package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/jmcluster/jmcluster/internal/proccluster"
)

// scrape reads and parses a /metrics page with the Prometheus text parser.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape %s: %v", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %s", addr, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse the metrics of %s: %v", addr, err)
	}
	return fams
}

// sample is the value of the family's sample whose labels include labels (name=value
// pairs), and whether there is one: a counter's or gauge's value, a histogram's count.
func sample(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, l := range m.Label {
				found = found || (l.GetName() == labels[i] && l.GetValue() == labels[i+1])
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		case m.Summary != nil:
			return float64(m.Summary.GetSampleCount()), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		}
	}
	return 0, false
}

// TestMetricsAfterALeaderKill scrapes /metrics of every JobMaster and of TaskManagers (their
// --http-addr) with the Prometheus text parser. After a leader kill the new leader's
// reconciliation histogram counts one more, its kept-running counter grew by the job's 9
// executions, the jobs and executions gauges show the job; hashicorp/raft's metrics (bridged)
// have non-zero samples, the Go runtime's are there; each TaskManager exports its tasks by
// state (RUNNING adding up to the job's 9) and the age of its leader contact, below the
// heartbeat timeout.
func TestMetricsAfterALeaderKill(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds jmnode and runs processes")
	}
	ports, err := proccluster.FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	tmHTTP := map[string]string{}
	d := newProcessClusterOf(t, fastProcs, func(_ string, nodes []proccluster.Node) {
		for i := range nodes {
			if nodes[i].Role == proccluster.TaskManager {
				addr := ports[len(tmHTTP)]
				tmHTTP[nodes[i].Name] = addr
				nodes[i].Flags = append(append([]string(nil), nodes[i].Flags...), "--http-addr", addr)
			}
		}
	})
	rec := submitChain(t, d, "metrics", 3)
	ctx := context.Background()
	leader, err := d.waitLeader(ctx, "", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	before := map[string][2]float64{}
	for _, p := range d.JMs {
		fams := scrape(t, p.Addrs.HTTP)
		n, _ := sample(fams, "jmcluster_reconciliation_duration_seconds")
		kept, _ := sample(fams, "jmcluster_reconciled_executions_total", "outcome", "kept_running")
		before[p.Name] = [2]float64{n, kept}
	}
	if err := d.Proc(leader.LeaderId).Kill(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	now := waitReconciledAfter(t, d, leader.Epoch, []string{leader.LeaderId}, 9)
	fams := scrape(t, d.Proc(now.LeaderId).Addrs.HTTP)
	check := func(what string, got, want float64, ok bool) {
		t.Helper()
		if !ok || got != want {
			t.Fatalf("%s on the new leader %s: %v (present %v), want %v", what, now.LeaderId, got, ok, want)
		}
	}
	n, ok := sample(fams, "jmcluster_reconciliation_duration_seconds")
	check("reconciliation histogram count", n, before[now.LeaderId][0]+1, ok)
	kept, ok := sample(fams, "jmcluster_reconciled_executions_total", "outcome", "kept_running")
	check("executions kept running", kept, before[now.LeaderId][1]+9, ok)
	running, ok := sample(fams, "jmcluster_executions", "state", "RUNNING")
	check("RUNNING executions", running, float64(len(rec.GetExecutionGraph().GetVertices())*3), ok)
	jobs, ok := sample(fams, "jmcluster_jobs", "status", "RUNNING")
	check("RUNNING jobs", jobs, 1, ok)
	pendingCk, ok := sample(fams, "jmcluster_checkpoints", "status", "pending")
	check("pending checkpoints (the job is not checkpointed)", pendingCk, 0, ok)
	if e, ok := sample(fams, "jmcluster_leader_epoch"); !ok || e != float64(now.Epoch) {
		t.Fatalf("leader epoch %v, want %d", e, now.Epoch)
	}
	var raft []string
	for name, f := range fams {
		if !strings.HasPrefix(name, "jmcluster_raft_") {
			continue
		}
		for _, m := range f.Metric {
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetSummary().GetSampleCount()) + float64(m.GetHistogram().GetSampleCount())
			if v > 0 {
				raft = append(raft, name)
				break
			}
		}
	}
	if len(raft) == 0 {
		t.Fatalf("no hashicorp/raft metric with a non-zero sample among %d families", len(fams))
	}
	if g, ok := sample(fams, "go_goroutines"); !ok || g <= 0 {
		t.Fatalf("go_goroutines: %v %v", g, ok)
	}
	t.Logf("new leader %s: reconciliation count %v (was %v), kept running %v; %d raft metrics with samples, e.g. %s",
		now.LeaderId, n, before[now.LeaderId][0], kept, len(raft), raft[0])

	var tasks float64
	for name, addr := range tmHTTP {
		fams := scrape(t, addr)
		r, _ := sample(fams, "jmcluster_tm_tasks", "state", "RUNNING")
		tasks += r
		age, ok := sample(fams, "jmcluster_tm_leader_contact_age_seconds")
		if !ok || age < 0 || age > 5 { // fastProcs' --heartbeat-timeout
			t.Fatalf("%s: leader contact age %v (present %v)", name, age, ok)
		}
		if _, ok := sample(fams, "go_goroutines"); !ok {
			t.Fatalf("%s: no Go runtime metrics", name)
		}
		var in, out float64
		for _, m := range fams["jmcluster_tm_task_records_out_total"].GetMetric() {
			out += m.GetCounter().GetValue()
		}
		for _, m := range fams["jmcluster_tm_task_records_in_total"].GetMetric() {
			in += m.GetCounter().GetValue()
		}
		if in <= 0 || out <= 0 {
			t.Fatalf("%s: tasks read %v and emitted %v records", name, in, out)
		}
		t.Logf("%s: %v tasks RUNNING, leader contact %.2fs ago", name, r, age)
	}
	if tasks != 9 {
		t.Fatalf("the TaskManagers export %v RUNNING tasks, want 9", tasks)
	}
}
