package taskmanager_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/jmcluster/jmcluster/metrics"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// wasmSeries are a TaskManager's per-task WebAssembly counters, as its /metrics names them.
var wasmSeries = []string{
	"jmcluster_tm_task_wasm_calls_total", "jmcluster_tm_task_wasm_records_in_total", "jmcluster_tm_task_wasm_records_out_total",
	"jmcluster_tm_task_wasm_seconds_total", "jmcluster_tm_task_wasm_traps_total",
}

// wasmCounters scrapes the TaskManager's /metrics and sums each of wasmSeries over the tasks
// of job and vertex, by name; it also returns the series of other vertices it saw.
func wasmCounters(t *testing.T, url, job, vertex string) (map[string]float64, []string) {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	got, others := map[string]float64{}, []string(nil)
	for _, name := range wasmSeries {
		for _, m := range fams[name].GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["job"] != job {
				continue
			}
			if labels["vertex"] != vertex {
				others = append(others, name+"{vertex="+labels["vertex"]+"}")
				continue
			}
			got[name] += m.GetCounter().GetValue()
		}
	}
	return got, others
}

// TestWasmMetrics: a TaskManager's /metrics counts, per task of a wasm vertex, its module's
// calls, records in and out, time in the module and traps. A job of the kinds module's upper
// (MAP) has calls, records in and out and time above zero and no trap, and no such series for
// its built-in vertices, and each of its tasks its start time (jmcluster_tm_task_start_seconds);
// a job of boom fails its task, whose (retained) series count the trap.
func TestWasmMetrics(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{JMs: 1, TMs: 1, Slots: 8})
	sha := storeWasm(t, c, "kinds", "boom")
	srv := httptest.NewServer(metrics.Handler(c.TMs[0].A.Metrics.Registry()))
	defer srv.Close()

	upper := submitToLeader(t, c, wasmChain("upper", sha["kinds"], "upper", 0))
	var got map[string]float64
	testcluster.WaitFor(t, 90*time.Second, "the wasm counters of the upper job above zero", func() (bool, string) {
		var others []string
		got, others = wasmCounters(t, srv.URL, upper, "map")
		if len(others) > 0 {
			t.Fatalf("wasm series of built-in vertices: %v", others)
		}
		for _, name := range wasmSeries[:4] {
			if got[name] <= 0 {
				return false, fmt.Sprint(got)
			}
		}
		return true, ""
	})
	if got["jmcluster_tm_task_wasm_traps_total"] != 0 || got["jmcluster_tm_task_wasm_records_out_total"] > got["jmcluster_tm_task_wasm_records_in_total"] {
		t.Fatalf("upper: %v, want no trap and no more records out than in (a MAP)", got)
	}
	t.Logf("upper: %v", got)
	// Every task that runs has its start measured, and /metrics says it per task.
	for _, io := range c.TMs[0].A.TM.TaskIOs() {
		if io.JobID == upper && io.Start <= 0 {
			t.Errorf("task %s/%d runs with no start time", io.VertexID, io.Subtask)
		}
	}
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := fmt.Sprintf(`jmcluster_tm_task_start_seconds{attempt="0",job=%q,subtask="0",vertex="map"}`, upper); !strings.Contains(string(body), want) {
		t.Errorf("/metrics has no %s", want)
	}

	boom := submitToLeader(t, c, wasmChain("boom", sha["boom"], "boom", 0))
	c.WaitJob(boom, "boom FAILED", 90*time.Second, func(r *pb.JobRecord) bool { return r.GetStatus() == pb.JobStatus_JOB_STATUS_FAILED })
	testcluster.WaitFor(t, 30*time.Second, "the trap of the boom job counted", func() (bool, string) {
		got, _ = wasmCounters(t, srv.URL, boom, "map")
		return got["jmcluster_tm_task_wasm_traps_total"] == 1 && got["jmcluster_tm_task_wasm_calls_total"] >= 1, fmt.Sprint(got)
	})
	t.Logf("boom: %v", got)
}
