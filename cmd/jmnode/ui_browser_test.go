//go:build browser

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jmcluster/jmcluster/internal/proccluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// chromium finds the browser (make test-ui installs Debian's chromium when it is missing).
func chromium(t *testing.T) string {
	for _, n := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	t.Fatal("no chromium on PATH: make test-ui installs it (apt-get install chromium)")
	return ""
}

// TestWebUIShowsAFailover drives the embedded web UI in headless Chromium (chromedp) against
// three JobMaster and three TaskManager processes sharing a checkpoint root: the cluster page
// lists the JobMasters and TaskManagers; the job page draws the job's graph (three vertices,
// their edges, every subtask RUNNING), shows its checkpoints (a checkpoint every 500 ms: the
// counts, the last completed one, the table of the latest with 9/9 acknowledged), and a click
// on a vertex lists its subtasks with attempt, TaskManager and slot; the leader is killed, and
// the page (served by a follower, updated over server-sent events, never reloaded) shows the
// killed JobMaster unreachable within 3 s of the kill (Raft's verdict: gossip's takes longer),
// the new reconciliation's timeline with its 9 executions kept running, the killed JobMaster down,
// and the job RUNNING again with checkpoints completed by the new leader. UPDATE_SCREENSHOTS=1
// writes the pages to docs/ui-*.png.
func TestWebUIShowsAFailover(t *testing.T) {
	d := newProcessClusterOf(t, fastProcs, func(dir string, nodes []proccluster.Node) {
		for i := range nodes {
			nodes[i].Flags = append(slices.Clone(nodes[i].Flags), "--checkpoint-dir", filepath.Join(dir, "checkpoints"))
		}
	})
	rec := submitChain(t, d, "ui", 3, &pb.CheckpointConfig{IntervalMs: 500})
	id := rec.JobGraph.JobId
	leader, err := d.waitLeader(context.Background(), "", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var follower string
	for _, p := range d.JMs {
		if p.Name != leader.LeaderId {
			follower = p.Addrs.HTTP
			break
		}
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium(t)), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(1200, 900))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, 3*time.Minute)
	defer cancelT()

	// waitJS polls a JavaScript expression until it is true, or fails naming what it waited for.
	waitJS := func(what, expr string, limit time.Duration) {
		t.Helper()
		ok, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(limit), chromedp.WithPollingInterval(100*time.Millisecond)))
		if err != nil || !ok {
			body, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
			t.Fatalf("the page did not show %s within %s (%v); it shows:\n%s", what, limit, err, body)
		}
	}
	shot := func(name string) {
		t.Helper()
		if os.Getenv("UPDATE_SCREENSHOTS") == "" {
			return
		}
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("..", "..", "docs", name)
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", path)
	}

	base := "http://" + follower + "/"
	if err := chromedp.Do(ctx, chromedp.Navigate(base)); err != nil {
		t.Fatal(err)
	}
	waitJS("three JobMasters and three TaskManagers", `document.querySelectorAll('#peers tr[data-jm]').length === 3 && document.querySelectorAll('#tms tr[data-tm]').length === 3`, 30*time.Second)
	waitJS("the job in the list", fmt.Sprintf(`!!document.querySelector('#jobs a[href="#job/%s"]')`, id), 30*time.Second)

	// The job page: the graph, every subtask RUNNING.
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"#job/"+id)); err != nil {
		t.Fatal(err)
	}
	waitJS("the job graph with three vertices and two edges, all RUNNING",
		`document.querySelectorAll('#dag g.vertex').length === 3 && document.querySelectorAll('#dag path.edge').length === 2 && `+
			`[...document.querySelectorAll('#dag g.vertex')].every(g => g.textContent.includes('3 RUNNING'))`, 30*time.Second)
	waitJS("FORWARD · PIPELINED on the edges", `document.querySelector('#dag').textContent.includes('FORWARD · PIPELINED')`, 5*time.Second)
	waitJS("records per second and backpressure of every vertex (the follower asks the leader)", flowShown, 30*time.Second)
	waitJS("the checkpoints section: two completed, the last one's id, rows of 9/9 acknowledged with their alignment",
		`!document.querySelector('#checkpoints').hidden && Number(document.querySelector('#checkpoints').dataset.completed) >= 2 && `+
			`!!document.querySelector('#ck-last') && !!document.querySelector('#ck-table tr[data-status="COMPLETED"]') && `+
			`[...document.querySelectorAll('#ck-table tr[data-status="COMPLETED"]')].every(r => r.textContent.includes('9/9') && / (µs|ms|s)$/.test(r.querySelector('.ck-align').textContent))`, 30*time.Second)
	lastBefore, err := chromedp.Run(ctx, chromedp.Evaluate[int](`Number(document.querySelector('#checkpoints').dataset.lastCompleted)`))
	if err != nil {
		t.Fatal(err)
	}
	// The click is dispatched in the page, on the vertex the page holds at that moment, until
	// the subtasks show: the graph is redrawn on every update, and a click from outside
	// (chromedp.Click: query, then click the node by its id) can name a vertex just replaced
	// ("Could not find node with given id").
	waitJS("the map vertex's three subtasks with attempt, TaskManager and slot, after a click on it",
		`(() => {
			const shown = document.querySelectorAll('#subtask-table tr').length === 4 && document.querySelector('#subtask-table').textContent.includes('tm');
			const g = document.querySelector('#dag g.vertex[data-vertex="map"]');
			if (!shown && g) g.dispatchEvent(new MouseEvent('click', {bubbles: true}));
			return shown;
		})()`, 10*time.Second)
	shot("ui-job.png")

	// Back to the cluster page; kill the leader: the page follows the failover live.
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"#")); err != nil {
		t.Fatal(err)
	}
	waitJS("the cluster page", `document.querySelectorAll('#peers tr[data-jm]').length === 3`, 10*time.Second)
	if err := d.Proc(leader.LeaderId).Kill(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// Raft's verdict, not gossip's: the leader's followers (one of them serves the page) have
	// not heard from it for two heartbeat timeouts, then the new leader's heartbeats to it
	// fail. Gossip's suspicion would keep it "up" for seconds more.
	waitJS("the killed JobMaster unreachable within 3 s of the kill",
		fmt.Sprintf(`!!document.querySelector('#peers tr[data-jm="%s"] .st.unreachable')`, leader.LeaderId),
		3*time.Second-time.Since(killed))
	t.Logf("the page showed %s unreachable %s after the kill", leader.LeaderId, time.Since(killed).Round(time.Millisecond))
	if took := time.Since(killed); took > 3*time.Second {
		t.Fatalf("the killed JobMaster was shown unreachable %v after the kill, more than 3 s", took)
	}
	waitJS("the new reconciliation's timeline, 9 kept running",
		fmt.Sprintf(`[...document.querySelectorAll('.failover')].some(f => Number(f.dataset.epoch) > %d && f.textContent.includes('completed') && f.textContent.includes('9 kept running') && f.querySelectorAll('rect.report').length === 3)`, leader.Epoch),
		60*time.Second)
	waitJS("the killed JobMaster down", fmt.Sprintf(`!!document.querySelector('#peers tr[data-jm="%s"] .st.down')`, leader.LeaderId), 60*time.Second)
	t.Logf("the page showed the failover and %s down %s after the kill", leader.LeaderId, time.Since(killed).Round(time.Millisecond))
	shot("ui-failover.png")

	if err := chromedp.Do(ctx, chromedp.Navigate(base+"#job/"+id)); err != nil {
		t.Fatal(err)
	}
	waitJS("the job RUNNING again", `document.querySelector('#job-title').textContent.includes('RUNNING') && document.querySelector('#job-info').textContent.includes('9 RUNNING')`, 30*time.Second)
	waitJS("records per second and backpressure again, measured by the new leader", flowShown, 30*time.Second)
	waitJS(fmt.Sprintf("checkpoints completed after the kill (the last completed before it: %d)", lastBefore),
		fmt.Sprintf(`Number(document.querySelector('#checkpoints').dataset.lastCompleted) >= %d`, lastBefore+2), 30*time.Second)
}

// flowShown: the job page's data-flow table has a measured row per vertex of the chain with
// records per second flowing (out of the source, in and out of the map, into the sink) and a
// backpressure share, no watermark (the job has no event time), and each graph box shows its rates.
const flowShown = `(() => { const rows = Object.fromEntries([...document.querySelectorAll('#flow-table tr[data-vertex]')].map(r => [r.dataset.vertex, r]));
  const ok = id => rows[id] && rows[id].dataset.measured === 'true' && rows[id].dataset.bp !== '' && rows[id].querySelector('.flow-bp').textContent.endsWith('%');
  return ['source', 'map', 'sink'].every(ok) && Number(rows.source.dataset.out) > 0 && Number(rows.map.dataset.in) > 0 &&
    Number(rows.map.dataset.out) > 0 && Number(rows.sink.dataset.in) > 0 &&
    [...document.querySelectorAll('#flow-table tr[data-vertex]')].every(r => r.cells[4].textContent === '-') &&
    [...document.querySelectorAll('#dag g.vertex')].every(g => /in\/s · .* out\/s · bp \d+%/.test(g.textContent)); })()`
