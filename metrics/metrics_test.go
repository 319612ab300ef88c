package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

type fakeState struct{}

func (fakeState) Counts() (map[pb.JobStatus]int64, map[pb.ExecutionState]int64) {
	return map[pb.JobStatus]int64{pb.JobStatus_JOB_STATUS_RUNNING: 2}, map[pb.ExecutionState]int64{pb.ExecutionState_EXECUTION_STATE_RUNNING: 7}
}
func (fakeState) Node() (string, bool, uint64, bool, uint64, uint64) {
	return "jm1", true, 4, false, 10, 10
}
func (fakeState) TaskManagers() map[string]int { return map[string]int{"alive": 3} }
func (fakeState) Checkpoints() fsm.CheckpointCounts {
	return fsm.CheckpointCounts{Pending: 1, Completed: 12, Aborted: 2,
		Newest: &fsm.CompletedCheckpoint{JobID: "j", ID: 14, TriggerUnixMs: 10_000, CompleteUnixMs: 10_250, SizeBytes: 4096, MaxAlignmentUs: 1500}}
}

// TestJobMasterInstruments: a reconciliation record becomes one histogram sample per phase and
// per reported TM and its counts; refusals are counted by reason; gauges come from the state.
func TestJobMasterInstruments(t *testing.T) {
	m := NewJobMaster(fakeState{})
	rec := &pb.ReconciliationRecord{Epoch: 4, StartedAt: 1000, CollectedAt: 1010, MergedAt: 1012, JobsCommittedAt: 1020,
		Counts:  &pb.ReconciliationCounts{KeptRunning: 7, Missing: 1},
		Reports: []*pb.ReconciliationReport{{TmId: "tm1", Outcome: "reported", At: 1005}, {TmId: "tm2", Outcome: "missing", At: 1010}}}
	m.ReconciliationEnded(rec, time.UnixMilli(1025), nil)
	m.ReconciliationEnded(nil, time.Now(), errFake)
	if n := testutil.CollectAndCount(m.ReconcileDuration); n != 1 {
		t.Fatalf("reconciliation histogram series %d", n)
	}
	if got := testutil.ToFloat64(m.Reconciled.WithLabelValues("kept_running")); got != 7 {
		t.Fatalf("kept running %v", got)
	}
	if got := testutil.ToFloat64(m.Reconciliations.WithLabelValues("failed")); got != 1 {
		t.Fatalf("failed reconciliations %v", got)
	}
	if n := testutil.CollectAndCount(m.ReportLatency); n != 1 {
		t.Fatalf("report latency series %d, want only the TM that reported", n)
	}
	if n := testutil.CollectAndCount(m.ReconcilePhase); n != 4 {
		t.Fatalf("phase series %d, want collect, merge, commit, gate", n)
	}
	m.ServedRPC("/jmcluster.v1.ClientService/SubmitJob", time.Millisecond, transport.NotLeaderError(""))
	m.ServedRPC("/jmcluster.v1.ClientService/GetJob", time.Millisecond, nil)
	if got := testutil.ToFloat64(m.RPCRefused.WithLabelValues("ClientService/SubmitJob", transport.ReasonNotLeader)); got != 1 {
		t.Fatalf("NOT_LEADER refusals %v", got)
	}
	n, err := testutil.GatherAndCount(m.Registry(), "jmcluster_jobs", "jmcluster_executions", "jmcluster_task_managers", "jmcluster_leader_epoch")
	if err != nil || n != 4 {
		t.Fatalf("gauges: %d series, %v", n, err)
	}
	const ckWant = `
# HELP jmcluster_checkpoint_last_alignment_seconds The newest completed checkpoint: the longest barrier alignment of its tasks, as they acknowledged it (each TaskManager's jmcluster_tm_checkpoint_alignment_seconds has them all).
# TYPE jmcluster_checkpoint_last_alignment_seconds gauge
jmcluster_checkpoint_last_alignment_seconds 0.0015
# HELP jmcluster_checkpoint_last_completed_id The id of the newest completed checkpoint of any job in the state (the job view has each job's).
# TYPE jmcluster_checkpoint_last_completed_id gauge
jmcluster_checkpoint_last_completed_id 14
# HELP jmcluster_checkpoint_last_duration_seconds The newest completed checkpoint: from its trigger to its completion (the leader's clock, as committed).
# TYPE jmcluster_checkpoint_last_duration_seconds gauge
jmcluster_checkpoint_last_duration_seconds 0.25
# HELP jmcluster_checkpoint_last_size_bytes The newest completed checkpoint: the sum of the state sizes its tasks acknowledged.
# TYPE jmcluster_checkpoint_last_size_bytes gauge
jmcluster_checkpoint_last_size_bytes 4096
# HELP jmcluster_checkpoints Checkpoints of the jobs in the state (every replica): completed and aborted since each job's submission, pending now.
# TYPE jmcluster_checkpoints gauge
jmcluster_checkpoints{status="aborted"} 2
jmcluster_checkpoints{status="completed"} 12
jmcluster_checkpoints{status="pending"} 1
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(ckWant), "jmcluster_checkpoints", "jmcluster_checkpoint_last_completed_id",
		"jmcluster_checkpoint_last_duration_seconds", "jmcluster_checkpoint_last_size_bytes", "jmcluster_checkpoint_last_alignment_seconds"); err != nil {
		t.Fatal(err)
	}
	p, err := Process()
	if err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(p, "go_goroutines"); err != nil || n != 1 {
		t.Fatalf("go_goroutines: %d, %v", n, err)
	}
}

type fakeErr struct{}

func (fakeErr) Error() string { return "boom" }

var errFake = fakeErr{}

// TestTaskManagerAlignmentHistogram: each alignment the TaskManager is told of is one sample of
// jmcluster_tm_checkpoint_alignment_seconds.
func TestTaskManagerAlignmentHistogram(t *testing.T) {
	m := NewTaskManager(nil)
	m.Aligned(300 * time.Microsecond)
	m.Aligned(20 * time.Millisecond)
	reg := prometheus.NewRegistry() // the histogram alone: the gauges need a TaskManager
	reg.MustRegister(m.Alignment)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "jmcluster_tm_checkpoint_alignment_seconds" {
			h := mf.GetMetric()[0].GetHistogram()
			if h.GetSampleCount() != 2 || h.GetSampleSum() < 0.0203 || h.GetSampleSum() > 0.0204 {
				t.Fatalf("alignment histogram: %d samples, sum %v", h.GetSampleCount(), h.GetSampleSum())
			}
			return
		}
	}
	t.Fatal("no jmcluster_tm_checkpoint_alignment_seconds")
}

type waitingFake struct{ fakeState }

func (waitingFake) JobsWaiting() map[string]int {
	return map[string]int{"slots": 2, "taskmanager": 1, "restart_delay": 0, "deploy_failed": 0}
}

// TestJobsWaitingByReason: a state that says which jobs wait gives one jobs_waiting series per
// kind of reason; one that does not (a follower) gives none.
func TestJobsWaitingByReason(t *testing.T) {
	m := NewJobMaster(waitingFake{})
	if n, err := testutil.GatherAndCount(m.Registry(), "jmcluster_jobs_waiting"); err != nil || n != 4 {
		t.Fatalf("jobs_waiting series %d (%v), want 4", n, err)
	}
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(`
# HELP jmcluster_jobs_waiting Jobs whose restart or deployment waits on this leader, by reason: slots, taskmanager (a silent TaskManager the isolation rule holds), restart_delay, deploy_failed (the leader only; jmnode job status says why).
# TYPE jmcluster_jobs_waiting gauge
jmcluster_jobs_waiting{reason="deploy_failed"} 0
jmcluster_jobs_waiting{reason="restart_delay"} 0
jmcluster_jobs_waiting{reason="slots"} 2
jmcluster_jobs_waiting{reason="taskmanager"} 1
`), "jmcluster_jobs_waiting"); err != nil {
		t.Fatal(err)
	}
	if n, _ := testutil.GatherAndCount(NewJobMaster(fakeState{}).Registry(), "jmcluster_jobs_waiting"); n != 0 {
		t.Fatalf("a state without JobsWaiting gave %d series", n)
	}
}
