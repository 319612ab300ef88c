package fsm

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// applier decodes one command payload, applies it to the state through one store method and
// returns the result. It runs under the FSM's write lock.
type applier func(s *state, index uint64, payload []byte) *Result

var appliers = map[pb.CommandType]applier{}

// register adds the applier of a command type. A type registered twice is a programming error.
func register(t pb.CommandType, fn applier) {
	if _, dup := appliers[t]; dup {
		panic(fmt.Sprintf("fsm: applier for %s registered twice", t))
	}
	appliers[t] = fn
}

func init() {
	register(pb.CommandType_COMMAND_TYPE_SUBMIT_JOB, func(s *state, i uint64, p []byte) *Result {
		return errResult(i, s.submitJob(i, decodePayload(p, &pb.SubmitJobCommand{})))
	})
	register(pb.CommandType_COMMAND_TYPE_SET_JOB_STATUS, func(s *state, i uint64, p []byte) *Result {
		return errResult(i, s.setStatus(i, decodePayload(p, &pb.SetJobStatusCommand{})))
	})
	register(pb.CommandType_COMMAND_TYPE_CREATE_ATTEMPTS, func(s *state, i uint64, p []byte) *Result {
		return errResult(i, s.createAttempts(i, decodePayload(p, &pb.CreateAttemptsCommand{})))
	})
	register(pb.CommandType_COMMAND_TYPE_UPDATE_EXECUTION_STATES, func(s *state, i uint64, p []byte) *Result {
		return &Result{Index: i, Value: s.updateStates(i, decodePayload(p, &pb.UpdateExecutionStatesCommand{}))}
	})
	register(pb.CommandType_COMMAND_TYPE_CANCEL_JOB, func(s *state, i uint64, p []byte) *Result {
		return errResult(i, s.cancelJob(i, decodePayload(p, &pb.CancelJobCommand{})))
	})
	register(pb.CommandType_COMMAND_TYPE_ESTABLISH_LEADERSHIP, func(s *state, i uint64, p []byte) *Result {
		return errResult(i, s.establishLeadership(i, decodePayload(p, &pb.EstablishLeadershipCommand{})))
	})
	register(pb.CommandType_COMMAND_TYPE_BEGIN_RECONCILIATION, func(s *state, i uint64, p []byte) *Result {
		return errResult(i, s.beginReconciliation(i, decodePayload(p, &pb.BeginReconciliationCommand{})))
	})
	register(pb.CommandType_COMMAND_TYPE_RECONCILE_JOB, func(s *state, i uint64, p []byte) *Result {
		return errResult(i, s.reconcileJob(i, decodePayload(p, &pb.ReconcileJobCommand{})))
	})
	if CommandLevel >= LevelReconcileKept {
		register(pb.CommandType_COMMAND_TYPE_RECONCILE_KEPT, func(s *state, i uint64, p []byte) *Result {
			return errResult(i, s.reconcileKept(i, decodePayload(p, &pb.ReconcileKeptCommand{})))
		})
	}
	if CommandLevel >= LevelCheckpoints {
		register(pb.CommandType_COMMAND_TYPE_TRIGGER_CHECKPOINT, func(s *state, i uint64, p []byte) *Result {
			c := decodePayload(p, &pb.TriggerCheckpointCommand{})
			defer s.recountCheckpoints(c.JobId)
			return checkpointResult(i)(s.triggerCheckpoint(i, c))
		})
		register(pb.CommandType_COMMAND_TYPE_ACK_CHECKPOINT, func(s *state, i uint64, p []byte) *Result {
			return checkpointResult(i)(s.ackCheckpoint(i, decodePayload(p, &pb.AckCheckpointCommand{})))
		})
		register(pb.CommandType_COMMAND_TYPE_COMPLETE_CHECKPOINT, func(s *state, i uint64, p []byte) *Result {
			c := decodePayload(p, &pb.CompleteCheckpointCommand{})
			defer s.recountCheckpoints(c.JobId)
			return checkpointResult(i)(s.completeCheckpoint(i, c))
		})
		register(pb.CommandType_COMMAND_TYPE_ABORT_CHECKPOINT, func(s *state, i uint64, p []byte) *Result {
			c := decodePayload(p, &pb.AbortCheckpointCommand{})
			defer s.recountCheckpoints(c.JobId)
			return checkpointResult(i)(s.abortCheckpoint(i, c))
		})
	}
	if CommandLevel >= LevelArtifacts {
		register(pb.CommandType_COMMAND_TYPE_ARTIFACT_BEGIN, func(s *state, i uint64, p []byte) *Result {
			v, err := s.artifactBegin(i, decodePayload(p, &pb.ArtifactBeginCommand{}))
			if err != nil {
				return errResult(i, err)
			}
			return &Result{Index: i, Value: v}
		})
		register(pb.CommandType_COMMAND_TYPE_ARTIFACT_CHUNK, func(s *state, i uint64, p []byte) *Result {
			return errResult(i, s.artifactChunk(decodePayload(p, &pb.ArtifactChunkCommand{})))
		})
		register(pb.CommandType_COMMAND_TYPE_ARTIFACT_COMMIT, func(s *state, i uint64, p []byte) *Result {
			return errResult(i, s.artifactCommit(i, decodePayload(p, &pb.ArtifactCommitCommand{})))
		})
		register(pb.CommandType_COMMAND_TYPE_ARTIFACT_ABORT, func(s *state, i uint64, p []byte) *Result {
			return errResult(i, s.artifactAbort(decodePayload(p, &pb.ArtifactAbortCommand{})))
		})
		register(pb.CommandType_COMMAND_TYPE_ARTIFACT_REMOVE, func(s *state, i uint64, p []byte) *Result {
			return errResult(i, s.artifactRemove(decodePayload(p, &pb.ArtifactRemoveCommand{})))
		})
	}
	register(pb.CommandType_COMMAND_TYPE_END_RECONCILIATION, func(s *state, i uint64, p []byte) *Result {
		return errResult(i, s.endReconciliation(i, decodePayload(p, &pb.EndReconciliationCommand{})))
	})
	register(pb.CommandType_COMMAND_TYPE_NOOP, func(_ *state, i uint64, _ []byte) *Result {
		return &Result{Index: i}
	})
	register(pb.CommandType_COMMAND_TYPE_REMOVE_JOBS, func(s *state, i uint64, p []byte) *Result {
		return errResult(i, s.removeJobs(i, decodePayload(p, &pb.RemoveJobsCommand{})))
	})
	register(pb.CommandType_COMMAND_TYPE_POOL_PUT, func(s *state, i uint64, p []byte) *Result {
		return errResult(i, s.poolPut(i, decodePayload(p, &pb.PoolPutCommand{})))
	})
	register(pb.CommandType_COMMAND_TYPE_POOL_REMOVE, func(s *state, i uint64, p []byte) *Result {
		return errResult(i, s.poolRemove(i, decodePayload(p, &pb.PoolRemoveCommand{})))
	})
	register(pb.CommandType_COMMAND_TYPE_POOL_ACK, func(s *state, i uint64, p []byte) *Result {
		return errResult(i, s.poolAck(i, decodePayload(p, &pb.PoolAckCommand{})))
	})
	register(pb.CommandType_COMMAND_TYPE_SET_DRAIN, func(s *state, i uint64, p []byte) *Result {
		return errResult(i, s.setDrain(i, decodePayload(p, &pb.SetDrainCommand{})))
	})
}

// decodePayload unmarshals a committed payload. A payload that does not decode would make
// replicas diverge if skipped, so it panics.
func decodePayload[T proto.Message](payload []byte, m T) T {
	if err := proto.Unmarshal(payload, m); err != nil {
		panic(fmt.Sprintf("fsm: decode %T payload: %v", m, err))
	}
	return m
}

func errResult(index uint64, err error) *Result {
	return &Result{Index: index, Err: err}
}

// checkpointResult makes the Result of a checkpoint command: its value, or its error alone.
func checkpointResult(index uint64) func(*pb.CheckpointCommandResult, error) *Result {
	return func(v *pb.CheckpointCommandResult, err error) *Result {
		if err != nil {
			return &Result{Index: index, Err: err}
		}
		return &Result{Index: index, Value: v}
	}
}
