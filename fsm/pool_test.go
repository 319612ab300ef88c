package fsm

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/jmcluster/jmcluster/transport/pb"
)

const (
	poolPutT    = pb.CommandType_COMMAND_TYPE_POOL_PUT
	poolRemoveT = pb.CommandType_COMMAND_TYPE_POOL_REMOVE
	poolAckT    = pb.CommandType_COMMAND_TYPE_POOL_ACK
)

func poolIDs(p *pb.TaskManagerPool) []string {
	var out []string
	for _, m := range p.Members {
		out = append(out, m.TmId)
	}
	return out
}

// TestPoolChangesOneAtATime: adding or removing a member is one new version (the added member
// counts as having acked it); a new address or incarnation is a new revision of the same
// version; a repeated put is no change; members stay sorted; the versions a member may use run
// from the one it acked to the current one.
func TestPoolChangesOneAtATime(t *testing.T) {
	h := newHarness(t)
	h.fails(poolPutT, &pb.PoolPutCommand{TmId: "tm1"}, ErrInvalidCommand)
	h.ok(poolPutT, &pb.PoolPutCommand{TmId: "tm2", GrpcAddress: "a2", Incarnation: "i2"})
	h.ok(poolPutT, &pb.PoolPutCommand{TmId: "tm1", GrpcAddress: "a1", Incarnation: "i1"})
	h.ok(poolPutT, &pb.PoolPutCommand{TmId: "tm1", GrpcAddress: "a1", Incarnation: "i1"}) // no change
	p := h.f.Pool()
	if p.Version != 2 || p.Revision != 2 || !slices.Equal(poolIDs(p), []string{"tm1", "tm2"}) || len(p.Versions) != 2 {
		t.Fatalf("pool %v: want version and revision 2, members tm1 tm2, versions 1 (tm2 acked it) and 2 kept", p)
	}
	h.ok(poolPutT, &pb.PoolPutCommand{TmId: "tm1", GrpcAddress: "a1b", Incarnation: "i1b"}) // readdressed
	p = h.f.Pool()
	if p.Version != 2 || p.Revision != 3 || p.Members[0].GrpcAddress != "a1b" || p.Members[0].Incarnation != "i1b" {
		t.Fatalf("pool after a new address %v: want version 2, revision 3, the new address", p)
	}
	if v, ok := h.f.PoolVersions("tm1"); !ok || len(v) != 1 || !slices.Equal(v[0], []string{"tm1", "tm2"}) {
		t.Fatalf("tm1 (added at version 2) may use %v %v, want version 2", v, ok)
	}
	if v, ok := h.f.PoolVersions("tm2"); !ok || len(v) != 2 || !slices.Equal(v[0], []string{"tm2"}) {
		t.Fatalf("tm2 (acked 1) may use %v %v, want versions 1 and 2", v, ok)
	}
	h.ok(poolAckT, &pb.PoolAckCommand{Acks: []*pb.PoolAck{{TmId: "tm2", Version: 9}, {TmId: "nobody", Version: 1}}}) // impossible, unknown: skipped
	if p := h.f.Pool(); p.Members[1].AckedVersion != 1 {
		t.Fatalf("an ack above the current version was recorded: %v", p)
	}
	h.ok(poolAckT, &pb.PoolAckCommand{Acks: []*pb.PoolAck{{TmId: "tm2", Version: 2}}})
	h.ok(poolAckT, &pb.PoolAckCommand{Acks: []*pb.PoolAck{{TmId: "tm2", Version: 1}}}) // older: skipped
	p = h.f.Pool()
	if p.Members[1].AckedVersion != 2 || len(p.Versions) != 1 || p.Versions[0].Version != 2 {
		t.Fatalf("pool after acks %v: want tm2 acked 2 and only version 2 kept", p)
	}
	h.fails(poolRemoveT, &pb.PoolRemoveCommand{TmId: "tm9"}, ErrUnknownPoolMember)
	h.ok(poolRemoveT, &pb.PoolRemoveCommand{TmId: "tm1"})
	p = h.f.Pool()
	if p.Version != 3 || !slices.Equal(poolIDs(p), []string{"tm2"}) || len(p.Versions) != 2 {
		t.Fatalf("pool after a removal %v: want version 3, tm2 only, versions 2 and 3 kept (tm2 acked 2)", p)
	}
	if _, ok := h.f.PoolVersions("tm1"); ok {
		t.Fatalf("a removed TM still has pool versions")
	}
}

// TestPoolVersionsBounded: a member that never confirms a version keeps at most
// maxPoolVersions versions alive; once its acked version is dropped, PoolVersions refuses it
// (the leader cannot know which pool it uses).
func TestPoolVersionsBounded(t *testing.T) {
	h := newHarness(t)
	h.ok(poolPutT, &pb.PoolPutCommand{TmId: "stale", GrpcAddress: "a"}) // acked version 1, and never again
	for i := range maxPoolVersions + 5 {
		h.ok(poolPutT, &pb.PoolPutCommand{TmId: fmt.Sprintf("tm%03d", i), GrpcAddress: "b"})
	}
	p := h.f.Pool()
	if len(p.Versions) != maxPoolVersions || p.Versions[len(p.Versions)-1].Version != p.Version {
		t.Fatalf("%d versions kept (newest %d, current %d), want %d", len(p.Versions), p.Versions[len(p.Versions)-1].Version, p.Version, maxPoolVersions)
	}
	if v, ok := h.f.PoolVersions("stale"); ok {
		t.Fatalf("a member whose acked version was dropped may use %d versions", len(v))
	}
	last := fmt.Sprintf("tm%03d", maxPoolVersions+4)
	if v, ok := h.f.PoolVersions(last); !ok || len(v) != 1 {
		t.Fatalf("the newest member, added at the current version, may use %d versions, want 1", len(v))
	}
}

// TestPoolFull: the pool has a bound, named in the error; a member already in it may still
// change.
func TestPoolFull(t *testing.T) {
	h := newHarness(t)
	h.f.st.pool.Members = make([]*pb.PoolMember, 0, MaxPoolMembers)
	for i := range MaxPoolMembers {
		h.f.st.pool.Members = append(h.f.st.pool.Members, &pb.PoolMember{TmId: fmt.Sprintf("tm%05d", i), GrpcAddress: "a"})
	}
	h.ok(poolPutT, &pb.PoolPutCommand{TmId: "tm00000", GrpcAddress: "b"})
	h.fails(poolPutT, &pb.PoolPutCommand{TmId: "tmz", GrpcAddress: "b"}, ErrPoolFull)
}

// TestDrainIsReplicatedState: a drain is kept sorted, outlives the TM's pool membership,
// survives a snapshot (even with an empty pool), and repeating or ending it is harmless.
func TestDrainIsReplicatedState(t *testing.T) {
	const setDrainT = pb.CommandType_COMMAND_TYPE_SET_DRAIN
	h := newHarness(t)
	h.fails(setDrainT, &pb.SetDrainCommand{Drained: true}, ErrInvalidCommand)
	h.ok(setDrainT, &pb.SetDrainCommand{TmId: "tm2", Drained: true, Timestamp: 20})
	h.ok(setDrainT, &pb.SetDrainCommand{TmId: "tm1", Drained: true, Timestamp: 10})
	h.ok(setDrainT, &pb.SetDrainCommand{TmId: "tm1", Drained: true, Timestamp: 30}) // again: kept as it was
	h.ok(setDrainT, &pb.SetDrainCommand{TmId: "tm9", Drained: false})               // not drained: nothing
	if d := h.f.Drained(); len(d) != 2 || d["tm1"] != 10 || d["tm2"] != 20 {
		t.Fatalf("drained %v, want tm1 since 10 and tm2 since 20", d)
	}
	if p := h.f.Pool(); p.Drained[0].TmId != "tm1" || p.Drained[1].TmId != "tm2" || p.Version != 0 {
		t.Fatalf("pool %v: want tm1, tm2 drained in order and no membership change", p)
	}
	restored := New(hclog.NewNullLogger())
	if err := restored.Restore(io.NopCloser(bytes.NewReader(persist(t, h.f)))); err != nil {
		t.Fatal(err)
	}
	if d := restored.Drained(); len(d) != 2 || d["tm1"] != 10 {
		t.Fatalf("after a snapshot: drained %v", d)
	}
	h.ok(setDrainT, &pb.SetDrainCommand{TmId: "tm1", Drained: false})
	if d := h.f.Drained(); len(d) != 1 || d["tm2"] != 20 {
		t.Fatalf("after ending tm1's drain: %v", d)
	}
}
