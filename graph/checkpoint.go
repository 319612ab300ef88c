package graph

import "github.com/jmcluster/jmcluster/transport/pb"

// Checkpoint settings, with Flink's option names and defaults (docs/checkpoints.md).
const (
	// MinCheckpointIntervalMs is the shortest execution.checkpointing.interval (Flink's
	// minimum), and the shortest timeout.
	MinCheckpointIntervalMs = 10
	// DefaultCheckpointTimeoutMs is execution.checkpointing.timeout's default: 10 minutes.
	DefaultCheckpointTimeoutMs = 10 * 60 * 1000
	// DefaultMaxConcurrentCheckpoints is execution.checkpointing.max-concurrent-checkpoints'
	// default.
	DefaultMaxConcurrentCheckpoints = 1
	// DefaultRetainedCheckpoints is execution.checkpointing.num-retained's default.
	DefaultRetainedCheckpoints = 1
	// MaxConcurrentCheckpoints and MaxRetainedCheckpoints bound what a job may ask for: every
	// pending and retained checkpoint is in the job's replicated record, with an
	// acknowledgement per subtask.
	MaxConcurrentCheckpoints = 16
	MaxRetainedCheckpoints   = 100
)

// CheckpointSettings are a job's checkpoint settings with the defaults filled in.
type CheckpointSettings struct {
	IntervalMs    int64
	TimeoutMs     int64
	MaxConcurrent int
	Retained      int
}

// Checkpointing returns the job's checkpoint settings, defaults filled in, and whether the job
// is checkpointed: a valid config with an interval. A config ValidateCheckpointConfig refuses
// leaves the job without checkpoints.
func Checkpointing(c *pb.CheckpointConfig) (CheckpointSettings, bool) {
	if c.GetIntervalMs() == 0 || checkpointProblems(c) != nil {
		return CheckpointSettings{}, false
	}
	s := CheckpointSettings{
		IntervalMs:    c.IntervalMs,
		TimeoutMs:     c.TimeoutMs,
		MaxConcurrent: int(c.MaxConcurrent),
		Retained:      int(c.Retained),
	}
	if s.TimeoutMs == 0 {
		s.TimeoutMs = DefaultCheckpointTimeoutMs
	}
	if s.MaxConcurrent == 0 {
		s.MaxConcurrent = DefaultMaxConcurrentCheckpoints
	}
	if s.Retained == 0 {
		s.Retained = DefaultRetainedCheckpoints
	}
	return s, true
}

// ValidateCheckpointConfig returns nil or a *ValidationError listing every value out of range
// (field paths under checkpoint_config). A nil config is valid (checkpointing off). The leader
// checks it on submission; SUBMIT_JOB does not (it keeps the meaning it had before
// checkpoints), and a trigger of a job whose config this refuses is refused.
func ValidateCheckpointConfig(c *pb.CheckpointConfig) error {
	if p := checkpointProblems(c); p != nil {
		return &ValidationError{Problems: p}
	}
	return nil
}

func checkpointProblems(c *pb.CheckpointConfig) []Problem {
	if c == nil {
		return nil
	}
	v := &validator{}
	if c.IntervalMs < 0 || (c.IntervalMs > 0 && c.IntervalMs < MinCheckpointIntervalMs) {
		v.add("checkpoint_config.interval_ms", "%d: must be 0 (checkpointing off) or at least %d", c.IntervalMs, MinCheckpointIntervalMs)
	}
	if c.TimeoutMs < 0 || (c.TimeoutMs > 0 && c.TimeoutMs < MinCheckpointIntervalMs) {
		v.add("checkpoint_config.timeout_ms", "%d: must be 0 (the default, %d) or at least %d", c.TimeoutMs, DefaultCheckpointTimeoutMs, MinCheckpointIntervalMs)
	}
	if c.MaxConcurrent < 0 || c.MaxConcurrent > MaxConcurrentCheckpoints {
		v.add("checkpoint_config.max_concurrent", "%d: must be in [0, %d] (0: the default, %d)", c.MaxConcurrent, MaxConcurrentCheckpoints, DefaultMaxConcurrentCheckpoints)
	}
	if c.Retained < 0 || c.Retained > MaxRetainedCheckpoints {
		v.add("checkpoint_config.retained", "%d: must be in [0, %d] (0: the default, %d)", c.Retained, MaxRetainedCheckpoints, DefaultRetainedCheckpoints)
	}
	return v.problems
}
