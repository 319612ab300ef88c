package taskmanager

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/jmcluster/jmcluster/taskmanager/operators"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// validateTDD checks a TaskDeploymentDescriptor and returns every problem found, wrapped in
// ErrInvalidTask. Every input channel must be listed; its producer fields may be empty until
// UpdatePartitionInfo fills them.
func validateTDD(d *pb.TaskDeploymentDescriptor, slots int) error {
	if d == nil {
		return fmt.Errorf("%w: task is missing", ErrInvalidTask)
	}
	var p []string
	add := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	if d.GetJobId() == "" {
		add("job_id is empty")
	}
	if d.GetVertexId() == "" {
		add("vertex_id is empty")
	}
	if d.GetAttemptId() == "" {
		add("attempt_id is empty")
	}
	if d.GetSubtaskIndex() < 0 {
		add("subtask_index %d < 0", d.GetSubtaskIndex())
	}
	if d.GetParallelism() > 0 && d.GetSubtaskIndex() >= d.GetParallelism() {
		add("subtask_index %d >= parallelism %d", d.GetSubtaskIndex(), d.GetParallelism())
	}
	if d.GetAttemptNumber() < 0 {
		add("attempt_number %d < 0", d.GetAttemptNumber())
	}
	if s := d.GetSlotIndex(); s < 0 || int(s) >= slots {
		add("slot_index %d out of range [0,%d)", s, slots)
	}
	op := d.GetOperator()
	if err := operators.Validate(op); err != nil {
		add("operator: %v", err)
	} else {
		switch {
		case operators.IsSource(op) && len(d.GetInputs()) > 0:
			add("source %s must have no inputs", operators.Kind(op))
		case !operators.IsSource(op) && len(d.GetInputs()) == 0:
			add("operator %s needs at least one input", operators.Kind(op))
		}
		if operators.IsSink(op) && len(d.GetProduced()) > 0 {
			add("sink %s must produce no result", operators.Kind(op))
		}
		if tmpl := operators.SinkTemplate(op); tmpl != "" {
			if _, err := operators.SinkPath(tmpl, sinkInfo(d, "")); err != nil {
				add("operator: %v", err)
			}
		}
	}
	results := map[string]bool{}
	for i, pd := range d.GetProduced() {
		switch {
		case pd.GetResultId() == "":
			add("produced[%d]: result_id is empty", i)
		case results[pd.GetResultId()]:
			add("produced[%d]: duplicate result %q", i, pd.GetResultId())
		}
		results[pd.GetResultId()] = true
		if pd.GetNumSubpartitions() < 1 {
			add("produced[%d]: num_subpartitions %d < 1", i, pd.GetNumSubpartitions())
		}
		if pd.GetPartitionIndex() < 0 {
			add("produced[%d]: partition_index %d < 0", i, pd.GetPartitionIndex())
		}
	}
	gates := map[string]bool{}
	for i, g := range d.GetInputs() {
		switch {
		case g.GetResultId() == "":
			add("inputs[%d]: result_id is empty", i)
		case gates[g.GetResultId()]:
			add("inputs[%d]: duplicate input result %q", i, g.GetResultId())
		}
		gates[g.GetResultId()] = true
		if len(g.GetChannels()) == 0 {
			add("inputs[%d]: no input channels", i)
		}
		seen := map[int32]bool{}
		for j, c := range g.GetChannels() {
			if c.GetResultId() != "" && c.GetResultId() != g.GetResultId() {
				add("inputs[%d].channels[%d]: result %q differs from the gate's %q", i, j, c.GetResultId(), g.GetResultId())
			}
			if c.GetPartitionIndex() < 0 || c.GetSubpartitionIndex() < 0 {
				add("inputs[%d].channels[%d]: negative partition or subpartition index", i, j)
			}
			if seen[c.GetPartitionIndex()] {
				add("inputs[%d].channels[%d]: duplicate channel for partition %d", i, j, c.GetPartitionIndex())
			}
			seen[c.GetPartitionIndex()] = true
			if (c.GetProducerAttemptId() == "") != (c.GetProducerDataAddress() == "") {
				add("inputs[%d].channels[%d]: producer attempt and data address must be given together", i, j)
			}
		}
	}
	if len(p) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidTask, strings.Join(p, "; "))
	}
	return nil
}

// sinkInfo is the part of operators.Info a sink path expands.
func sinkInfo(d *pb.TaskDeploymentDescriptor, workDir string) operators.Info {
	return operators.Info{Job: d.GetJobId(), Vertex: d.GetVertexId(), Subtask: d.GetSubtaskIndex(), AttemptID: d.GetAttemptId(), WorkDir: workDir}
}

// validateSinkTarget resolves a sink's final path inside the work directory before the task is
// accepted, and refuses it when it leads out: through a symlink in the work directory that
// points outside it (or is absolute), for the file and, for a checksum sink, for its temporary
// file. It only looks (os.Root.Stat); the sink itself opens the file through an os.Root again,
// so a symlink planted after this check is refused as well (the task then FAILS at open).
// validateTDD must have accepted d.
func validateSinkTarget(d *pb.TaskDeploymentDescriptor, workDir string) error {
	tmpl := operators.SinkTemplate(d.GetOperator())
	if tmpl == "" {
		return nil
	}
	p, err := operators.SinkPath(tmpl, sinkInfo(d, workDir))
	if err != nil {
		return fmt.Errorf("%w: operator: %v", ErrInvalidTask, err)
	}
	if workDir == "" {
		workDir = "."
	}
	root, err := os.OpenRoot(workDir)
	if err != nil {
		return fmt.Errorf("%w: work dir: %v", ErrInvalidTask, err)
	}
	defer root.Close()
	check := []string{p}
	if _, ok := d.GetOperator().GetKind().(*pb.Operator_ChecksumSink); ok {
		check = append(check, p+".tmp")
	}
	for _, c := range check {
		if _, err := root.Stat(c); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: operator: sink path %q resolves outside the work dir or cannot be used: %v", ErrInvalidTask, c, err)
		}
	}
	return nil
}
