package fsm

import "errors"

// Domain errors returned in Result.Err. Every replica returns the same error for the same entry.
var (
	ErrInvalidCommand      = errors.New("invalid command")
	ErrJobExists           = errors.New("job already exists")
	ErrUnknownJob          = errors.New("unknown job")
	ErrStatusMismatch      = errors.New("job status does not match the expected status")
	ErrJobTerminal         = errors.New("job is in a terminal status")
	ErrJobNotTerminal      = errors.New("job is not in a terminal status")
	ErrUnknownVertex       = errors.New("unknown execution vertex")
	ErrAttemptExists       = errors.New("attempt id already used")
	ErrStaleAttemptNumber  = errors.New("attempt number is not above the current one")
	ErrAttemptStillActive  = errors.New("current attempt is still active")
	ErrUnknownAttempt      = errors.New("unknown or stale attempt")
	ErrStaleEpoch          = errors.New("stale leader epoch")
	ErrNoReconciliation    = errors.New("no reconciliation in progress for the epoch")
	ErrReconciliationEnded = errors.New("reconciliation for the epoch already ended")
	ErrSnapshotCorrupt     = errors.New("snapshot is corrupt or truncated")
	ErrSnapshotVersion     = errors.New("unsupported snapshot version")
	ErrUnknownPoolMember   = errors.New("not a member of the TaskManager pool")
	ErrPoolFull            = errors.New("the TaskManager pool is full")

	// Checkpoints (store_checkpoints.go).
	ErrCheckpointingOff     = errors.New("checkpointing is off for the job")
	ErrJobNotRunning        = errors.New("job is not running")
	ErrCheckpointID         = errors.New("checkpoint id is not the job's next checkpoint id")
	ErrTooManyCheckpoints   = errors.New("the job's maximum of concurrent checkpoints is pending")
	ErrUnknownCheckpoint    = errors.New("unknown checkpoint")
	ErrCheckpointNotPending = errors.New("checkpoint is not pending")
	ErrCheckpointCompleted  = errors.New("checkpoint already completed")
	ErrStaleCheckpointAck   = errors.New("checkpoint acknowledged by an attempt that is not current")
	ErrCheckpointIncomplete = errors.New("checkpoint is not acknowledged by every subtask")

	// Artifacts (store_artifacts.go).
	ErrArtifactLimit    = errors.New("artifact limit reached")
	ErrArtifactMismatch = errors.New("artifact bytes do not match the declared size or sha256")
	ErrUnknownUpload    = errors.New("unknown artifact upload")
	ErrUnknownArtifact  = errors.New("unknown artifact")
	ErrArtifactInUse    = errors.New("artifact is in use")
)
