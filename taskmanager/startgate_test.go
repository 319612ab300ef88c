package taskmanager

import "testing"

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
