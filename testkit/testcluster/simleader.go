package testcluster

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/jmcluster/jmcluster/taskmanager"
	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// simSenders is the number of outbox senders of a simulated TM that calls JobMasters: how
// many of its state updates may be in flight at once.
const simSenders = 16

// simShard is one outbox sender's FIFO queue. Like a TaskManager's outbox, the messages of one
// attempt are sent in order (an attempt always goes to the same sender) and many attempts'
// messages are in flight at once, which the leader's batcher commits together.
type simShard struct {
	mu    sync.Mutex
	queue []*pb.UpdateTaskExecutionStateRequest
	ready chan struct{} // a message was queued (capacity 1)
	nudge chan struct{} // closed and replaced to wake a sender backing off: a new leader
}

// startProtocol starts the TM's side of the protocol: one leader loop (find the leader,
// register, heartbeat) and simSenders outbox senders.
func (s *SimTM) startProtocol(wg *sync.WaitGroup) {
	for range simSenders {
		s.shards = append(s.shards, &simShard{ready: make(chan struct{}, 1), nudge: make(chan struct{})})
	}
	wg.Add(1 + len(s.shards))
	go func() { defer wg.Done(); s.leaderLoop() }()
	for _, sh := range s.shards {
		go func() { defer wg.Done(); s.sender(sh) }()
	}
}

func (s *SimTM) conn(addr string) (*grpc.ClientConn, error) {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	if c := s.conns[addr]; c != nil {
		return c, nil
	}
	c, err := grpc.NewClient(addr, append(transport.DialOptions(0, "simulated TaskManager"), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		return nil, err
	}
	s.conns[addr] = c
	return c, nil
}

func (s *SimTM) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// followLocked makes addr the leader (not registered with it yet) and wakes the loop and the
// senders.
func (s *SimTM) followLocked(addr, id string) {
	s.leader, s.leaderID, s.registered = addr, id, false
	s.wake()
	for _, sh := range s.shards {
		sh.mu.Lock()
		close(sh.nudge)
		sh.nudge = make(chan struct{})
		sh.mu.Unlock()
	}
}

// failed reacts to a failed call to the leader at addr: a gate closed keeps it, a NOT_LEADER
// hint is followed, anything else makes the TM resolve the leader again.
func (s *SimTM) failed(addr string, err error) {
	if transport.IsReconciling(err) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if addr != s.leader {
		return
	}
	if hint := transport.LeaderHint(err); hint != "" && hint != addr {
		s.followLocked(hint, "")
		return
	}
	s.leader, s.registered = "", false
	s.wake()
}

// resolve asks the JobMasters' ClusterStatus for the established leader.
func (s *SimTM) resolve(ctx context.Context) string {
	for _, jm := range s.jms {
		c, err := s.conn(jm)
		if err != nil {
			continue
		}
		cs, err := pb.NewClientServiceClient(c).ClusterStatus(ctx, &pb.ClusterStatusRequest{})
		if err == nil && cs.GetLeaderGrpcAddress() != "" && cs.GetEpoch() >= s.Epoch() {
			return cs.GetLeaderGrpcAddress()
		}
	}
	return ""
}

func (s *SimTM) leaderLoop() {
	failures := 0
	for {
		s.mu.Lock()
		addr, registered, iv := s.leader, s.registered, s.hb
		s.mu.Unlock()
		var err error
		ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
		switch {
		case addr == "":
			if a := s.resolve(ctx); a != "" {
				s.mu.Lock()
				if s.leader == "" {
					s.followLocked(a, "")
				}
				s.mu.Unlock()
				cancel()
				continue
			}
			err = fmt.Errorf("no leader named")
		case !registered:
			err = s.register(ctx, addr)
		default:
			err = s.heartbeat(ctx, addr)
		}
		cancel()
		if s.ctx.Err() != nil {
			return
		}
		wait := iv
		if err != nil {
			failures++
			wait = min(10*time.Millisecond<<min(failures-1, 6), iv)
		} else {
			failures = 0
		}
		timer := time.NewTimer(wait)
		select {
		case <-s.ctx.Done():
			timer.Stop()
			return
		case <-s.kick:
		case <-timer.C:
		}
		timer.Stop()
	}
}

func (s *SimTM) register(ctx context.Context, addr string) error {
	c, err := s.conn(addr)
	if err != nil {
		return err
	}
	resp, err := pb.NewJobMasterServiceClient(c).RegisterTaskManager(ctx, &pb.RegisterTaskManagerRequest{
		TmId: s.ID, GrpcAddress: s.Addr, DataAddress: s.Addr, Slots: s.Slots, EpochSeen: s.Epoch(),
		Incarnation: s.Incarnation, ProtocolVersion: taskmanager.ProtocolVersion,
	})
	if err != nil {
		s.failed(addr, err)
		return err
	}
	s.Registrations.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if resp.GetEpoch() < s.epoch || addr != s.leader {
		s.leader, s.registered = "", false // a deposed leader, or one we no longer follow
		return fmt.Errorf("registration with %s at epoch %d, seen %d", addr, resp.GetEpoch(), s.epoch)
	}
	s.epoch, s.leaderID, s.registered = resp.GetEpoch(), resp.GetLeaderId(), true
	if ms := resp.GetHeartbeatIntervalMs(); ms > 0 {
		s.hb = time.Duration(ms) * time.Millisecond
	}
	s.adoptPoolLocked(resp.GetPool())
	s.wake() // the first heartbeat at once: it confirms the pool version, which makes the TM placeable
	return nil
}

func (s *SimTM) adoptPoolLocked(v *pb.PoolView) {
	if v != nil && v.GetRevision() > s.poolRev {
		s.poolV, s.poolRev = v.GetVersion(), v.GetRevision()
	}
}

func (s *SimTM) heartbeat(ctx context.Context, addr string) error {
	s.mu.Lock()
	req := &pb.HeartbeatRequest{TmId: s.ID, EpochSeen: s.epoch, Incarnation: s.Incarnation, PoolVersion: s.poolV, PoolRevision: s.poolRev,
		Deployed: make([]*pb.DeployedExecution, 0, len(s.tasks))}
	for id, t := range s.tasks {
		req.Deployed = append(req.Deployed, &pb.DeployedExecution{JobId: t.jobID, AttemptId: id, State: t.rep.State})
	}
	req.FreeSlots = s.freeSlotsLocked()
	s.mu.Unlock()
	c, err := s.conn(addr)
	if err != nil {
		return err
	}
	resp, err := pb.NewJobMasterServiceClient(c).Heartbeat(ctx, req)
	if err != nil {
		s.failed(addr, err)
		return err
	}
	s.Heartbeats.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if resp.GetEpoch() < s.epoch {
		s.leader, s.registered = "", false
		return fmt.Errorf("heartbeat answered by %s at epoch %d, seen %d", addr, resp.GetEpoch(), s.epoch)
	}
	s.epoch = resp.GetEpoch()
	s.adoptPoolLocked(resp.GetPool())
	if resp.GetUnknownTaskManager() {
		s.registered = false
		s.wake()
	}
	return nil
}

// freeSlotsLocked counts the slots without a live task.
func (s *SimTM) freeSlotsLocked() int32 {
	used := map[int32]bool{}
	for _, t := range s.tasks {
		if !terminal(t.rep.State) {
			used[t.rep.SlotIndex] = true
		}
	}
	return s.Slots - int32(len(used))
}

// enqueue queues a state update behind the attempt's earlier ones (a TM that calls no
// JobMaster drops it).
func (s *SimTM) enqueue(m *pb.UpdateTaskExecutionStateRequest) {
	if len(s.shards) == 0 {
		return
	}
	h := fnv.New32a()
	h.Write([]byte(m.AttemptId))
	sh := s.shards[h.Sum32()%uint32(len(s.shards))]
	sh.mu.Lock()
	sh.queue = append(sh.queue, m)
	sh.mu.Unlock()
	select {
	case sh.ready <- struct{}{}:
	default:
	}
}

// sender delivers its queue's messages one at a time, each until the leader answers it:
// retryable refusals (the gate closed, not the leader, no connection) wait for the RetryInfo
// delay, a backoff, or a new leader.
func (s *SimTM) sender(sh *simShard) {
	backoff := 10 * time.Millisecond
	for {
		sh.mu.Lock()
		var m *pb.UpdateTaskExecutionStateRequest
		if len(sh.queue) > 0 {
			m = sh.queue[0]
		}
		nudge := sh.nudge
		sh.mu.Unlock()
		if m == nil {
			select {
			case <-s.ctx.Done():
				return
			case <-sh.ready:
			}
			continue
		}
		addr, _, _, _ := s.Leader()
		err := fmt.Errorf("no leader")
		if addr != "" {
			var c *grpc.ClientConn
			if c, err = s.conn(addr); err == nil {
				ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
				_, err = pb.NewJobMasterServiceClient(c).UpdateTaskExecutionState(ctx, m)
				cancel()
			}
		}
		if s.ctx.Err() != nil {
			return
		}
		if err == nil || !transport.Retryable(err) {
			// Accepted, or refused for good (the leader owns the attempt no longer): either way
			// the message is done.
			s.Updates.Add(1)
			sh.mu.Lock()
			sh.queue = sh.queue[1:]
			sh.mu.Unlock()
			backoff = 10 * time.Millisecond
			continue
		}
		if addr != "" {
			s.failed(addr, err)
		} else {
			s.wake()
		}
		delay, ok := transport.RetryAfter(err)
		if !ok {
			delay = backoff/2 + rand.N(backoff/2+1)
			backoff = min(2*backoff, time.Second)
		}
		timer := time.NewTimer(delay)
		select {
		case <-s.ctx.Done():
			timer.Stop()
			return
		case <-nudge:
		case <-timer.C:
		}
		timer.Stop()
	}
}
