package jobmaster

import (
	"context"
	"slices"
	"sync"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// The TaskManager pool on the leader's side: a TM that registers for the first time becomes a
// member (POOL_PUT, committed before the registration is answered), every heartbeat of a TM
// whose pool revision differs gets the pool view, and
// the versions TMs confirm are committed in batches on the term's tick (POOL_ACK), so the
// leader knows which pools a silent TM may be counting on (isolation.go).

// poolKeeper is the term's volatile pool work (guarded by mu).
type poolKeeper struct {
	mu      sync.Mutex
	putting map[string]bool   // TMs whose POOL_PUT is in flight
	acks    map[string]uint64 // versions confirmed in heartbeats, not yet committed
	view    *pb.PoolView      // the view of view.Version, built once per version
}

func newPoolKeeper() *poolKeeper {
	return &poolKeeper{putting: map[string]bool{}, acks: map[string]uint64{}}
}

// poolOnRegister makes a registering TM a member, committed before the registration is
// answered (the answer carries the version that added it, which the FSM counts as its ack),
// or updates its address or incarnation in the background (a new revision: the membership and
// the TM's pools are unchanged).
func (w *tmWatch) poolOnRegister(ctx context.Context, id, grpcAddr, incarnation string) error {
	m, _, _, ok := w.jm.state.PoolMember(id)
	if !ok {
		_, err := w.jm.Commit(ctx, pb.CommandType_COMMAND_TYPE_POOL_PUT, &pb.PoolPutCommand{TmId: id, GrpcAddress: grpcAddr, Incarnation: incarnation})
		return err
	}
	if m.GrpcAddress == grpcAddr && m.Incarnation == incarnation {
		return nil
	}
	p := w.pool
	p.mu.Lock()
	if p.putting[id] {
		p.mu.Unlock()
		return nil
	}
	p.putting[id] = true
	p.mu.Unlock()
	w.spawn(func() {
		defer func() {
			p.mu.Lock()
			delete(p.putting, id)
			p.mu.Unlock()
		}()
		if _, err := w.jm.Commit(w.ctx, pb.CommandType_COMMAND_TYPE_POOL_PUT, &pb.PoolPutCommand{TmId: id, GrpcAddress: grpcAddr, Incarnation: incarnation}); err != nil {
			w.jm.log.Warn("commit pool member", "tm", id, "error", err)
		}
	})
	return nil
}

// poolOnHeartbeat notes the pool version a TM confirmed and returns the view when the TM's
// revision is not the current one. Only members get the view, so a TM knows no version older
// than the one that added it (fsm.PoolVersions counts on it).
func (w *tmWatch) poolOnHeartbeat(id string, version, revision uint64) *pb.PoolView {
	m, current, rev, ok := w.jm.state.PoolMember(id)
	if !ok {
		return nil
	}
	if version > m.AckedVersion && version <= current {
		w.pool.mu.Lock()
		w.pool.acks[id] = max(w.pool.acks[id], version)
		w.pool.mu.Unlock()
	}
	if revision == rev {
		return nil
	}
	return w.poolView(rev)
}

// poolBehind reports whether a TM is a member that has not confirmed the current pool version
// yet: it is given no new tasks until it has, so every TM that holds tasks counts on a pool
// the leader knows of. (Registration makes every TM a member; only tests place tasks on TMs
// they put in the registry by hand.)
func (jm *JobMaster) poolBehind(id string) bool {
	m, current, _, ok := jm.state.PoolMember(id)
	return ok && m.AckedVersion != current
}

// Placeable lists the TMs new tasks may go to: usable (registered, heard from within the
// heartbeat timeout, not lost), current with the pool and not drained (drain.go).
func (jm *JobMaster) Placeable() []TaskManager {
	drained := jm.state.Drained()
	return slices.DeleteFunc(jm.tms.Usable(jm.cfg.HeartbeatTimeout), func(tm TaskManager) bool {
		_, d := drained[tm.ID]
		return d || jm.poolBehind(tm.ID)
	})
}

// poolView returns the committed pool's view, cached per revision.
func (w *tmWatch) poolView(revision uint64) *pb.PoolView {
	p := w.pool
	p.mu.Lock()
	v := p.view
	p.mu.Unlock()
	if v != nil && v.Revision == revision {
		return v
	}
	pool := w.jm.state.Pool()
	v = &pb.PoolView{Version: pool.Version, Revision: pool.Revision, Peers: make([]*pb.PoolPeer, len(pool.Members))}
	for i, m := range pool.Members {
		v.Peers[i] = &pb.PoolPeer{TmId: m.TmId, GrpcAddress: m.GrpcAddress}
	}
	p.mu.Lock()
	if p.view == nil || p.view.Revision < v.Revision {
		p.view = v
	}
	p.mu.Unlock()
	return v
}

// flushPoolAcks commits the pool versions confirmed since the last flush (one entry).
func (w *tmWatch) flushPoolAcks() {
	p := w.pool
	p.mu.Lock()
	if len(p.acks) == 0 {
		p.mu.Unlock()
		return
	}
	cmd := &pb.PoolAckCommand{}
	for id, v := range p.acks {
		cmd.Acks = append(cmd.Acks, &pb.PoolAck{TmId: id, Version: v})
	}
	p.acks = map[string]uint64{}
	p.mu.Unlock()
	sortAcks(cmd.Acks)
	if _, err := w.jm.Commit(w.ctx, pb.CommandType_COMMAND_TYPE_POOL_ACK, cmd); err != nil {
		w.jm.log.Debug("commit pool acks", "error", err) // the next heartbeats confirm again
	}
}

func sortAcks(a []*pb.PoolAck) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j].TmId < a[j-1].TmId; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}
