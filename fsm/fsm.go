// Package fsm is the Raft state machine of jmcluster: the replicated JobRecords, the leader
// epoch and the reconciliation records. Apply is deterministic: it reads no clock and no
// randomness, and no map iteration order reaches its output.
package fsm

import (
	"fmt"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/internal/failpoint"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// FSM implements raft.FSM. All methods are safe for concurrent use.
type FSM struct {
	logger hclog.Logger

	mu      sync.RWMutex
	st      *state
	changed chan struct{}
}

var _ raft.FSM = (*FSM)(nil)

// New returns an empty FSM.
func New(logger hclog.Logger) *FSM {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &FSM{
		logger:  logger.Named("fsm"),
		st:      newState(),
		changed: make(chan struct{}),
	}
}

// Apply applies one committed log entry and returns a *Result. An entry that does not decode,
// or whose type is unknown and not ignorable, panics: skipping it would let replicas diverge.
func (f *FSM) Apply(l *raft.Log) interface{} {
	if l.Type != raft.LogCommand {
		return nil
	}
	cmd, err := Decode(l.Data)
	if err != nil {
		panic(fmt.Sprintf("fsm: entry %d: %v", l.Index, err))
	}
	ap, known := appliers[cmd.Type]
	if !known && !cmd.Ignorable {
		panic(fmt.Sprintf("fsm: entry %d: unknown command type %s", l.Index, cmd.Type))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var res *Result
	if known {
		res = ap(f.st, l.Index, cmd.Payload)
	} else {
		f.logger.Warn("skipping unknown ignorable command", "index", l.Index, "type", int32(cmd.Type))
		res = &Result{Index: l.Index}
	}
	if res.Err != nil {
		f.logger.Debug("command rejected", "index", l.Index, "type", cmd.Type.String(), "error", res.Err)
	} else if cmd.Type == pb.CommandType_COMMAND_TYPE_SUBMIT_JOB && failpoint.Enabled(failpoint.NondeterministicApply) {
		// Broken on purpose: this replica's clock in the replicated state, so that the fault
		// suite can show its state-hash checker catches replicas that diverge.
		c := decodePayload(cmd.Payload, &pb.SubmitJobCommand{})
		if rec := f.st.jobs[c.GetJobGraph().GetJobId()]; rec != nil {
			rec.SubmittedAt = failpoint.Now().UnixNano()
		}
	}
	f.st.applied = l.Index
	f.notifyLocked()
	return res
}

// notifyLocked wakes every watcher of Changed. Callers hold the write lock.
func (f *FSM) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// Changed returns a channel that is closed at the next applied entry or restore.
func (f *FSM) Changed() <-chan struct{} {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.changed
}

// Job returns a copy of a job record.
func (f *FSM) Job(id string) (*pb.JobRecord, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	rec, ok := f.st.jobs[id]
	if !ok {
		return nil, false
	}
	return proto.Clone(rec).(*pb.JobRecord), true
}

// WithJob runs fn on the live job record under the read lock and reports whether the job
// exists. fn must neither keep nor change the record, and must not call back into the FSM's
// writers. It spares the scheduler a deep copy of large jobs.
func (f *FSM) WithJob(id string, fn func(*pb.JobRecord)) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	rec, ok := f.st.jobs[id]
	if ok {
		fn(rec)
	}
	return ok
}

// WithJobs runs fn on every live job record, ordered by create index, under the read lock
// (fn must neither keep nor change them, nor call back into the FSM's writers): a read of
// every job without the copy Jobs makes.
func (f *FSM) WithJobs(fn func([]*pb.JobRecord)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	fn(f.st.sortedJobs())
}

// Jobs returns copies of every job record, ordered by create index.
func (f *FSM) Jobs() []*pb.JobRecord {
	f.mu.RLock()
	defer f.mu.RUnlock()
	jobs := f.st.sortedJobs()
	for i, j := range jobs {
		jobs[i] = proto.Clone(j).(*pb.JobRecord)
	}
	return jobs
}

// JobIDs returns every job id, ordered by create index.
func (f *FSM) JobIDs() []string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	jobs := f.st.sortedJobs()
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i] = jobID(j)
	}
	return ids
}

// Epoch returns a copy of the committed leader epoch; never nil (epoch 0 before any leader).
func (f *FSM) Epoch() *pb.LeaderEpoch {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return proto.Clone(f.st.epoch).(*pb.LeaderEpoch)
}

// LeaderEpoch returns the committed leader epoch number.
func (f *FSM) LeaderEpoch() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.epoch.Epoch
}

// Reconciliations returns copies of the reconciliation records, oldest first.
func (f *FSM) Reconciliations() []*pb.ReconciliationRecord {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]*pb.ReconciliationRecord, len(f.st.recons))
	for i, r := range f.st.recons {
		out[i] = proto.Clone(r).(*pb.ReconciliationRecord)
	}
	return out
}

// RemovedJobs returns how many terminal jobs REMOVE_JOBS has taken out of the state and the
// proposer's timestamp (unix milliseconds) of the last removal, 0 before any.
func (f *FSM) RemovedJobs() (count uint64, lastAt int64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.removed, f.st.removedAt
}

// AppliedIndex returns the index of the last applied entry. After a restore it is the highest
// modify index found in the snapshot until the next entry is applied.
func (f *FSM) AppliedIndex() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.applied
}

// LocateAttempt finds the ExecutionVertex whose current execution has the attempt id.
func (f *FSM) LocateAttempt(attemptID string) (jobID, vertexID string, subtask int32, ok bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	ref, ok := f.st.attempts[attemptID]
	return ref.jobID, ref.vertexID, ref.subtask, ok
}
