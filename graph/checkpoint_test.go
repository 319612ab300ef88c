package graph

import (
	"errors"
	"strings"
	"testing"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestCheckpointingDefaults: Flink's defaults fill what a config leaves at 0; no config or an
// interval of 0 is checkpointing off.
func TestCheckpointingDefaults(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  *pb.CheckpointConfig
		want CheckpointSettings
		on   bool
	}{
		{"no config", nil, CheckpointSettings{}, false},
		{"interval 0", &pb.CheckpointConfig{TimeoutMs: 5000, Retained: 3}, CheckpointSettings{}, false},
		{"defaults", &pb.CheckpointConfig{IntervalMs: 1000}, CheckpointSettings{IntervalMs: 1000, TimeoutMs: 600_000, MaxConcurrent: 1, Retained: 1}, true},
		{"set", &pb.CheckpointConfig{IntervalMs: 10, TimeoutMs: 20, MaxConcurrent: 16, Retained: 100}, CheckpointSettings{IntervalMs: 10, TimeoutMs: 20, MaxConcurrent: 16, Retained: 100}, true},
		{"out of range", &pb.CheckpointConfig{IntervalMs: 1000, Retained: 101}, CheckpointSettings{}, false},
	} {
		if got, on := Checkpointing(c.cfg); got != c.want || on != c.on {
			t.Errorf("%s: %+v %v, want %+v %v", c.name, got, on, c.want, c.on)
		}
	}
}

// TestValidateCheckpointConfig: every value out of range is named by its field path.
func TestValidateCheckpointConfig(t *testing.T) {
	if err := ValidateCheckpointConfig(nil); err != nil {
		t.Errorf("no config: %v", err)
	}
	if err := ValidateCheckpointConfig(&pb.CheckpointConfig{IntervalMs: 10, TimeoutMs: 10, MaxConcurrent: 16, Retained: 100}); err != nil {
		t.Errorf("the bounds: %v", err)
	}
	err := ValidateCheckpointConfig(&pb.CheckpointConfig{IntervalMs: 5, TimeoutMs: -1, MaxConcurrent: 17, Retained: -1})
	var ve *ValidationError
	if !errors.As(err, &ve) || !errors.Is(err, ErrInvalidJobGraph) || len(ve.Problems) != 4 {
		t.Fatalf("err = %v", err)
	}
	for _, f := range []string{"interval_ms", "timeout_ms", "max_concurrent", "retained"} {
		if !strings.Contains(err.Error(), "checkpoint_config."+f) {
			t.Errorf("%s is not named: %v", f, err)
		}
	}
	if err := ValidateCheckpointConfig(&pb.CheckpointConfig{IntervalMs: -1}); err == nil {
		t.Error("a negative interval is accepted")
	}
}
