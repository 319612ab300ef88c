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

// TestDeploymentCheckAllocateAndApplyNeverDeadlock builds, with the real functions, the
// three-way wait that stopped the leader for the rest of a tms-from-leader run (docs/testing.md,
// "The 110 s stall"): allocate holds the term's lock, a heartbeat's deployment check holds the
// state's read lock, and an Apply waits for the write lock. The term's lock, held by the test,
// is queued for first by allocate and then by the deployment check (a heartbeat of tm1, with a
// job in the state), and an Apply is started; then the test lets go. On the build of the stall
// the deployment check took the term's lock inside WithJob and allocate read the pool under the
// term's lock, so allocate waited for the read lock behind the Apply, the Apply for the
// deployment check's read lock and the check for allocate's term lock, for good. Now neither
// holds one lock while it waits for the other: all three finish.
func TestDeploymentCheckAllocateAndApplyNeverDeadlock(t *testing.T) {
	_, jm, _ := leadingJM(t, 1)
	term, err := jm.currentTerm()
	if err != nil {
		t.Fatal(err)
	}
	jm.Registry().Upsert("tm1", "127.0.0.1:1", "127.0.0.1:2", 4, true)
	if _, _, err := jm.SubmitJob(context.Background(), chainJob()); err != nil {
		t.Fatal(err)
	}

	term.mu.Lock()
	locked := true
	unlock := func() {
		if locked {
			locked = false
			term.mu.Unlock()
		}
	}
	defer unlock()
	allocated := make(chan struct{})
	go func() {
		_, _ = term.allocate(nil)
		close(allocated)
	}()
	waitFor(t, 10*time.Second, "allocate waiting for the term's lock", func() (bool, string) {
		ok, n := goroutineBlocked("sync.Mutex.Lock", "jobmaster.(*term).allocate")
		return ok, fmt.Sprintf("not among %d goroutines", n)
	})
	checked := make(chan struct{})
	go func() {
		term.checkDeployment(&pb.HeartbeatRequest{TmId: "tm1"})
		close(checked)
	}()
	waitFor(t, 10*time.Second, "the deployment check waiting for the term's lock", func() (bool, string) {
		ok, n := goroutineBlocked("sync.Mutex.Lock", "jobmaster.(*term).checkDeployment")
		return ok, fmt.Sprintf("not among %d goroutines", n)
	})
	committed := make(chan error, 1)
	go func() {
		_, err := jm.Commit(context.Background(), pb.CommandType_COMMAND_TYPE_CANCEL_JOB, &pb.CancelJobCommand{JobId: "none"})
		committed <- err
	}()
	// The Apply either commits at once (nobody holds the read lock) or waits for the write lock.
	var commitErr error
	done := false
	waitFor(t, 10*time.Second, "the Apply committed or waiting for the write lock", func() (bool, string) {
		select {
		case commitErr = <-committed:
			done = true
			return true, ""
		default:
		}
		ok, n := goroutineBlocked("sync.RWMutex.Lock", "fsm.(*FSM).Apply")
		return ok, fmt.Sprintf("not among %d goroutines", n)
	})
	unlock()

	deadline := time.After(10 * time.Second)
	for _, w := range []struct {
		what string
		ch   <-chan struct{}
	}{{"allocate", allocated}, {"the deployment check", checked}} {
		select {
		case <-w.ch:
		case <-deadline:
			_, a := goroutineBlocked("sync.RWMutex.RLock", "jobmaster.(*term).allocate")
			t.Fatalf("%s never finished: allocate, the deployment check and the Apply wait on each other (%d goroutines)", w.what, a)
		}
	}
	if !done {
		select {
		case commitErr = <-committed:
		case <-deadline:
			t.Fatal("the Apply never finished")
		}
	}
	if !errors.Is(commitErr, fsm.ErrUnknownJob) {
		t.Fatalf("the cancel of an unknown job: %v, want its refusal", commitErr)
	}
}
