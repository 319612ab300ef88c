//go:build browser

package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/jmcluster/jmcluster/examples"
	"github.com/jmcluster/jmcluster/internal/proccluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestWebUIShowsAWindowJob: the example clicks-per-user-minute job (seeded JSON events, event
// time with bounded disorder, keyed by user, one-minute tumbling windows) on three jmnode
// processes, its events starting at the wall clock. The job page's data flow shows records
// per second in and out of every vertex, backpressure, a watermark that advances, its lag
// behind the wall clock, and the dead letters (none).
func TestWebUIShowsAWindowJob(t *testing.T) {
	d := newProcessClusterOf(t, fastProcs, func(dir string, nodes []proccluster.Node) {
		for i := range nodes {
			nodes[i].Flags = append(slices.Clone(nodes[i].Flags), "--checkpoint-dir", filepath.Join(dir, "checkpoints"))
		}
	})
	b, err := examples.Specs.ReadFile("clicks-per-user-minute.json")
	if err != nil {
		t.Fatal(err)
	}
	var jg pb.JobGraph
	if err := protojson.Unmarshal(b, &jg); err != nil {
		t.Fatal(err)
	}
	jg.JobId = newJobID()
	for _, v := range jg.GetVertices() {
		if g := v.GetOperator().GetEventGenerator(); g != nil {
			g.StartMs = time.Now().UnixMilli() // event time near the wall clock: a lag of seconds
		}
	}
	ctx := context.Background()
	leader, err := d.waitLeader(ctx, "", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.waitTMs(ctx, 30*time.Second, 3, 0); err != nil {
		t.Fatal(err)
	}
	lc := d.client(leader.LeaderGrpcAddress)
	defer lc.cc.Close()
	if err := lc.call(15*time.Second, func(ctx context.Context) error {
		_, err := lc.client().SubmitJob(ctx, &pb.SubmitJobRequest{JobGraph: &jg})
		return err
	}); err != nil {
		t.Fatalf("submit: %v", err)
	}
	if _, err := d.waitJob(ctx, jg.JobId, 60*time.Second, allRunning); err != nil {
		t.Fatal(err)
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium(t)), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(1200, 900))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	bctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancel()
	bctx, cancelT := context.WithTimeout(bctx, 2*time.Minute)
	defer cancelT()
	waitJS := func(what, expr string, limit time.Duration) {
		t.Helper()
		ok, err := chromedp.Run(bctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(limit), chromedp.WithPollingInterval(100*time.Millisecond)))
		if err != nil || !ok {
			body, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.body.innerText`))
			t.Fatalf("the page did not show %s within %s (%v); it shows:\n%s", what, limit, err, body)
		}
	}
	if err := chromedp.Do(bctx, chromedp.Navigate("http://"+d.JMs[0].Addrs.HTTP+"/#job/"+jg.JobId)); err != nil {
		t.Fatal(err)
	}
	var vertices []string
	for _, v := range jg.GetVertices() {
		vertices = append(vertices, v.GetId())
	}
	waitJS("records per second and backpressure of every vertex, a watermark and its lag downstream of the source",
		windowFlowShown(vertices), 60*time.Second)
	first, err := chromedp.Run(bctx, chromedp.Evaluate[float64](`Number(document.querySelector('#flow-table tr[data-vertex="per-minute"]').dataset.wm)`))
	if err != nil {
		t.Fatal(err)
	}
	waitJS(fmt.Sprintf("the window's watermark advancing past %d", int64(first)),
		fmt.Sprintf(`Number(document.querySelector('#flow-table tr[data-vertex="per-minute"]').dataset.wm) > %d`, int64(first)), 30*time.Second)
}

// windowFlowShown: every vertex of the example measured with its backpressure; records flowing
// out of the source ("clicks") and into the key_by and the window ("per-minute"; its results
// come once a minute of event time, so the sink may see none yet); the window shows a
// watermark and its lag; the key_by sent no dead letter.
func windowFlowShown(vertices []string) string {
	return fmt.Sprintf(`(() => { const rows = Object.fromEntries([...document.querySelectorAll('#flow-table tr[data-vertex]')].map(r => [r.dataset.vertex, r]));
  const vs = %q.split(',');
  const ok = id => rows[id] && rows[id].dataset.measured === 'true' && rows[id].dataset.bp !== '' && rows[id].querySelector('.flow-bp').textContent.endsWith('%%');
  const w = rows['per-minute'];
  return vs.every(ok) && Number(rows.clicks.dataset.out) > 0 && Number(rows['by-user'].dataset.in) > 0 && Number(w.dataset.in) > 0 &&
    Number(w.dataset.wm) > 0 && w.cells[4].textContent !== '-' && w.cells[5].textContent.endsWith(' ms') &&
    rows['by-user'].cells[6].textContent === '0'; })()`, strings.Join(vertices, ","))
}
