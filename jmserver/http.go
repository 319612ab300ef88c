package jmserver

import (
	_ "embed"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/metrics"
	"github.com/jmcluster/jmcluster/transport/pb"
)

//go:embed ui.html
var uiHTML []byte

// NewHTTPHandler serves a JM's HTTP views: /healthz (the process is up), /readyz (this node
// knows an established leader and, if it is the leader, its gate is open), /metrics
// (Prometheus text format), /api/v1/cluster, /api/v1/jobs, /api/v1/jobs/{id} and
// /api/v1/jobs/{id}/checkpoints (JSON: the job views of GetJob, see serveJobView) and the web UI at /. With TLS or tokens every view but
// /healthz, /readyz and (unless MetricsAuth) /metrics needs an operator or reader (httpauth.go).
func NewHTTPHandler(d Deps) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		cs := ClusterStatus(d)
		switch {
		case cs.LeaderGrpcAddress == "":
			http.Error(w, "no established leader", http.StatusServiceUnavailable)
		case cs.Reconciling:
			http.Error(w, "leader is reconciling", http.StatusServiceUnavailable)
		default:
			fmt.Fprintln(w, "ready")
		}
	})
	var node prometheus.Gatherer = prometheus.NewRegistry()
	if d.Metrics != nil {
		node = d.Metrics.Registry()
	}
	mux.Handle("GET /metrics", metrics.Handler(node))
	mux.HandleFunc("GET /api/v1/cluster", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, ClusterView(r.Context(), d))
	})
	mux.HandleFunc("GET /api/v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, &pb.ListJobsResponse{ServedBy: d.Node.ID(), Jobs: jobSummaries(d)})
	})
	mux.HandleFunc("GET /api/v1/events", func(w http.ResponseWriter, r *http.Request) {
		serveEvents(w, r, d)
	})
	mux.HandleFunc("GET /api/v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		serveJobView(w, r, d)
	})
	mux.HandleFunc("GET /api/v1/jobs/{id}/checkpoints", func(w http.ResponseWriter, r *http.Request) {
		serveJobView(w, r, d)
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(uiHTML)
	})
	return httpAuth(d, mux)
}

func writeJSON(w http.ResponseWriter, m proto.Message) {
	b, err := protojson.MarshalOptions{Indent: "  ", UseProtoNames: true}.Marshal(m)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}
