package taskmanager

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/internal/failpoint"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestOutboxOneWorkerPerAttempt: a message queued just after the attempt's worker delivered
// its last one (the worker is between removing it and looking at the queue again, held there by
// the outbox-after-send hook) is sent by that worker, not by a second one: two workers of one
// attempt send the same head twice and out of order. Every message reaches the leader once, in
// order. With the planted bug outbox-double-worker the second enqueue starts a worker.
func TestOutboxOneWorkerPerAttempt(t *testing.T) {
	for _, planted := range []bool{false, true} {
		t.Run(fmt.Sprintf("planted=%v", planted), func(t *testing.T) {
			jm := startJM(t)
			tm := newTM(t, "tm1", jm, nil)
			spec := "pause(outbox-after-send)"
			if planted {
				spec += ",outbox-double-worker"
			}
			failpoint.Set(t, spec)
			msg := func(s pb.ExecutionState) *outMsg {
				return &outMsg{attempt: "a", state: &pb.UpdateTaskExecutionStateRequest{TmId: "tm1", JobId: "job", AttemptId: "a", State: s}}
			}
			if !tm.outbox.enqueue(msg(running)) {
				t.Fatal("the first message started no worker")
			}
			waitFor(t, 20*time.Second, "the worker to deliver the first message and reach the hook", func() (bool, string) {
				return failpoint.Waiting(failpoint.OutboxAfterSend) == 1, fmt.Sprintf("accepted %v", jm.accepted("a"))
			})
			second := tm.outbox.enqueue(msg(finished))
			if planted {
				// The check must catch the planted bug.
				if !second {
					t.Fatal("with outbox-double-worker planted, the check saw one worker: it cannot catch the bug")
				}
				t.Log("caught: with outbox-double-worker planted a second worker started for attempt a")
				return
			}
			if second {
				t.Fatal("the message queued behind a live worker started a second worker for the attempt")
			}
			third := tm.outbox.enqueue(msg(canceled))
			if third {
				t.Fatal("a third message started a worker")
			}
			failpoint.Release(failpoint.OutboxAfterSend)
			waitFor(t, 20*time.Second, "every message delivered", func() (bool, string) {
				return tm.outbox.len() == 0 && len(jm.accepted("a")) >= 3, fmt.Sprintf("pending %d, accepted %v", tm.outbox.len(), jm.accepted("a"))
			})
			if got, want := jm.accepted("a"), []pb.ExecutionState{running, finished, canceled}; !slices.Equal(got, want) {
				t.Fatalf("the leader saw %v, want %v (each once, in order)", got, want)
			}
		})
	}
}
