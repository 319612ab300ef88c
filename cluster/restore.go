package cluster

import (
	"bytes"
	"context"
	"fmt"

	"github.com/hashicorp/raft"
)

// restoreReq is a snapshot restore handed to the leader loop (Node.Restore).
type restoreReq struct {
	prepare func(minEpoch uint64) ([]byte, error)
	done    chan restoreResult
}

type restoreResult struct {
	index, minEpoch uint64
	err             error
}

// Restore replaces the replicated state with a snapshot, for disaster recovery into a cluster
// that lost its state (every JobMaster wiped): hashicorp/raft's user restore makes the leader
// take the snapshot's state at a new log index and sends it to the followers as a snapshot.
// prepare returns the FSM's snapshot stream with its leader epoch raised to at least minEpoch,
// the highest epoch a TaskManager is known to have seen or this cluster committed; the leader
// then establishes leadership again at the next epoch, above anything a TaskManager has seen,
// and reconciles the restored state with the running tasks. It runs in the leader loop between
// terms (a term in progress is revoked first). It returns the index the state was restored at
// and minEpoch.
func (n *Node) Restore(ctx context.Context, prepare func(minEpoch uint64) ([]byte, error)) (index, minEpoch uint64, err error) {
	if err := n.checkLeader(); err != nil {
		return 0, 0, err
	}
	if !n.restoring.CompareAndSwap(false, true) {
		return 0, 0, fmt.Errorf("%w: a snapshot restore is in progress on this leader", ErrRestoreInProgress)
	}
	defer n.restoring.Store(false)
	req := restoreReq{prepare: prepare, done: make(chan restoreResult, 1)}
	select {
	case n.restoreCh <- req:
	case <-ctx.Done():
		return 0, 0, fmt.Errorf("cluster: restore not started: %w", ctx.Err())
	case <-n.ctx.Done():
		return 0, 0, ErrShutdown
	}
	select {
	case res := <-req.done:
		return res.index, res.minEpoch, res.err
	case <-ctx.Done():
		return 0, 0, fmt.Errorf("cluster: restore under way, its outcome unknown: %w", ctx.Err())
	}
}

// restore runs a restore request in the leader loop (no term in progress).
func (n *Node) restore(ctx context.Context, req restoreReq) restoreResult {
	floor, by := n.seenEpoch()
	floor = max(floor, n.sm.Epoch().GetEpoch())
	stream, err := req.prepare(floor)
	if err != nil {
		return restoreResult{err: err}
	}
	if ctx.Err() != nil {
		return restoreResult{err: fmt.Errorf("cluster: restore: %w", ErrLeadershipLost)}
	}
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Size: int64(len(stream))}
	if err := n.raft.Restore(meta, bytes.NewReader(stream), n.cfg.EstablishTimeout); err != nil {
		return restoreResult{err: fmt.Errorf("cluster: restore: %w", mapRaftErr(err))}
	}
	n.behind.Store(nil)
	index := n.raft.LastIndex()
	n.logger.Warn("replicated state restored from a snapshot", "index", index, "epoch_floor", floor, "floor_from", by, "bytes", len(stream))
	return restoreResult{index: index, minEpoch: floor}
}
