package taskmanager

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/jmcluster/jmcluster/dataplane"
	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/internal/logsum"
	"github.com/jmcluster/jmcluster/operator"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// validateTDD checks a TaskDeploymentDescriptor and returns every problem found, wrapped in
// ErrInvalidTask. Every input channel must be listed; its producer fields may be empty until
// UpdatePartitionInfo fills them.
func validateTDD(d *pb.TaskDeploymentDescriptor, slots int, shared *sharedLists) error {
	if d == nil {
		return fmt.Errorf("%w: task is missing", ErrInvalidTask)
	}
	if p := tddProblems(d, slots, shared); len(p) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidTask, logsum.Joined(p, "; "))
	}
	return nil
}

// tddProblems lists every problem of a descriptor, in the "field: message" form of
// graph.Problem where a field is named.
func tddProblems(d *pb.TaskDeploymentDescriptor, slots int, shared *sharedLists) []string {
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
	// The operator: the catalogue's checks, the same JobGraph validation makes (graph).
	op := d.GetOperator()
	for _, pr := range graph.ValidateOperator(op, taskInfo(d, "").Env()) {
		pr.Field = strings.TrimSuffix("operator."+pr.Field, ".")
		add("%s", pr)
	}
	recordOutputs := 0
	for _, pd := range d.GetProduced() {
		if !pd.GetDeadLetters() {
			recordOutputs++
		}
	}
	for _, w := range graph.WiringProblems(d.GetVertexId(), graph.OperatorRoleOf(op), len(d.GetInputs()), recordOutputs) {
		add("%s", w)
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
		if r := g.GetSharedChannels(); r != 0 {
			switch {
			case len(g.GetChannels()) > 0:
				add("inputs[%d]: has both channels and shared_channels %d", i, r)
			case int(r) > shared.len():
				add("inputs[%d]: shared_channels %d, but the request has %d shared channel lists", i, r, shared.len())
			case shared.problems[r-1] != "":
				add("inputs[%d]: shared_channels[%d]: %s", i, r-1, shared.problems[r-1])
			case shared.lists[r-1].GetChannels()[0].GetResultId() != g.GetResultId():
				add("inputs[%d]: shared_channels[%d] are of result %q, not the gate's %q", i, r-1, shared.lists[r-1].GetChannels()[0].GetResultId(), g.GetResultId())
			}
			if g.GetSubpartitionIndex() < 0 {
				add("inputs[%d]: negative subpartition index", i)
			}
			continue
		}
		if g.GetSubpartitionIndex() != 0 {
			add("inputs[%d]: subpartition_index without shared_channels", i)
		}
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
	return p
}

// taskInfo is the operator.Info of a descriptor's task (without its logger).
func taskInfo(d *pb.TaskDeploymentDescriptor, workDir string) operator.Info {
	return operator.Info{
		Job: d.GetJobId(), Vertex: d.GetVertexId(), Subtask: d.GetSubtaskIndex(),
		Parallelism: d.GetParallelism(), AttemptID: d.GetAttemptId(), AttemptNumber: d.GetAttemptNumber(),
		JobType: d.GetJobType(), WorkDir: workDir,
	}
}

// validateSinkTarget resolves a sink's final path inside the work directory before the task is
// accepted, and refuses it when it leads out: through a symlink in the work directory that
// points outside it (or is absolute), for the file and, for a checksum sink, for its temporary
// file. It only looks (os.Root.Stat); the sink itself opens the file through an os.Root again,
// so a symlink planted after this check is refused as well (the task then FAILS at open).
// validateTDD must have accepted d.
func validateSinkTarget(d *pb.TaskDeploymentDescriptor, workDir string) error {
	files, err := operator.SinkFiles(d.GetOperator(), taskInfo(d, workDir))
	if err != nil {
		return fmt.Errorf("%w: operator: %v", ErrInvalidTask, err)
	}
	if len(files) == 0 {
		return nil
	}
	if workDir == "" {
		workDir = "."
	}
	root, err := os.OpenRoot(workDir)
	if err != nil {
		return fmt.Errorf("%w: work dir: %v", ErrInvalidTask, err)
	}
	defer root.Close()
	for _, c := range files {
		if _, err := root.Stat(c); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: operator: sink path %q resolves outside the work dir or cannot be used: %v", ErrInvalidTask, c, err)
		}
	}
	return nil
}

// sharedLists are the shared channel lists of a SubmitTasks request, each checked once for
// all the gates that refer to it: problems[i] says what is wrong with lists[i] ("" when
// nothing).
type sharedLists struct {
	lists    []*pb.SharedChannels
	problems []string
	// lookups: the lookup slots the gates of one list share (dataplane.Lookups).
	lookups dataplane.Lookups
}

// gates builds a task's input gates (s may be nil: no shared lists).
func (s *sharedLists) gates(tdd *pb.TaskDeploymentDescriptor) []*dataplane.InputGate {
	if s == nil {
		return dataplane.BuildGates(tdd, nil, nil)
	}
	return dataplane.BuildGates(tdd, s.lists, &s.lookups)
}

func (s *sharedLists) len() int {
	if s == nil {
		return 0
	}
	return len(s.lists)
}

// checkSharedLists checks every list: not empty, one result named by every channel, each
// partition once, subpartition indexes left to the gates, producer fields given together.
func checkSharedLists(lists []*pb.SharedChannels) *sharedLists {
	s := &sharedLists{lists: lists, problems: make([]string, len(lists))}
	for i, l := range lists {
		chs := l.GetChannels()
		if len(chs) == 0 {
			s.problems[i] = "no channels"
			continue
		}
		result := chs[0].GetResultId()
		seen := make(map[int32]bool, len(chs))
		for j, c := range chs {
			problem := ""
			switch {
			case result == "":
				problem = "channels[0]: result_id is empty"
			case c.GetResultId() != result:
				problem = fmt.Sprintf("channels[%d]: result %q differs from channels[0]'s %q", j, c.GetResultId(), result)
			case c.GetPartitionIndex() < 0:
				problem = fmt.Sprintf("channels[%d]: negative partition index", j)
			case c.GetSubpartitionIndex() != 0:
				problem = fmt.Sprintf("channels[%d]: subpartition_index is set (a gate gives it)", j)
			case seen[c.GetPartitionIndex()]:
				problem = fmt.Sprintf("channels[%d]: duplicate channel for partition %d", j, c.GetPartitionIndex())
			case (c.GetProducerAttemptId() == "") != (c.GetProducerDataAddress() == ""):
				problem = fmt.Sprintf("channels[%d]: producer attempt and data address must be given together", j)
			}
			if problem != "" {
				s.problems[i] = problem
				break
			}
			seen[c.GetPartitionIndex()] = true
		}
	}
	return s
}
