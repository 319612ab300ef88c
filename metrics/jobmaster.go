package metrics

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// JobMasterState is what the JobMaster's gauges read at a scrape, each from counts kept as
// the state changes (agent.JobMaster provides it).
type JobMasterState interface {
	// Counts: jobs by status and current executions by state (fsm.FSM.Counts).
	Counts() (map[pb.JobStatus]int64, map[pb.ExecutionState]int64)
	// Node: this node's id, whether it is the established leader, the committed epoch, whether
	// its gate is closed (reconciling), its Raft applied and commit indexes.
	Node() (id string, leader bool, epoch uint64, reconciling bool, applied, commit uint64)
	// TaskManagers: the TaskManagers this node knows, by state (registry and gossip).
	TaskManagers() map[string]int
	// Checkpoints: the checkpoints of the jobs in the state by status, and the newest
	// completion (fsm.FSM.CheckpointCounts).
	Checkpoints() fsm.CheckpointCounts
}

// WaitingState is what a JobMasterState may also provide: the jobs that wait on this leader by
// the kind of reason (jobmaster.WaitKinds: a fixed set, never free text); nil on a node that
// does not lead. Read for the jobs_waiting gauge.
type WaitingState interface {
	JobsWaiting() map[string]int
}

// JobMaster holds a JobMaster replica's instruments, in its own registry (Registry).
type JobMaster struct {
	reg *prometheus.Registry

	ReconcileDuration    prometheus.Histogram
	ReconcilePhase       *prometheus.HistogramVec // phase: collect, merge, commit, gate
	ReportLatency        *prometheus.HistogramVec // tm: begin to that TM's report
	CommitLatency        prometheus.Histogram
	RPCDuration          *prometheus.HistogramVec // method, code
	RPCRefused           *prometheus.CounterVec   // method, reason
	Reconciliations      *prometheus.CounterVec   // outcome
	Reconciled           *prometheus.CounterVec   // outcome: kept_running, finished, failed, ...
	RegionRestarts       *prometheus.CounterVec   // cause
	RegistrationsRefused *prometheus.CounterVec   // kind
}

// NewJobMaster makes a JobMaster's instruments and gauges over st.
func NewJobMaster(st JobMasterState) *JobMaster {
	m := &JobMaster{
		reg: prometheus.NewRegistry(),
		ReconcileDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: "reconciliation_duration_seconds",
			Help: "A reconciliation on this node as the new leader: from BEGIN_RECONCILIATION to the gate opening.", Buckets: Seconds}),
		ReconcilePhase: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "reconciliation_phase_seconds",
			Help: "Each phase of a reconciliation: collect (begin to the last report or the deadline), merge, commit (the RECONCILE_JOB entries), gate (to the gate opening).", Buckets: Seconds}, []string{"phase"}),
		ReportLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "reconciliation_report_seconds",
			Help: "From the start of a reconciliation to a TaskManager's report, per TaskManager.", Buckets: Seconds}, []string{"tm"}),
		CommitLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: "commit_latency_seconds",
			Help: "The leader's Raft commits, from Apply to the FSM's result.", Buckets: Seconds}),
		RPCDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "rpc_duration_seconds",
			Help: "gRPC calls this node served, by method and status code.", Buckets: Seconds}, []string{"method", "code"}),
		RPCRefused: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "rpc_refused_total",
			Help: "gRPC calls refused, by method and reason (NOT_LEADER, RECONCILING, RATE_LIMITED, STALE_EPOCH, ..., or the status code)."}, []string{"method", "reason"}),
		Reconciliations: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "reconciliations_total",
			Help: "Reconciliations this node ran as the new leader, by outcome (completed, failed)."}, []string{"outcome"}),
		Reconciled: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "reconciled_executions_total",
			Help: "Executions of the reconciliations this node completed, by what became of them."}, []string{"outcome"}),
		RegionRestarts: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "region_restarts_total",
			Help: "Failover regions deployed again by this leader, by cause: failure (counted by the restart strategy) or moved (cancelled and moved: a drain)."}, []string{"cause"}),
		RegistrationsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "tm_registrations_refused_total",
			Help: "TaskManager registrations this leader refused, by kind: invalid_argument (slots, addresses), protocol (an unsupported protocol version), replaced_incarnation (an earlier process of a TaskManager id registered since). A refused TaskManager gets no work; jmnode tm list shows why."}, []string{"kind"}),
	}
	m.reg.MustRegister(m.ReconcileDuration, m.ReconcilePhase, m.ReportLatency, m.CommitLatency, m.RPCDuration, m.RPCRefused,
		m.Reconciliations, m.Reconciled, m.RegionRestarts, m.RegistrationsRefused, &jobMasterGauges{st: st}, &flowGauges{st: st})
	return m
}

// Registry is the node's registry (served with the process's by Handler).
func (m *JobMaster) Registry() *prometheus.Registry { return m.reg }

// Committed observes one leader commit.
func (m *JobMaster) Committed(took time.Duration, _ error) { m.CommitLatency.Observe(took.Seconds()) }

// RegistrationRefused counts one refused TaskManager registration (jobmaster's
// registrationRefusals).
func (m *JobMaster) RegistrationRefused(kind string) {
	m.RegistrationsRefused.WithLabelValues(kind).Inc()
}

// RegionsRestarted counts n regions deployed again, for a failure or moved.
func (m *JobMaster) RegionsRestarted(n int, failure bool) {
	cause := "moved"
	if failure {
		cause = "failure"
	}
	m.RegionRestarts.WithLabelValues(cause).Add(float64(n))
}

// ReconciliationEnded observes the reconciliation of rec (this node's, committed) or its failure.
func (m *JobMaster) ReconciliationEnded(rec *pb.ReconciliationRecord, gateOpen time.Time, err error) {
	if err != nil || rec == nil {
		m.Reconciliations.WithLabelValues("failed").Inc()
		return
	}
	m.Reconciliations.WithLabelValues("completed").Inc()
	start := time.UnixMilli(rec.StartedAt)
	m.ReconcileDuration.Observe(gateOpen.Sub(start).Seconds())
	phase := func(name string, from, to int64) {
		if from > 0 && to >= from {
			m.ReconcilePhase.WithLabelValues(name).Observe(float64(to-from) / 1000)
		}
	}
	phase("collect", rec.StartedAt, rec.CollectedAt)
	phase("merge", rec.CollectedAt, rec.MergedAt)
	phase("commit", rec.MergedAt, rec.JobsCommittedAt)
	if rec.JobsCommittedAt > 0 {
		m.ReconcilePhase.WithLabelValues("gate").Observe(gateOpen.Sub(time.UnixMilli(rec.JobsCommittedAt)).Seconds())
	}
	for _, r := range rec.Reports {
		if r.GetOutcome() == "reported" && r.GetAt() >= rec.StartedAt {
			m.ReportLatency.WithLabelValues(r.GetTmId()).Observe(float64(r.GetAt()-rec.StartedAt) / 1000)
		}
	}
	c := rec.GetCounts()
	for _, kv := range []struct {
		k string
		v int64
	}{{"kept_running", c.GetKeptRunning()}, {"finished", c.GetFinished()}, {"failed", c.GetFailed()}, {"canceled", c.GetCanceled()},
		{"missing", c.GetMissing()}, {"cancelled_unknown", c.GetCancelledUnknown()}, {"cancelled_stale", c.GetCancelledStale()},
		{"cancelled_duplicate", c.GetCancelledDuplicate()}, {"rejected", c.GetRejected()}} {
		m.Reconciled.WithLabelValues(kv.k).Add(float64(kv.v))
	}
}

// ServedRPC observes one gRPC call: its duration by method and code, and a refusal by reason.
func (m *JobMaster) ServedRPC(method string, took time.Duration, err error) {
	observeRPC(m.RPCDuration, m.RPCRefused, method, took, err)
}

func observeRPC(dur *prometheus.HistogramVec, refused *prometheus.CounterVec, method string, took time.Duration, err error) {
	method = strings.TrimPrefix(method, "/jmcluster.v1.")
	code := status.Code(err)
	dur.WithLabelValues(method, code.String()).Observe(took.Seconds())
	if err == nil {
		return
	}
	if r := transport.Reason(err); r != "" {
		refused.WithLabelValues(method, r).Inc()
		return
	}
	switch code.String() {
	case "PermissionDenied", "Unauthenticated", "ResourceExhausted", "InvalidArgument", "FailedPrecondition", "Unavailable":
		refused.WithLabelValues(method, code.String()).Inc()
	}
}

// jobMasterGauges reads the gauges at a scrape from counts kept as the state changes.
type jobMasterGauges struct{ st JobMasterState }

var (
	descJobs         = prometheus.NewDesc(Namespace+"_jobs", "Jobs by status (every replica: the replicated state).", []string{"status"}, nil)
	descExecutions   = prometheus.NewDesc(Namespace+"_executions", "Current executions by state (every replica).", []string{"state"}, nil)
	descTaskManagers = prometheus.NewDesc(Namespace+"_task_managers", "TaskManagers this node knows, by state.", []string{"state"}, nil)
	descLeader       = prometheus.NewDesc(Namespace+"_leader", "1 on the established leader.", []string{"node"}, nil)
	descEpoch        = prometheus.NewDesc(Namespace+"_leader_epoch", "The committed leader epoch.", nil, nil)
	descReconciling  = prometheus.NewDesc(Namespace+"_reconciling", "1 while this leader reconciles (its RPC gate closed).", nil, nil)
	descApplied      = prometheus.NewDesc(Namespace+"_node_applied_index", "This node's Raft applied index.", nil, nil)
	descCommit       = prometheus.NewDesc(Namespace+"_node_commit_index", "This node's Raft commit index.", nil, nil)
	descJobsWaiting  = prometheus.NewDesc(Namespace+"_jobs_waiting", "Jobs whose restart or deployment waits on this leader, by reason: slots, taskmanager (a silent TaskManager the isolation rule holds), restart_delay, deploy_failed (the leader only; jmnode job status says why).", []string{"reason"}, nil)

	descCheckpoints    = prometheus.NewDesc(Namespace+"_checkpoints", "Checkpoints of the jobs in the state (every replica): completed and aborted since each job's submission, pending now.", []string{"status"}, nil)
	descCkLastID       = prometheus.NewDesc(Namespace+"_checkpoint_last_completed_id", "The id of the newest completed checkpoint of any job in the state (the job view has each job's).", nil, nil)
	descCkLastDuration = prometheus.NewDesc(Namespace+"_checkpoint_last_duration_seconds", "The newest completed checkpoint: from its trigger to its completion (the leader's clock, as committed).", nil, nil)
	descCkLastSize     = prometheus.NewDesc(Namespace+"_checkpoint_last_size_bytes", "The newest completed checkpoint: the sum of the state sizes its tasks acknowledged.", nil, nil)
	descCkLastAlign    = prometheus.NewDesc(Namespace+"_checkpoint_last_alignment_seconds", "The newest completed checkpoint: the longest barrier alignment of its tasks, as they acknowledged it (each TaskManager's "+Namespace+"_tm_checkpoint_alignment_seconds has them all).", nil, nil)
	descCkLastTime     = prometheus.NewDesc(Namespace+"_checkpoint_last_completed_timestamp_seconds", "The newest completed checkpoint: when it completed (Unix time, the leader's clock).", nil, nil)
)

func (g *jobMasterGauges) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descJobs, descExecutions, descTaskManagers, descLeader, descEpoch, descReconciling, descApplied, descCommit,
		descJobsWaiting, descCheckpoints, descCkLastID, descCkLastDuration, descCkLastSize, descCkLastAlign, descCkLastTime} {
		ch <- d
	}
}

func (g *jobMasterGauges) Collect(ch chan<- prometheus.Metric) {
	jobs, execs := g.st.Counts()
	for s, n := range jobs {
		ch <- prometheus.MustNewConstMetric(descJobs, prometheus.GaugeValue, float64(n), graph.JobStatusName(s))
	}
	for s, n := range execs {
		ch <- prometheus.MustNewConstMetric(descExecutions, prometheus.GaugeValue, float64(n), graph.ExecutionStateName(s))
	}
	for s, n := range g.st.TaskManagers() {
		ch <- prometheus.MustNewConstMetric(descTaskManagers, prometheus.GaugeValue, float64(n), s)
	}
	id, leader, epoch, reconciling, applied, commit := g.st.Node()
	ch <- prometheus.MustNewConstMetric(descLeader, prometheus.GaugeValue, b2f(leader), id)
	ch <- prometheus.MustNewConstMetric(descEpoch, prometheus.GaugeValue, float64(epoch))
	ch <- prometheus.MustNewConstMetric(descReconciling, prometheus.GaugeValue, b2f(reconciling))
	ch <- prometheus.MustNewConstMetric(descApplied, prometheus.GaugeValue, float64(applied))
	ch <- prometheus.MustNewConstMetric(descCommit, prometheus.GaugeValue, float64(commit))
	if ws, ok := g.st.(WaitingState); ok {
		for reason, n := range ws.JobsWaiting() {
			ch <- prometheus.MustNewConstMetric(descJobsWaiting, prometheus.GaugeValue, float64(n), reason)
		}
	}
	ck := g.st.Checkpoints()
	ch <- prometheus.MustNewConstMetric(descCheckpoints, prometheus.GaugeValue, float64(ck.Completed), "completed")
	ch <- prometheus.MustNewConstMetric(descCheckpoints, prometheus.GaugeValue, float64(ck.Aborted), "aborted")
	ch <- prometheus.MustNewConstMetric(descCheckpoints, prometheus.GaugeValue, float64(ck.Pending), "pending")
	if n := ck.Newest; n != nil {
		ch <- prometheus.MustNewConstMetric(descCkLastID, prometheus.GaugeValue, float64(n.ID))
		ch <- prometheus.MustNewConstMetric(descCkLastDuration, prometheus.GaugeValue, float64(n.CompleteUnixMs-n.TriggerUnixMs)/1000)
		ch <- prometheus.MustNewConstMetric(descCkLastSize, prometheus.GaugeValue, float64(n.SizeBytes))
		ch <- prometheus.MustNewConstMetric(descCkLastAlign, prometheus.GaugeValue, float64(n.MaxAlignmentUs)/1e6)
		ch <- prometheus.MustNewConstMetric(descCkLastTime, prometheus.GaugeValue, float64(n.CompleteUnixMs)/1000)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
