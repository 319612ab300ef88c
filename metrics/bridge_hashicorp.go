//go:build hashicorpmetrics

package metrics

import (
	hmetrics "github.com/hashicorp/go-metrics"
	hprom "github.com/hashicorp/go-metrics/prometheus"
	"github.com/prometheus/client_golang/prometheus"
)

// bridgeHashicorp: built with -tags hashicorpmetrics, go-metrics/compat forwards raft's and
// memberlist's metrics to hashicorp/go-metrics, so the sink goes there.
func bridgeHashicorp(reg prometheus.Registerer) error {
	sink, err := hprom.NewPrometheusSinkFrom(hprom.PrometheusOpts{Registerer: reg, Name: "jmcluster_hashicorp_sink"})
	if err != nil {
		return err
	}
	cfg := hmetrics.DefaultConfig("jmcluster")
	cfg.EnableHostname, cfg.EnableRuntimeMetrics, cfg.EnableServiceLabel = false, false, false
	_, err = hmetrics.NewGlobal(cfg, sink)
	return err
}
