package server

import (
	_ "embed"
	"fmt"
	"net/http"
	"sort"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/transport/pb"
)

//go:embed ui.html
var uiHTML []byte

// NewHTTPHandler serves a JM's HTTP views: /healthz (the process is up), /readyz (this node
// knows an established leader and, if it is the leader, its gate is open), /metrics
// (Prometheus text format), /api/v1/cluster, /api/v1/jobs, /api/v1/jobs/{id} (JSON: the job
// views of GetJob, see serveJobView) and the web UI at /. With TLS or tokens every view but
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
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		writeMetrics(w, d)
	})
	mux.HandleFunc("GET /api/v1/cluster", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, ClusterStatus(d))
	})
	mux.HandleFunc("GET /api/v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, &pb.ListJobsResponse{ServedBy: d.Node.ID(), Jobs: jobSummaries(d)})
	})
	mux.HandleFunc("GET /api/v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
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

// writeMetrics renders the node's gauges and counters in the Prometheus text format. The
// values are computed from the replicated state at scrape time, so every replica exports the
// same job metrics and its own Raft metrics.
func writeMetrics(w http.ResponseWriter, d Deps) {
	cs := ClusterStatus(d)
	gauge := func(name, help string) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name)
	}
	b2i := func(b bool) int {
		if b {
			return 1
		}
		return 0
	}
	gauge("jmcluster_leader", "1 when this node is the Raft leader.")
	fmt.Fprintf(w, "jmcluster_leader{node=%q} %d\n", cs.NodeId, b2i(cs.LeaderId == cs.NodeId))
	gauge("jmcluster_leader_epoch", "The committed leader epoch.")
	fmt.Fprintf(w, "jmcluster_leader_epoch %d\n", cs.Epoch)
	gauge("jmcluster_reconciling", "1 while the leader reconciles (RPC gate closed).")
	fmt.Fprintf(w, "jmcluster_reconciling %d\n", b2i(cs.Reconciling))
	gauge("jmcluster_raft_applied_index", "Raft applied index of this node.")
	fmt.Fprintf(w, "jmcluster_raft_applied_index %d\n", cs.AppliedIndex)
	gauge("jmcluster_raft_commit_index", "Raft commit index of this node.")
	fmt.Fprintf(w, "jmcluster_raft_commit_index %d\n", cs.CommitIndex)
	gauge("jmcluster_task_managers", "Task managers known, by state.")
	tms := map[string]int{}
	for _, tm := range cs.TaskManagers {
		tms[tm.State]++
	}
	for _, k := range sortedKeys(tms) {
		fmt.Fprintf(w, "jmcluster_task_managers{state=%q} %d\n", k, tms[k])
	}
	jobs := map[string]int{}
	execs := map[string]int{}
	restarts := 0
	for _, id := range d.State.JobIDs() {
		d.State.WithJob(id, func(rec *pb.JobRecord) {
			jobs[graph.JobStatusName(rec.Status)]++
			restarts += int(rec.Restarts)
			for _, ejv := range rec.GetExecutionGraph().GetVertices() {
				for _, ev := range ejv.Subtasks {
					if e := ev.GetCurrent(); e != nil {
						execs[graph.ExecutionStateName(e.State)]++
					}
				}
			}
		})
	}
	gauge("jmcluster_jobs", "Jobs by status.")
	for _, k := range sortedKeys(jobs) {
		fmt.Fprintf(w, "jmcluster_jobs{status=%q} %d\n", k, jobs[k])
	}
	gauge("jmcluster_executions", "Current executions by state.")
	for _, k := range sortedKeys(execs) {
		fmt.Fprintf(w, "jmcluster_executions{state=%q} %d\n", k, execs[k])
	}
	gauge("jmcluster_job_restarts", "Region or job restarts, summed over jobs.")
	fmt.Fprintf(w, "jmcluster_job_restarts %d\n", restarts)
	recs := d.State.Reconciliations()
	outcomes := map[string]int{}
	for _, r := range recs {
		outcomes[r.Outcome]++
	}
	gauge("jmcluster_reconciliations", "Reconciliations recorded in the FSM, by outcome.")
	for _, k := range sortedKeys(outcomes) {
		fmt.Fprintf(w, "jmcluster_reconciliations{outcome=%q} %d\n", k, outcomes[k])
	}
	if n := len(recs); n > 0 {
		last := recs[n-1]
		gauge("jmcluster_last_reconciliation_seconds", "Duration of the last completed reconciliation.")
		if last.EndedAt > 0 {
			fmt.Fprintf(w, "jmcluster_last_reconciliation_seconds %g\n", float64(last.EndedAt-last.StartedAt)/1000)
		}
		gauge("jmcluster_last_reconciliation_executions", "Executions of the last reconciliation, by outcome.")
		c := last.GetCounts()
		for _, kv := range []struct {
			k string
			v int64
		}{{"kept_running", c.GetKeptRunning()}, {"finished", c.GetFinished()}, {"failed", c.GetFailed()}, {"canceled", c.GetCanceled()},
			{"missing", c.GetMissing()}, {"cancelled_unknown", c.GetCancelledUnknown()}, {"cancelled_stale", c.GetCancelledStale()},
			{"cancelled_duplicate", c.GetCancelledDuplicate()}, {"rejected", c.GetRejected()}} {
			fmt.Fprintf(w, "jmcluster_last_reconciliation_executions{outcome=%q} %d\n", kv.k, kv.v)
		}
	}
}

func sortedKeys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
