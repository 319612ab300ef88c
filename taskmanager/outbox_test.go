package taskmanager

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

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

func TestOutboxRetriesInOrder(t *testing.T) {
	jm := startJM(t)
	jm.mu.Lock()
	jm.refuse = 7
	jm.mu.Unlock()
	tm := newTM(t, "tm1", jm, nil)
	c := client(t, tm)
	submit(t, c, 1, source("job", "src", 0, 2, "a", 0, &pb.SequenceSource{Count: 10}))
	submit(t, c, 1, source("job", "src", 1, 2, "b", 1, &pb.SequenceSource{Count: 10}))
	jm.waitState(t, "a", finished)
	jm.waitState(t, "b", finished)
	waitFor(t, 5*time.Second, "empty outbox", func() (bool, string) { return tm.OutboxLen() == 0, fmt.Sprint(tm.OutboxLen()) })

	jm.mu.Lock()
	defer jm.mu.Unlock()
	if jm.refuse != 0 {
		t.Fatalf("only %d refusals used", 7-jm.refuse)
	}
	seqs := map[string]uint64{} // attempt/state -> sequence
	for _, u := range jm.updates {
		k := u.attempt + "/" + u.state.String()
		if s, ok := seqs[k]; ok && s != u.seq {
			t.Fatalf("%s retried with sequence %d, first sent with %d", k, u.seq, s)
		}
		seqs[k] = u.seq
	}
	for _, a := range []string{"a", "b"} {
		var got []pb.ExecutionState
		for _, u := range jm.updates {
			if u.attempt == a && u.accepted {
				got = append(got, u.state)
			}
		}
		if len(got) != 2 || got[0] != running || got[1] != finished {
			t.Fatalf("%s delivered %v, want [RUNNING FINISHED] exactly once", a, got)
		}
		if seqs[a+"/"+running.String()] >= seqs[a+"/"+finished.String()] {
			t.Fatalf("%s: RUNNING sequence not below FINISHED: %v", a, seqs)
		}
		// No FINISHED was sent before RUNNING was accepted.
		runningAccepted := false
		for _, u := range jm.updates {
			if u.attempt != a {
				continue
			}
			if u.state == finished && !runningAccepted {
				t.Fatalf("%s: FINISHED sent before RUNNING was accepted", a)
			}
			if u.state == running && u.accepted {
				runningAccepted = true
			}
		}
	}
}

func TestNotAcceptedCancelsAttempt(t *testing.T) {
	jm := startJM(t)
	jm.mu.Lock()
	jm.disown["orphan"] = true
	jm.mu.Unlock()
	tm := newTM(t, "tm1", jm, nil)
	c := client(t, tm)
	submit(t, c, 1, source("job", "src", 0, 1, "orphan", 0, unbounded))
	waitFor(t, 10*time.Second, "orphan cancelled", func() (bool, string) {
		ti, _ := findTask(tm, "orphan")
		return ti.State == canceled && tm.FreeSlots() == 4, fmt.Sprintf("%+v free=%d", ti, tm.FreeSlots())
	})
	waitFor(t, 5*time.Second, "empty outbox", func() (bool, string) { return tm.OutboxLen() == 0, fmt.Sprint(tm.OutboxLen()) })
	jm.mu.Lock()
	defer jm.mu.Unlock()
	for _, u := range jm.updates {
		if u.attempt == "orphan" && u.state != running {
			t.Fatalf("orphan reported %v after the leader disowned it", u.state)
		}
	}
}

// TestFinalRefusalCancelsAttempt: the leader refuses an attempt's state update with a final
// code (FAILED_PRECONDITION: the graph's deterministic answer). The TM neither drops the update
// and runs on unowned nor retries forever: it cancels the attempt locally and reports nothing
// more of it.
func TestFinalRefusalCancelsAttempt(t *testing.T) {
	jm := startJM(t)
	jm.mu.Lock()
	jm.reject["refused"] = true
	jm.mu.Unlock()
	tm := newTM(t, "tm1", jm, nil)
	submit(t, client(t, tm), 1, source("job", "src", 0, 1, "refused", 0, unbounded))
	waitFor(t, 10*time.Second, "the refused attempt cancelled", func() (bool, string) {
		ti, _ := findTask(tm, "refused")
		return ti.State == canceled && tm.FreeSlots() == 4, fmt.Sprintf("%+v free=%d", ti, tm.FreeSlots())
	})
	waitFor(t, 5*time.Second, "empty outbox", func() (bool, string) { return tm.OutboxLen() == 0, fmt.Sprint(tm.OutboxLen()) })
	jm.mu.Lock()
	defer jm.mu.Unlock()
	for _, u := range jm.updates {
		if u.attempt == "refused" && u.state != running {
			t.Fatalf("the refused attempt reported %v after the refusal", u.state)
		}
	}
}

// heldJM is a testJM whose UpdateTaskExecutionState calls wait until release is closed,
// counting the calls open at once.
type heldJM struct {
	*testJM
	release    chan struct{}
	open, peak atomic.Int64
}

func (h *heldJM) UpdateTaskExecutionState(ctx context.Context, r *pb.UpdateTaskExecutionStateRequest) (*pb.UpdateTaskExecutionStateResponse, error) {
	n := h.open.Add(1)
	defer h.open.Add(-1)
	for p := h.peak.Load(); n > p && !h.peak.CompareAndSwap(p, n); p = h.peak.Load() {
	}
	select {
	case <-h.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return h.testJM.UpdateTaskExecutionState(ctx, r)
}

// TestOutboxBoundsCallsInFlight: with 3 x outboxMaxInFlight attempts each sending a state
// update to a leader that holds every call, the leader sees outboxMaxInFlight calls open at
// once, never more; released, every update arrives.
func TestOutboxBoundsCallsInFlight(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	jm := &testJM{addr: l.Addr().String(), srv: grpc.NewServer(), disown: map[string]bool{}, reject: map[string]bool{}, epoch: 1}
	h := &heldJM{testJM: jm, release: make(chan struct{})}
	pb.RegisterJobMasterServiceServer(jm.srv, h)
	pb.RegisterClientServiceServer(jm.srv, jm)
	go func() { _ = jm.srv.Serve(l) }()
	t.Cleanup(jm.srv.Stop)
	tm := newTM(t, "tm1", jm, nil)
	const n = 3 * outboxMaxInFlight
	for i := range n {
		a := fmt.Sprintf("a%d", i)
		tm.outbox.enqueue(&outMsg{attempt: a, state: &pb.UpdateTaskExecutionStateRequest{TmId: "tm1", JobId: "job", AttemptId: a, State: running}})
	}
	waitFor(t, 20*time.Second, "the bound's calls open at the leader", func() (bool, string) {
		return h.open.Load() == outboxMaxInFlight, fmt.Sprintf("%d open", h.open.Load())
	})
	close(h.release)
	waitFor(t, 20*time.Second, "every update delivered", func() (bool, string) {
		jm.mu.Lock()
		got := len(jm.updates)
		jm.mu.Unlock()
		return tm.outbox.len() == 0 && got >= n, fmt.Sprintf("pending %d, delivered %d", tm.outbox.len(), got)
	})
	if p := h.peak.Load(); p > outboxMaxInFlight {
		t.Fatalf("the leader saw %d calls open at once, more than %d", p, outboxMaxInFlight)
	}
	t.Logf("%d updates, at most %d calls open at once", n, h.peak.Load())
}
