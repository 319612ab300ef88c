package jobmaster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// goroutineBlocked reports whether some goroutine's stack holds every one of frames, in a
// goroutine blocked on state (the bracketed wait reason, e.g. "sync.RWMutex.RLock"), and the
// number of goroutines seen.
func goroutineBlocked(state string, frames ...string) (bool, int) {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	stacks := bytes.Split(buf, []byte("\n\n"))
	for _, g := range stacks {
		s := string(g)
		first, _, _ := strings.Cut(s, "\n")
		if !strings.Contains(first, "["+state) {
			continue
		}
		all := true
		for _, f := range frames {
			all = all && strings.Contains(s, f)
		}
		if all {
			return true, len(stacks)
		}
	}
	return false, len(stacks)
}

// TestAllocateHoldsNoTermLockWhileReadingTheState: allocate reads the committed pool without
// holding the term's lock. The state is a sync.RWMutex, and Go's RWMutex lets no new reader in
// while a writer (Raft's Apply) waits: code that holds the term's lock while it waits for the
// read lock, beside code that takes the term's lock under the read lock, stops the leader for
// good — Apply waits for the reader, the reader for the term's lock, its holder for the read
// lock. The build of the 110 s stall (docs/testing.md) had both halves: allocate took the pool
// under t.mu, and the deployment check of every heartbeat took t.mu inside WithJob. The test
// recreates the waits: a reader holds the read lock, an Apply waits for the write lock, and
// allocate runs; once allocate waits for the read lock, the term's lock must be free.
func TestAllocateHoldsNoTermLockWhileReadingTheState(t *testing.T) {
	f, jm, _ := leadingJM(t, 1)
	term, err := jm.currentTerm()
	if err != nil {
		t.Fatal(err)
	}
	jm.tms.Upsert("tm1", "127.0.0.1:1", "127.0.0.1:2", 4, true) // usable: allocate asks the pool about it

	holding, release := make(chan struct{}), make(chan struct{})
	go f.WithJobs(func([]*pb.JobRecord) { close(holding); <-release })
	<-holding
	released := false
	unblock := func() {
		if !released {
			released = true
			close(release)
		}
	}
	defer unblock()

	committed := make(chan error, 1)
	go func() {
		_, err := jm.Commit(context.Background(), pb.CommandType_COMMAND_TYPE_CANCEL_JOB, &pb.CancelJobCommand{JobId: "none"})
		committed <- err
	}()
	waitFor(t, 10*time.Second, "the Apply waiting for the state's write lock", func() (bool, string) {
		ok, n := goroutineBlocked("sync.RWMutex.Lock", "fsm.(*FSM).Apply")
		return ok, fmt.Sprintf("not among %d goroutines", n)
	})

	allocated := make(chan struct{})
	go func() {
		_, _ = term.allocate(nil)
		close(allocated)
	}()
	waitFor(t, 10*time.Second, "allocate waiting for the state's read lock", func() (bool, string) {
		ok, n := goroutineBlocked("sync.RWMutex.RLock", "jobmaster.(*term).allocate")
		return ok, fmt.Sprintf("not among %d goroutines", n)
	})
	if !term.mu.TryLock() {
		unblock()
		t.Fatal("allocate holds the term's lock while it waits for the state's read lock behind a pending Apply: " +
			"any reader that takes the term's lock under the read lock then deadlocks the leader")
	}
	term.mu.Unlock()

	unblock()
	select {
	case err := <-committed:
		if !errors.Is(err, fsm.ErrUnknownJob) {
			t.Fatalf("the cancel of an unknown job committed with %v, want its refusal naming the job", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the Apply never finished after the reader let go")
	}
	select {
	case <-allocated:
	case <-time.After(10 * time.Second):
		t.Fatal("allocate never finished after the reader let go")
	}
}
