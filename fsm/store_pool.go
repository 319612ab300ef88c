package fsm

import (
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// maxPoolVersions bounds the pool versions kept for members that have not confirmed the newer
// ones. A member whose acked version falls out of the window uses a pool the leader no longer
// knows: the leader then redeploys its attempts only on proof of death or after the grace
// (PoolVersions returns nothing for it).
const maxPoolVersions = 32

// MaxPoolMembers bounds the pool: a TM registering beyond it is refused a place (its tasks
// still run; the leader cannot redeploy them without proof of death).
const MaxPoolMembers = 10_000

// poolPut adds a member (a new version, acked by the member: the registration that adds it
// answers with that version) or changes its address or incarnation (a new revision, the same
// membership and version).
func (s *state) poolPut(_ uint64, c *pb.PoolPutCommand) error {
	if c.TmId == "" || c.GrpcAddress == "" {
		return wrapf(ErrInvalidCommand, "pool put: tm_id and grpc_address are required")
	}
	i, found := slices.BinarySearchFunc(s.pool.Members, c.TmId, func(m *pb.PoolMember, id string) int { return strings.Compare(m.TmId, id) })
	if found {
		m := s.pool.Members[i]
		if m.GrpcAddress == c.GrpcAddress && m.Incarnation == c.Incarnation {
			return nil
		}
		m.GrpcAddress, m.Incarnation = c.GrpcAddress, c.Incarnation
		s.pool.Revision++
		return nil
	}
	if len(s.pool.Members) >= MaxPoolMembers {
		return wrapf(ErrPoolFull, "%d members", MaxPoolMembers)
	}
	v := s.pool.Version + 1
	s.pool.Members = slices.Insert(s.pool.Members, i, &pb.PoolMember{TmId: c.TmId, GrpcAddress: c.GrpcAddress, Incarnation: c.Incarnation, AddedVersion: v, AckedVersion: v})
	s.newPoolVersion()
	return nil
}

// poolRemove takes a member out of the pool (a new version).
func (s *state) poolRemove(_ uint64, c *pb.PoolRemoveCommand) error {
	i, found := slices.BinarySearchFunc(s.pool.Members, c.TmId, func(m *pb.PoolMember, id string) int { return strings.Compare(m.TmId, id) })
	if !found {
		return wrapf(ErrUnknownPoolMember, "%q", c.TmId)
	}
	s.pool.Members = slices.Delete(s.pool.Members, i, i+1)
	s.newPoolVersion()
	return nil
}

// poolAck records the versions members confirmed knowing; stale or impossible acks are skipped
// (an ack races with the next change), so the command never fails.
func (s *state) poolAck(_ uint64, c *pb.PoolAckCommand) error {
	for _, a := range c.Acks {
		i, found := slices.BinarySearchFunc(s.pool.Members, a.TmId, func(m *pb.PoolMember, id string) int { return strings.Compare(m.TmId, id) })
		if !found || a.Version <= s.pool.Members[i].AckedVersion || a.Version > s.pool.Version {
			continue
		}
		s.pool.Members[i].AckedVersion = a.Version
	}
	s.trimPoolVersions()
	return nil
}

// newPoolVersion records the current membership as the next version.
func (s *state) newPoolVersion() {
	s.pool.Version++
	s.pool.Revision++
	ids := make([]string, len(s.pool.Members))
	for i, m := range s.pool.Members {
		ids[i] = m.TmId
	}
	s.pool.Versions = append(s.pool.Versions, &pb.PoolVersion{Version: s.pool.Version, TmIds: ids})
	s.trimPoolVersions()
}

// trimPoolVersions keeps the versions from the oldest one a member may use (its acked
// version, or the one that added it before it acks any) to the current one, at most
// maxPoolVersions.
func (s *state) trimPoolVersions() {
	oldest := s.pool.Version
	for _, m := range s.pool.Members {
		oldest = min(oldest, usesFrom(m))
	}
	drop := 0
	for drop < len(s.pool.Versions) && s.pool.Versions[drop].Version < oldest {
		drop++
	}
	drop = max(drop, len(s.pool.Versions)-maxPoolVersions)
	if drop > 0 {
		s.pool.Versions = slices.Delete(s.pool.Versions, 0, drop)
	}
}

// usesFrom is the oldest pool version a member may use.
func usesFrom(m *pb.PoolMember) uint64 {
	if m.AckedVersion > 0 {
		return m.AckedVersion
	}
	return m.AddedVersion
}

// Pool returns a copy of the committed TaskManager pool.
func (f *FSM) Pool() *pb.TaskManagerPool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return proto.Clone(f.st.pool).(*pb.TaskManagerPool)
}

// PoolVersions returns the memberships a pool member may use: every kept version from the one
// it acked (or, before it acks one, the one that added it) to the current one. ok is false
// for a TM that is not a member, or whose oldest usable version is no longer kept.
func (f *FSM) PoolVersions(tmID string) (versions [][]string, ok bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	p := f.st.pool
	i, found := slices.BinarySearchFunc(p.Members, tmID, func(m *pb.PoolMember, id string) int { return strings.Compare(m.TmId, id) })
	if !found {
		return nil, false
	}
	from := usesFrom(p.Members[i])
	if from == 0 || len(p.Versions) == 0 || p.Versions[0].Version > from {
		return nil, false
	}
	for _, v := range p.Versions {
		if v.Version >= from {
			versions = append(versions, slices.Clone(v.TmIds))
		}
	}
	return versions, len(versions) > 0
}

// PoolMember returns a copy of one member and the pool's current version and revision.
func (f *FSM) PoolMember(tmID string) (m *pb.PoolMember, version, revision uint64, ok bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	p := f.st.pool
	i, found := slices.BinarySearchFunc(p.Members, tmID, func(m *pb.PoolMember, id string) int { return strings.Compare(m.TmId, id) })
	if !found {
		return nil, p.Version, p.Revision, false
	}
	return proto.Clone(p.Members[i]).(*pb.PoolMember), p.Version, p.Revision, true
}

// PoolVersion is the pool's current version and revision (0: no pool yet).
func (f *FSM) PoolVersion() (version, revision uint64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.pool.Version, f.st.pool.Revision
}

// setDrain drains a TaskManager or ends its drain (sorted by id; repeating is harmless).
func (s *state) setDrain(_ uint64, c *pb.SetDrainCommand) error {
	if c.TmId == "" {
		return wrapf(ErrInvalidCommand, "set drain: tm_id is required")
	}
	i, found := slices.BinarySearchFunc(s.pool.Drained, c.TmId, func(d *pb.DrainedTaskManager, id string) int { return strings.Compare(d.TmId, id) })
	switch {
	case c.Drained && !found:
		if len(s.pool.Drained) >= MaxPoolMembers {
			return wrapf(ErrPoolFull, "%d drained TaskManagers", MaxPoolMembers)
		}
		s.pool.Drained = slices.Insert(s.pool.Drained, i, &pb.DrainedTaskManager{TmId: c.TmId, Since: c.Timestamp})
	case !c.Drained && found:
		s.pool.Drained = slices.Delete(s.pool.Drained, i, i+1)
	}
	return nil
}

// Drained returns the drained TaskManagers and since when (unix milliseconds).
func (f *FSM) Drained() map[string]int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make(map[string]int64, len(f.st.pool.Drained))
	for _, d := range f.st.pool.Drained {
		out[d.TmId] = d.Since
	}
	return out
}
