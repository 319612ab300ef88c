package cluster

import "errors"

// Sentinel errors of the Raft node. Callers test them with errors.Is; the gRPC edge maps them
// to status codes.
var (
	// ErrNotLeader: the operation needs the Raft leader and this node is not it.
	ErrNotLeader = errors.New("cluster: not the leader")
	// ErrNoLeader: no leader (with a known gRPC address) appeared within the hold time.
	ErrNoLeader = errors.New("cluster: no leader")
	// ErrShutdown: the node has been shut down.
	ErrShutdown = errors.New("cluster: node is shut down")
	// ErrNotEstablished: this node is the Raft leader but has not committed its
	// EstablishLeadership entry yet (or it failed); leader-only work must wait.
	ErrNotEstablished = errors.New("cluster: leadership not established")
	// ErrLeadershipLost: leadership was lost while an entry was in flight; whether it commits
	// is unknown, so only idempotent commands may be retried.
	ErrLeadershipLost = errors.New("cluster: leadership lost; outcome unknown")
	// ErrOutcomeUnknown: the wait for an entry ended (its deadline passed, raft's enqueue
	// timed out) before raft answered; it may still commit. Transient: retried by clients with
	// idempotent commands, never reported as a rejection.
	ErrOutcomeUnknown = errors.New("cluster: outcome unknown")
	// ErrUnknownServer: the operation names a server that is not in the Raft configuration.
	ErrUnknownServer = errors.New("cluster: no such server in the Raft configuration")
	// ErrNoTransferTarget: a leadership transfer names this leader itself, a non-voter, or
	// there is no other voter.
	ErrNoTransferTarget = errors.New("cluster: no voter to hand leadership to")
	// ErrStateBehind: a TaskManager has seen a leader epoch above every epoch this cluster's
	// state holds, so the state was lost (every JobMaster wiped, or restored from an older
	// copy); the leader does not establish leadership until a snapshot is restored.
	ErrStateBehind = errors.New("cluster: the replicated state is behind what the TaskManagers have seen")
	// ErrRestoreInProgress: a second snapshot restore while one runs.
	ErrRestoreInProgress = errors.New("cluster: restore in progress")
	// ErrInvalidConfig: the Config failed validation.
	ErrInvalidConfig = errors.New("cluster: invalid config")
)
