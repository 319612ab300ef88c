package jobmaster

import (
	"context"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// Term is the port reconciliation works through: what it needs of the leadership term it runs
// in, and nothing else of the JobMaster. The term implements it; EstablishLeadership hands it
// to the Reconciler. Every TM call goes out with the term's epoch and ends with the term.
type Term interface {
	// Epoch is the term's epoch (every TM call is fenced with it).
	Epoch() uint64
	// Leader is this replica's id and advertised gRPC address (a report request names them).
	Leader() (id, grpcAddr string)
	// Commit encodes and commits one command through Raft; a domain error of the applier is
	// returned as the error.
	Commit(ctx context.Context, t pb.CommandType, m proto.Message) (*fsm.Result, error)
	// Jobs returns copies of every committed job; WithJob runs fn on one live job record, and
	// WithJobs on every one (ordered by create index), under the state's read lock (fn must
	// neither keep nor change them, nor take the term's other locks).
	Jobs() []*pb.JobRecord
	WithJob(id string, fn func(*pb.JobRecord)) bool
	WithJobs(fn func([]*pb.JobRecord))
	// TMs lists the TaskManagers the registry knows (registration and gossip); TM returns one.
	TMs() []TaskManager
	TM(id string) (TaskManager, bool)
	// Stream runs a streaming call on a TM's client, bounded by timeout.
	Stream(ctx context.Context, addr string, timeout time.Duration, fn func(context.Context, pb.TaskManagerServiceClient) error) error
	// Cancel asks the TM at addr to cancel an attempt the graph does not own there. It is the
	// scheduler's own path (sendCancel): sent once per attempt, TM and term (again after a
	// failure), asynchronously, with nothing committed.
	Cancel(jobID, attemptID, addr string)
	// Ack tells the TM at addr that the terminal states of these attempts are committed.
	Ack(ctx context.Context, addr string, attemptIDs []string) error
	// MarkLost marks a TM lost: it gets no new work until it registers or heartbeats again.
	MarkLost(tmID string)
	// NoteCheckpointReports hands the term the acknowledgements the reports carried (once the
	// gate opens, a pending checkpoint every subtask acknowledged is completed, any other
	// aborted) and what they said of the sinks' commits (the latest completed checkpoint is
	// announced again to the TMs whose sinks may have missed it).
	NoteCheckpointReports(acks []ReportedCheckpointAck, commits SinkCommits)
	// Times are the term's start for the failover timeline (unix ms, 0 when unknown): when
	// this node last heard from the previous leader, and when its epoch was committed.
	Times() (leaderLostAt, establishedAt int64)
}

// leaderContact is implemented by the Raft side (cluster.Node.PreviousLeaderContact).
type leaderContact interface{ PreviousLeaderContact() time.Time }

func (t *term) Times() (leaderLostAt, establishedAt int64) {
	if lc, ok := t.jm.raft.(leaderContact); ok {
		if at := lc.PreviousLeaderContact(); !at.IsZero() {
			leaderLostAt = at.UnixMilli()
		}
	}
	if ep := t.jm.state.Epoch(); ep.GetEpoch() == t.epoch {
		establishedAt = ep.GetTimestamp()
	}
	return leaderLostAt, establishedAt
}

var _ Term = (*term)(nil)

func (t *term) Epoch() uint64 { return t.epoch }

func (t *term) Leader() (id, grpcAddr string) { return t.jm.raft.ID(), t.jm.raft.GRPCAddr() }

func (t *term) Commit(ctx context.Context, typ pb.CommandType, m proto.Message) (*fsm.Result, error) {
	return t.jm.Commit(ctx, typ, m)
}

func (t *term) Jobs() []*pb.JobRecord { return t.jm.state.Jobs() }

func (t *term) WithJob(id string, fn func(*pb.JobRecord)) bool { return t.jm.state.WithJob(id, fn) }

func (t *term) WithJobs(fn func([]*pb.JobRecord)) { t.jm.state.WithJobs(fn) }

func (t *term) TMs() []TaskManager { return t.jm.tms.List() }

func (t *term) TM(id string) (TaskManager, bool) { return t.jm.tms.Get(id) }

func (t *term) Stream(ctx context.Context, addr string, timeout time.Duration, fn func(context.Context, pb.TaskManagerServiceClient) error) error {
	return t.jm.tms.Stream(ctx, addr, timeout, fn)
}

func (t *term) Cancel(jobID, attemptID, addr string) { t.cancelOnTM(addr, jobID, attemptID) }

func (t *term) Ack(ctx context.Context, addr string, attemptIDs []string) error {
	return t.jm.tms.Call(ctx, addr, func(ctx context.Context, c pb.TaskManagerServiceClient) error {
		_, err := c.AcknowledgeTerminal(ctx, &pb.AcknowledgeTerminalRequest{Epoch: t.epoch, AttemptIds: attemptIDs})
		return err
	})
}

func (t *term) MarkLost(tmID string) { t.jm.tms.MarkLost(tmID) }
