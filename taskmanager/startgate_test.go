package taskmanager

import (
	"testing"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestStartGateOpensWhenEveryTaskOfItsBatchStarted: a batch's gate opens once each of its
// tasks has started or ended before it did, counting a task once however often it says so;
// an empty batch's gate is open.
func TestStartGateOpensWhenEveryTaskOfItsBatchStarted(t *testing.T) {
	g := newStartGate(3)
	tasks := []*task{{batch: g}, {batch: g}, {batch: g}}
	isOpen := func() bool {
		select {
		case <-g.open:
			return true
		default:
			return false
		}
	}
	tasks[0].markStarted()
	tasks[0].markStarted() // RUNNING, then the task's end: once
	tasks[1].markStarted()
	if isOpen() {
		t.Fatal("open with one task of three not started")
	}
	tasks[2].markStarted() // ended before RUNNING
	if !isOpen() {
		t.Fatal("closed with every task started")
	}
	select {
	case <-newStartGate(0).open:
	default:
		t.Fatal("the gate of an empty batch is closed")
	}
	(&task{}).markStarted() // a task without a batch (SubmitTask): nothing to tell
}

// TestSubtaskIndexFollowsTheTasks: admission finds an equal or newer attempt of a subtask
// through bySubtask, which follows the tasks listed and dropped (reaped, acknowledged), and
// forgets a subtask with no task left.
func TestSubtaskIndexFollowsTheTasks(t *testing.T) {
	tm := &TaskManager{}
	tm.table = newSlotTable(&tm.mu, "tm1", 1, false)
	d := func(job, attempt string, subtask, number int32) *task {
		return &task{tdd: &pb.TaskDeploymentDescriptor{JobId: job, VertexId: "v", SubtaskIndex: subtask, AttemptId: attempt, AttemptNumber: number}}
	}
	tm.table.addLocked(d("j", "a0", 0, 0))
	tm.table.addLocked(d("j", "a1", 0, 1))
	tm.table.addLocked(d("j", "b0", 1, 0))
	tm.table.addLocked(d("k", "c0", 0, 5))
	if o := tm.table.newerAttemptLocked(d("j", "new", 0, 1).tdd); o == nil || o.attempt() != "a1" {
		t.Fatalf("attempt 1 of j/v[0] against a1: %v", o)
	}
	if o := tm.table.newerAttemptLocked(d("j", "new", 0, 2).tdd); o != nil {
		t.Fatalf("attempt 2 of j/v[0]: refused by %s", o.attempt())
	}
	tm.table.dropLocked("a1")
	tm.table.dropLocked("a1")
	if o := tm.table.newerAttemptLocked(d("j", "new", 0, 1).tdd); o != nil {
		t.Fatalf("attempt 1 of j/v[0] after a1 was dropped: refused by %s", o.attempt())
	}
	tm.table.dropLocked("a0")
	if _, ok := tm.table.bySubtask[subtaskKey{"j", "v", 0}]; ok || len(tm.table.bySubtask) != 2 || len(tm.table.tasks) != 2 {
		t.Fatalf("after dropping j/v[0]'s tasks: %d subtasks indexed, %d tasks", len(tm.table.bySubtask), len(tm.table.tasks))
	}
}
