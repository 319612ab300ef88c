//go:build jmnext

package fsm

import (
	"sync/atomic"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// A build with -tags jmnext stands for a later version of jmcluster in the mixed-version test
// (cmd/jmnode TestMixedVersionReplicasSkipAnIgnorableCommand): it knows one command more,
// NextNoteType, which a leader of that build writes as ignorable once it is established
// (cluster/next_jmnext.go). Replicas of this build apply it (it changes nothing replicated);
// older replicas skip it.

// NextNoteType is the command type only a jmnext build knows.
const NextNoteType = pb.CommandType(1000)

// NextNotes counts the notes this replica applied.
var NextNotes atomic.Int64

func init() {
	register(NextNoteType, func(_ *state, i uint64, _ []byte) *Result {
		NextNotes.Add(1)
		return &Result{Index: i}
	})
}
