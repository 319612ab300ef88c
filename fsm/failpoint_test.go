package fsm

import (
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/internal/failpoint"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestNondeterministicApplyStampsTheReplicasClock: with the failpoint nondeterministic-apply,
// Apply replaces a submitted job's proposer timestamp with this replica's wall clock, so two
// replicas of one log hold different states (what the fault suite's state-hash checker must
// catch); without it, the proposer's timestamp stays and the replicas agree.
func TestNondeterministicApplyStampsTheReplicasClock(t *testing.T) {
	id := jobIDN(0)
	a, b := newHarness(t), newHarness(t)
	a.submit(streamingJob(id, 1, 1))
	b.submit(streamingJob(id, 1, 1))
	if got := a.job(id).SubmittedAt; got != 1000 || a.f.Hash() != b.f.Hash() {
		t.Fatalf("intact build: submitted_at %d (want the proposer's 1000), hashes %s and %s", got, a.f.Hash(), b.f.Hash())
	}

	failpoint.Set(t, failpoint.NondeterministicApply.Name())
	before := time.Now().UnixNano()
	id2 := jobIDN(1)
	a.submit(streamingJob(id2, 1, 1))
	after := time.Now().UnixNano()
	if got := a.job(id2).SubmittedAt; got < before || got > after {
		t.Fatalf("submitted_at %d, want this replica's clock in [%d, %d] instead of the proposer's 1000", got, before, after)
	}
	// A rejected submission is not stamped: it changes nothing.
	a.fails(submitT, &pb.SubmitJobCommand{JobGraph: streamingJob(id2, 1, 1), Timestamp: 1000}, ErrJobExists)
}
