// Package metrics is jmcluster's Prometheus instrumentation, on prometheus/client_golang: a
// process registry with the Go runtime and process collectors and hashicorp's own metrics
// (Raft and memberlist) bridged in, and the instruments of a JobMaster and of a TaskManager.
// Every gauge is read from counts the components keep as they change (the FSM's Counts, the
// registry, the outbox): a scrape never walks the jobs' executions.
package metrics

import (
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Namespace prefixes every jmcluster metric.
const Namespace = "jmcluster"

var (
	processOnce sync.Once
	processReg  *prometheus.Registry
	processErr  error
)

// Process returns the process-wide registry: the Go runtime and process collectors, and the
// sink hashicorp/raft and memberlist emit to (bridge_*.go). There is one per process, whatever
// number of nodes it runs (tests run several): those metrics are the process's.
func Process() (*prometheus.Registry, error) {
	processOnce.Do(func() {
		processReg = prometheus.NewRegistry()
		processReg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		processErr = bridgeHashicorp(processReg)
	})
	return processReg, processErr
}

// Handler serves the process registry and the node's in the Prometheus text format. A
// collector that fails is reported in the response and the others are still served.
func Handler(node prometheus.Gatherer) http.Handler {
	gs := prometheus.Gatherers{node}
	if p, err := Process(); err == nil {
		gs = append(prometheus.Gatherers{p}, gs...)
	}
	return promhttp.HandlerFor(gs, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Seconds are the buckets of the latency histograms: 1 ms to about 65 s.
var Seconds = prometheus.ExponentialBuckets(0.001, 2, 17)
