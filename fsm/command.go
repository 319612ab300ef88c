package fsm

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// CommandLevel (level.go) is the newest set of commands this build applies, gossiped by every
// JobMaster (membership.Meta.FSMLevel): 1 adds RECONCILE_KEPT, 2 the checkpoint commands, 3 the
// artifact commands (store_artifacts.go, LevelArtifacts). A
// leader writes a command of a level only when every server of the Raft configuration gossips
// that level or a later one; builds before the level gossip 0.

// LevelReconcileKept is the level that added RECONCILE_KEPT.
const LevelReconcileKept = 1

// LevelCheckpoints is the level that added TRIGGER_CHECKPOINT, ACK_CHECKPOINT,
// COMPLETE_CHECKPOINT and ABORT_CHECKPOINT.
const LevelCheckpoints = 2

// EnvelopeVersion is the version written into every Command envelope.
const EnvelopeVersion = 1

// Encode wraps a command payload in the versioned envelope that is written to the Raft log.
func Encode(t pb.CommandType, m proto.Message) ([]byte, error) {
	if t == pb.CommandType_COMMAND_TYPE_UNSPECIFIED {
		return nil, errors.New("fsm: command type is unspecified")
	}
	payload, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("fsm: encode %s: %w", t, err)
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(&pb.Command{
		Version: EnvelopeVersion,
		Type:    t,
		Payload: payload,
	})
}

// Decode unwraps a log entry into its envelope.
func Decode(data []byte) (*pb.Command, error) {
	var c pb.Command
	if err := proto.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("fsm: decode envelope: %w", err)
	}
	if c.Version == 0 || c.Version > EnvelopeVersion {
		return nil, fmt.Errorf("fsm: unsupported envelope version %d", c.Version)
	}
	return &c, nil
}

// Result is what Apply returns for every entry: the Raft index, an optional value produced by
// the applier, and a domain error (a rejected command; replicas agree on it).
type Result struct {
	Index uint64
	Value proto.Message
	Err   error
}
