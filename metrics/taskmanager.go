package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/taskmanager"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// TaskManagerState is what a TaskManager's gauges read at a scrape (agent.TaskManager
// provides it from the taskmanager's accessors).
type TaskManagerState interface {
	ID() string
	TaskStates() map[pb.ExecutionState]int
	OutboxLen() int
	OutboxRetries() int64
	LastContact() time.Time
	Epoch() uint64
	Heartbeats() int64
	FreeSlots() int
	TaskIOs() []taskmanager.TaskIO
	// Refusals: the leader's refusals of this TM's calls, by call and code (not "no leader
	// yet": taskmanager/refusal.go).
	Refusals() []taskmanager.RefusalCount
}

// TaskManager holds a TaskManager's instruments, in its own registry.
type TaskManager struct {
	reg         *prometheus.Registry
	RPCDuration *prometheus.HistogramVec // method, code
	RPCRefused  *prometheus.CounterVec   // method, reason
	// Alignment: each barrier alignment of a task with inputs (taskmanager.Config.ObserveAlignment).
	Alignment prometheus.Histogram
}

// AlignmentSeconds are the buckets of the alignment histogram: 100 µs to about 52 s (an
// alignment behind one channel's barrier is a fraction of a millisecond).
var AlignmentSeconds = prometheus.ExponentialBuckets(0.0001, 2, 20)

// NewTaskManager makes a TaskManager's instruments and gauges over st.
func NewTaskManager(st TaskManagerState) *TaskManager {
	m := &TaskManager{
		reg: prometheus.NewRegistry(),
		RPCDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Subsystem: "tm", Name: "rpc_duration_seconds",
			Help: "gRPC calls this TaskManager served (from the leader and other TaskManagers), by method and status code.", Buckets: Seconds}, []string{"method", "code"}),
		RPCRefused: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "tm", Name: "rpc_refused_total",
			Help: "gRPC calls this TaskManager refused, by method and reason (STALE_EPOCH, UNANNOUNCED_EPOCH, ..., or the status code)."}, []string{"method", "reason"}),
		Alignment: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Subsystem: "tm", Name: "checkpoint_alignment_seconds",
			Help: "Checkpoint barrier alignments of this TaskManager's tasks with inputs: from the first barrier of a checkpoint on any input channel of a task to the last (declined alignments are not counted).", Buckets: AlignmentSeconds}),
	}
	m.reg.MustRegister(m.RPCDuration, m.RPCRefused, m.Alignment, &taskManagerGauges{st: st})
	return m
}

// Registry is the TaskManager's registry (served with the process's by Handler).
func (m *TaskManager) Registry() *prometheus.Registry { return m.reg }

// Aligned observes one completed barrier alignment.
func (m *TaskManager) Aligned(took time.Duration) { m.Alignment.Observe(took.Seconds()) }

// ServedRPC observes one gRPC call the TaskManager served.
func (m *TaskManager) ServedRPC(method string, took time.Duration, err error) {
	observeRPC(m.RPCDuration, m.RPCRefused, method, took, err)
}

type taskManagerGauges struct{ st TaskManagerState }

var (
	descTMTasks      = prometheus.NewDesc(Namespace+"_tm_tasks", "This TaskManager's tasks by state (terminal ones while retained for reports).", []string{"state"}, nil)
	descTMOutbox     = prometheus.NewDesc(Namespace+"_tm_outbox_depth", "Messages to the leader not yet accepted (state updates, partition notices).", nil, nil)
	descTMContact    = prometheus.NewDesc(Namespace+"_tm_leader_contact_age_seconds", "Time since this TaskManager last heard from its leader.", nil, nil)
	descTMEpoch      = prometheus.NewDesc(Namespace+"_tm_epoch", "The highest leader epoch this TaskManager has seen.", nil, nil)
	descTMRetries    = prometheus.NewDesc(Namespace+"_tm_outbox_retries_total", "Messages to the leader that failed (no leader, the gate closed, the network) and were sent again.", nil, nil)
	descTMHeartbeats = prometheus.NewDesc(Namespace+"_tm_heartbeats_total", "Heartbeats the leader answered.", nil, nil)
	descTMRecordsIn  = prometheus.NewDesc(Namespace+"_tm_task_records_in_total", "Records a task read from its inputs.", []string{"job", "vertex", "subtask", "attempt"}, nil)
	descTMRecordsOut = prometheus.NewDesc(Namespace+"_tm_task_records_out_total", "Records a task emitted to its outputs.", []string{"job", "vertex", "subtask", "attempt"}, nil)
	descTMBytesIn    = prometheus.NewDesc(Namespace+"_tm_task_bytes_in_total", "Encoded record batches a task received from other TaskManagers (Exchange streams; local channels carry none).", []string{"job", "vertex", "subtask", "attempt"}, nil)
	descTMBytesOut   = prometheus.NewDesc(Namespace+"_tm_task_bytes_out_total", "Encoded record batches a task's partitions sent to other TaskManagers (Exchange streams).", []string{"job", "vertex", "subtask", "attempt"}, nil)
	descTMBlocked    = prometheus.NewDesc(Namespace+"_tm_task_backpressure_seconds_total", "Time a task waited for space in a full subpartition of its output (backpressure: its consumers are slower).", []string{"job", "vertex", "subtask", "attempt"}, nil)
	descTMStart      = prometheus.NewDesc(Namespace+"_tm_task_start_seconds", "Time from a task's deployment to RUNNING on this TaskManager: its state restored, its operator opened (a wasm task's module fetched, compiled or taken warm, and started), its partitions made.", []string{"job", "vertex", "subtask", "attempt"}, nil)
	descTMWasmCalls  = prometheus.NewDesc(Namespace+"_tm_task_wasm_calls_total", "Calls of a wasm task's WebAssembly module: one per batch of records and one per timer.", []string{"job", "vertex", "subtask", "attempt"}, nil)
	descTMWasmIn     = prometheus.NewDesc(Namespace+"_tm_task_wasm_records_in_total", "Records a wasm task gave its module (timers count one each).", []string{"job", "vertex", "subtask", "attempt"}, nil)
	descTMWasmOut    = prometheus.NewDesc(Namespace+"_tm_task_wasm_records_out_total", "Records a wasm task's module emitted.", []string{"job", "vertex", "subtask", "attempt"}, nil)
	descTMWasmTime   = prometheus.NewDesc(Namespace+"_tm_task_wasm_seconds_total", "Time a wasm task spent in its module's calls.", []string{"job", "vertex", "subtask", "attempt"}, nil)
	descTMWasmTraps  = prometheus.NewDesc(Namespace+"_tm_task_wasm_traps_total", "Calls of a wasm task's module that failed (a trap, a panic, the time limit, an error the function returned): each fails the task.", []string{"job", "vertex", "subtask", "attempt"}, nil)
	descTMRefusals   = prometheus.NewDesc(Namespace+"_tm_leader_refusals_total", "Calls of this TaskManager the leader refused for a reason other than no leader yet, by call (register, heartbeat, report) and gRPC code: a refused registration means the TaskManager gets no work (its log has the reason at ERROR).", []string{"call", "code"}, nil)
	descTMFreeSlots  = prometheus.NewDesc(Namespace+"_tm_free_slots", "Slots holding no task.", nil, nil)
)

func (g *taskManagerGauges) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descTMTasks, descTMRecordsIn, descTMRecordsOut, descTMBytesIn, descTMBytesOut, descTMBlocked, descTMStart,
		descTMWasmCalls, descTMWasmIn, descTMWasmOut, descTMWasmTime, descTMWasmTraps, descTMOutbox, descTMRetries, descTMContact, descTMEpoch, descTMHeartbeats, descTMFreeSlots, descTMRefusals} {
		ch <- d
	}
}

func (g *taskManagerGauges) Collect(ch chan<- prometheus.Metric) {
	for s, n := range g.st.TaskStates() {
		ch <- prometheus.MustNewConstMetric(descTMTasks, prometheus.GaugeValue, float64(n), graph.ExecutionStateName(s))
	}
	for _, io := range g.st.TaskIOs() {
		sub, att := strconv.Itoa(int(io.Subtask)), strconv.Itoa(int(io.AttemptNumber))
		ch <- prometheus.MustNewConstMetric(descTMRecordsIn, prometheus.CounterValue, float64(io.RecordsIn), io.JobID, io.VertexID, sub, att)
		ch <- prometheus.MustNewConstMetric(descTMRecordsOut, prometheus.CounterValue, float64(io.RecordsOut), io.JobID, io.VertexID, sub, att)
		ch <- prometheus.MustNewConstMetric(descTMBytesIn, prometheus.CounterValue, float64(io.BytesIn), io.JobID, io.VertexID, sub, att)
		ch <- prometheus.MustNewConstMetric(descTMBytesOut, prometheus.CounterValue, float64(io.BytesOut), io.JobID, io.VertexID, sub, att)
		ch <- prometheus.MustNewConstMetric(descTMBlocked, prometheus.CounterValue, io.Blocked.Seconds(), io.JobID, io.VertexID, sub, att)
		if io.Start > 0 {
			ch <- prometheus.MustNewConstMetric(descTMStart, prometheus.GaugeValue, io.Start.Seconds(), io.JobID, io.VertexID, sub, att)
		}
		if w := io.Wasm; w != nil {
			ch <- prometheus.MustNewConstMetric(descTMWasmCalls, prometheus.CounterValue, float64(w.Calls), io.JobID, io.VertexID, sub, att)
			ch <- prometheus.MustNewConstMetric(descTMWasmIn, prometheus.CounterValue, float64(w.RecordsIn), io.JobID, io.VertexID, sub, att)
			ch <- prometheus.MustNewConstMetric(descTMWasmOut, prometheus.CounterValue, float64(w.RecordsOut), io.JobID, io.VertexID, sub, att)
			ch <- prometheus.MustNewConstMetric(descTMWasmTime, prometheus.CounterValue, w.InModule.Seconds(), io.JobID, io.VertexID, sub, att)
			ch <- prometheus.MustNewConstMetric(descTMWasmTraps, prometheus.CounterValue, float64(w.Traps), io.JobID, io.VertexID, sub, att)
		}
	}
	ch <- prometheus.MustNewConstMetric(descTMOutbox, prometheus.GaugeValue, float64(g.st.OutboxLen()))
	ch <- prometheus.MustNewConstMetric(descTMRetries, prometheus.CounterValue, float64(g.st.OutboxRetries()))
	age := 0.0
	if c := g.st.LastContact(); !c.IsZero() {
		age = time.Since(c).Seconds()
	}
	ch <- prometheus.MustNewConstMetric(descTMContact, prometheus.GaugeValue, age)
	ch <- prometheus.MustNewConstMetric(descTMEpoch, prometheus.GaugeValue, float64(g.st.Epoch()))
	ch <- prometheus.MustNewConstMetric(descTMHeartbeats, prometheus.CounterValue, float64(g.st.Heartbeats()))
	ch <- prometheus.MustNewConstMetric(descTMFreeSlots, prometheus.GaugeValue, float64(g.st.FreeSlots()))
	for _, r := range g.st.Refusals() {
		ch <- prometheus.MustNewConstMetric(descTMRefusals, prometheus.CounterValue, float64(r.Count), r.Call, r.Code)
	}
}
