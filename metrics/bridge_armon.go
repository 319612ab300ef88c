//go:build !hashicorpmetrics

package metrics

import (
	armon "github.com/armon/go-metrics"
	armonprom "github.com/armon/go-metrics/prometheus"
	"github.com/prometheus/client_golang/prometheus"
)

// bridgeHashicorp registers a Prometheus sink for hashicorp/raft and memberlist. They emit
// through github.com/hashicorp/go-metrics/compat, which forwards to armon/go-metrics unless the
// build sets -tags hashicorpmetrics (bridge_hashicorp.go): so the sink goes where they really
// emit, armon's global metrics (a sink on hashicorp/go-metrics alone would see nothing).
func bridgeHashicorp(reg prometheus.Registerer) error {
	sink, err := armonprom.NewPrometheusSinkFrom(armonprom.PrometheusOpts{Registerer: reg, Name: "jmcluster_hashicorp_sink"})
	if err != nil {
		return err
	}
	cfg := armon.DefaultConfig("jmcluster")
	cfg.EnableHostname, cfg.EnableRuntimeMetrics, cfg.EnableServiceLabel = false, false, false
	_, err = armon.NewGlobal(cfg, sink)
	return err
}
