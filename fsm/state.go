package fsm

import (
	"cmp"
	"slices"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/transport/pb"
)

const (
	// maxAttemptHistory bounds ExecutionVertex.history; the oldest attempts are dropped.
	maxAttemptHistory = 10
	// maxJobAttemptHistory bounds the earlier attempts one job keeps in all: a job of more than
	// 16,384 executions keeps fewer than maxAttemptHistory each (at least one), so its record
	// stays under the snapshot's record limit (docs/fsm.md).
	maxJobAttemptHistory = 16384 * maxAttemptHistory
	// maxStatusHistory bounds JobRecord.history; the oldest changes are dropped.
	maxStatusHistory = 100
	// maxReconciliations bounds the reconciliation records kept; the oldest are dropped.
	maxReconciliations = 100

	outcomeInProgress = "in_progress"
	outcomeCompleted  = "completed"
	outcomeAbandoned  = "abandoned"
)

// attemptRef locates the ExecutionVertex whose current execution has an attempt id.
type attemptRef struct {
	jobID    string
	vertexID string
	subtask  int32
}

// state is the replicated state. It is mutated only by the store methods, under the FSM's
// write lock, and only from Apply and Restore.
type state struct {
	jobs     map[string]*pb.JobRecord
	attempts map[string]attemptRef // current attempts only
	epoch    *pb.LeaderEpoch
	recons   []*pb.ReconciliationRecord // oldest first
	pool     *pb.TaskManagerPool
	// artifacts are the stored artifacts by sha256 (immutable once stored: snapshots share
	// them); uploads the uploads in progress by id (store_artifacts.go).
	artifacts map[string]*pb.ArtifactRecord
	uploads   map[string]*pb.ArtifactUpload
	applied   uint64
	// removed counts the terminal jobs REMOVE_JOBS took out of the state; removedAt is the
	// proposer's timestamp of the last removal.
	removed   uint64
	removedAt int64
	// counts are the jobs by status and the current executions by state, kept by every change
	// so that metrics read them without walking the jobs. Not in snapshots: a restore recounts.
	counts counts
	// canon keeps one copy of the values many executions hold alike (canon.go). Not in
	// snapshots, and nothing reads it but the store methods that share values through it.
	canon canon
}

type counts struct {
	jobs  map[pb.JobStatus]int64
	execs map[pb.ExecutionState]int64
	// slots: the current non-terminal executions in each slot; tmSlots: per TM, the slots
	// holding at least one (a region's tasks share a slot).
	slots   map[slotKey]int
	tmSlots map[string]int
	// onTM: per TM, the attempt ids of the current non-terminal executions placed on it (the
	// leader's deployment check reads a TM's attempts without walking the jobs).
	onTM map[string]map[string]struct{}
	// ckJobs: what each job with a checkpoint record adds to the checkpoint counts
	// (counts_checkpoints.go); ckNewest: the newest completion of them.
	ckJobs                            map[string]ckSummary
	ckPending, ckCompleted, ckAborted int64
	ckNewest                          *CompletedCheckpoint
}

type slotKey struct {
	tm    string
	index int32
}

// countSlot adds (sign 1) or takes away (-1) a non-terminal execution from its slot.
func (s *state) countSlot(ex *pb.Execution, sign int) {
	if ex.GetSlot().GetTmId() == "" || graph.IsTerminalExecution(ex.State) {
		return
	}
	k := slotKey{ex.Slot.TmId, ex.Slot.Index}
	if sign > 0 {
		if s.counts.onTM[k.tm] == nil {
			s.counts.onTM[k.tm] = map[string]struct{}{}
		}
		s.counts.onTM[k.tm][ex.AttemptId] = struct{}{}
	} else if m := s.counts.onTM[k.tm]; m != nil {
		delete(m, ex.AttemptId)
		if len(m) == 0 {
			delete(s.counts.onTM, k.tm)
		}
	}
	before := s.counts.slots[k]
	after := before + sign
	if after <= 0 {
		delete(s.counts.slots, k)
	} else {
		s.counts.slots[k] = after
	}
	switch {
	case before == 0 && after > 0:
		s.counts.tmSlots[k.tm]++
	case before > 0 && after <= 0:
		if s.counts.tmSlots[k.tm]--; s.counts.tmSlots[k.tm] <= 0 {
			delete(s.counts.tmSlots, k.tm)
		}
	}
}

// countJob adds (sign 1) or takes away (-1) a job and its current executions.
func (s *state) countJob(rec *pb.JobRecord, sign int64) {
	s.counts.jobs[rec.Status] += sign
	for _, ejv := range rec.GetExecutionGraph().GetVertices() {
		for _, ev := range ejv.Subtasks {
			if cur := ev.GetCurrent(); cur != nil {
				s.counts.execs[cur.State] += sign
				s.countSlot(cur, int(sign))
			}
		}
	}
}

// replaceCurrent counts an execution's current attempt replaced (old may be nil).
func (s *state) replaceCurrent(old, cur *pb.Execution) {
	if old != nil {
		s.counts.execs[old.State]--
		s.countSlot(old, -1)
	}
	s.counts.execs[cur.State]++
	s.countSlot(cur, 1)
}

func newState() *state {
	return &state{
		jobs:      map[string]*pb.JobRecord{},
		attempts:  map[string]attemptRef{},
		epoch:     &pb.LeaderEpoch{},
		pool:      &pb.TaskManagerPool{},
		artifacts: map[string]*pb.ArtifactRecord{},
		uploads:   map[string]*pb.ArtifactUpload{},
		counts: counts{jobs: map[pb.JobStatus]int64{}, execs: map[pb.ExecutionState]int64{}, slots: map[slotKey]int{}, tmSlots: map[string]int{}, onTM: map[string]map[string]struct{}{},
			ckJobs: map[string]ckSummary{}},
		canon: newCanon(),
	}
}

// sortedJobs returns the job records ordered by create index, then job id. Every walk over
// jobs whose order can reach the output goes through here.
func (s *state) sortedJobs() []*pb.JobRecord {
	out := make([]*pb.JobRecord, 0, len(s.jobs))
	for _, j := range s.jobs {
		out = append(out, j)
	}
	slices.SortFunc(out, compareJobs)
	return out
}

func compareJobs(a, b *pb.JobRecord) int {
	if c := cmp.Compare(a.CreateIndex, b.CreateIndex); c != 0 {
		return c
	}
	return cmp.Compare(a.JobGraph.GetJobId(), b.JobGraph.GetJobId())
}

func jobID(rec *pb.JobRecord) string { return rec.JobGraph.GetJobId() }

func (s *state) job(id string) (*pb.JobRecord, error) {
	rec, ok := s.jobs[id]
	if !ok {
		return nil, wrapf(ErrUnknownJob, "job %q", id)
	}
	return rec, nil
}

// indexJob adds every current attempt of the job to the attempt index.
func (s *state) indexJob(rec *pb.JobRecord) {
	id := jobID(rec)
	for _, ejv := range rec.ExecutionGraph.GetVertices() {
		for _, ev := range ejv.Subtasks {
			if a := ev.Current.GetAttemptId(); a != "" {
				s.attempts[a] = attemptRef{jobID: id, vertexID: ev.VertexId, subtask: ev.SubtaskIndex}
			}
		}
	}
}

// setJobStatus records a status change; the caller has checked the transition. A record not
// yet counted (a new job: status unspecified) is counted.
func (s *state) setJobStatus(rec *pb.JobRecord, st pb.JobStatus, ts int64, cause string) {
	if rec.Status != pb.JobStatus_JOB_STATUS_UNSPECIFIED {
		s.counts.jobs[rec.Status]--
	}
	s.counts.jobs[st]++
	rec.Status = st
	rec.History = append(rec.History, &pb.JobStatusChange{Status: st, Timestamp: ts, Cause: cause})
	if n := len(rec.History) - maxStatusHistory; n > 0 {
		rec.History = slices.Delete(rec.History, 0, n)
	}
	if cause != "" && (st == pb.JobStatus_JOB_STATUS_FAILING || st == pb.JobStatus_JOB_STATUS_FAILED) {
		rec.FailureCause = cause
	}
}

// setExecutionState records a state change of a current execution; the caller has checked it.
func (s *state) setExecutionState(ex *pb.Execution, st pb.ExecutionState, ts int64, cause string) {
	s.counts.execs[ex.State]--
	s.counts.execs[st]++
	// A slot is counted by whether its execution is terminal: a move between two live states
	// (RUNNING to RECONCILING and back, at every failover for every execution) leaves the
	// counts as they are.
	if graph.IsTerminalExecution(ex.State) != graph.IsTerminalExecution(st) {
		s.countSlot(ex, -1)
		ex.State = st
		s.countSlot(ex, 1)
	} else {
		ex.State = st
	}
	graph.AppendStateTimestamp(ex, s.canon.stamp(st, ts))
	if st == pb.ExecutionState_EXECUTION_STATE_FAILED && cause != "" {
		ex.FailureCause = cause
	}
}

// attemptHistory is how many earlier attempts each execution of the graph keeps.
func attemptHistory(eg *pb.ExecutionGraph) int {
	n := 0
	for _, v := range eg.GetVertices() {
		n += len(v.GetSubtasks())
	}
	return min(maxAttemptHistory, max(1, maxJobAttemptHistory/max(n, 1)))
}

// retire moves an execution into a vertex's history, keeping the newest keep attempts.
func retire(ev *pb.ExecutionVertex, old *pb.Execution, keep int) {
	ev.History = append(ev.History, old)
	if n := len(ev.History) - keep; n > 0 {
		ev.History = slices.Delete(ev.History, 0, n)
	}
}

// updateConsumable sets the consumable flag of the partitions a producer subtask writes,
// from its execution state: FINISHED makes every partition consumable, RUNNING makes
// PIPELINED ones consumable, FAILED, CANCELED and the states before RUNNING make them not
// consumable; CANCELING and RECONCILING leave the flags as they are.
func updateConsumable(eg *pb.ExecutionGraph, vertexID string, subtask int32, st pb.ExecutionState) {
	for _, r := range eg.GetResults() {
		if r.ProducerVertexId == vertexID {
			setConsumable([]*pb.IntermediateResult{r}, subtask, st)
		}
	}
}

// resultsByProducer indexes a graph's results by producer vertex, for appliers that update
// many executions at once.
func resultsByProducer(eg *pb.ExecutionGraph) map[string][]*pb.IntermediateResult {
	out := make(map[string][]*pb.IntermediateResult, len(eg.GetResults()))
	for _, r := range eg.GetResults() {
		out[r.ProducerVertexId] = append(out[r.ProducerVertexId], r)
	}
	return out
}

// setConsumable is updateConsumable over the results one producer vertex writes.
func setConsumable(results []*pb.IntermediateResult, subtask int32, st pb.ExecutionState) {
	for _, r := range results {
		if subtask < 0 || int(subtask) >= len(r.Partitions) {
			continue
		}
		p := r.Partitions[subtask]
		switch st {
		case pb.ExecutionState_EXECUTION_STATE_FINISHED:
			p.Consumable = true
		case pb.ExecutionState_EXECUTION_STATE_RUNNING:
			p.Consumable = r.ResultType == pb.ResultType_RESULT_TYPE_PIPELINED
		case pb.ExecutionState_EXECUTION_STATE_CANCELING, pb.ExecutionState_EXECUTION_STATE_RECONCILING:
		default:
			p.Consumable = false
		}
	}
}

func isActive(st pb.ExecutionState) bool {
	return !graph.IsTerminalExecution(st) && st != pb.ExecutionState_EXECUTION_STATE_CREATED
}
