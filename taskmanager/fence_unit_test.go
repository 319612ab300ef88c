package taskmanager

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestFenceEpochRules: the fence's epoch rules on their own. A call's epoch below the highest
// seen is refused as ErrStaleEpoch and changes nothing; an accepted call adopts a higher epoch
// and is leader contact; a leader's answer below the highest seen is stale and adopts nothing
// (no epoch, no contact, no pool); a fresh answer adopts its epoch, the contact and its pool.
func TestFenceEpochRules(t *testing.T) {
	f := &fence{cfg: DefaultConfig(), log: hclog.NewNullLogger()}
	if seen, err := f.accept(5, "SubmitTask"); err != nil || seen != 5 {
		t.Fatalf("accept(5) = %d, %v; want 5, nil", seen, err)
	}
	contact := f.contact()
	if contact.IsZero() {
		t.Fatal("an accepted call is no leader contact")
	}
	var ee *EpochError
	if _, err := f.accept(4, "CancelTask"); !errors.As(err, &ee) || ee.Kind != ErrStaleEpoch || ee.Got != 4 || ee.Seen != 5 {
		t.Fatalf("accept(4) after 5 = %v, want a stale-epoch EpochError 4/5", err)
	}
	if f.current() != 5 || f.contact() != contact {
		t.Fatalf("a refused call changed the fence: epoch %d", f.current())
	}

	pool := &pb.PoolView{Version: 1, Revision: 3, Peers: []*pb.PoolPeer{{TmId: "tm2", GrpcAddress: "h:2"}, {TmId: "tm1", GrpcAddress: "h:1"}}}
	if seen, ok := f.answered(4, time.Now(), "heartbeat", nil, pool); ok || seen != 5 {
		t.Fatalf("answered(4) after 5 = %d, %v; want 5, stale", seen, ok)
	}
	if v, _ := f.poolVersion(); v != 0 {
		t.Fatalf("a stale leader's pool was taken: version %d", v)
	}
	sent := time.Now()
	reg := &pb.RegisterTaskManagerResponse{FenceTimeoutMs: 300, LeaderGraceMs: 900}
	if seen, ok := f.answered(7, sent, "register", reg, pool); !ok || seen != 7 {
		t.Fatalf("answered(7) = %d, %v; want 7, ok", seen, ok)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pool.version != 1 || f.pool.revision != 3 || f.pool.peers[0].TmId != "tm1" || !f.pool.contactAt.Equal(sent) || f.pool.epochOf != 7 {
		t.Errorf("pool %+v after a registration answered at %v", f.pool, sent)
	}
	if f.fenceTimeoutLocked() != 300*time.Millisecond || f.leaderGraceLocked() != 900*time.Millisecond {
		t.Errorf("the leader's timings not taken: fence %v, grace %v", f.fenceTimeoutLocked(), f.leaderGraceLocked())
	}
}
