package taskmanager

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/jmcluster/jmcluster/internal/failpoint"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// epochWitnessRetry: after the JobMasters were asked about an unannounced epoch, a call with
// another unannounced epoch is refused without asking again for this long, so a stream of calls
// with made-up epochs cannot become a stream of ClusterStatus calls.
const epochWitnessRetry = 250 * time.Millisecond

// errNoEpochWitness: no JobMaster names the epoch as the established leader's.
var errNoEpochWitness = errors.New("no JobMaster names the epoch")

// fence is the TaskManager's fencing: the highest leader epoch seen, the last leader contact,
// and the isolation rule (isolation.go) and leader grace (grace.go) that cancel every task of
// a TM cut off from a live leader. Its mutex is a leaf: nothing is called while it is held.
// Lock order: TaskManager.mu, then leaderLink.mu, then fence.mu.
type fence struct {
	cfg   Config
	log   hclog.Logger
	jms   *jobMasters
	conns *connPool
	// leader is the address of the leader the TM follows (leaderLink.leader); interval its
	// heartbeat interval; stop cancels every task and says how many.
	leader   func() string
	interval func() time.Duration
	stop     func(why string) int

	mu          sync.Mutex
	epoch       uint64
	lastContact time.Time
	pool        poolState
	// newLeaderSeen: when a leader with a newer epoch than the TM's was first named.
	newLeaderSeen struct {
		epoch uint64
		at    time.Time
	}

	// witnessMu serialises asking the JobMasters about an unannounced epoch; witness is the
	// last answer (the highest established epoch named, and when they were last asked).
	witnessMu sync.Mutex
	witness   struct {
		named uint64
		at    time.Time
	}

	// fenceChecks counts the checks for a live leader made after FenceTimeout without contact;
	// poolChecks the pool queries this TM made (the isolation rule); peerQueries the queries of
	// other TMs it answered.
	fenceChecks, poolChecks, peerQueries atomic.Int64
}

// admit is the first step of every TaskManagerService call. It runs before the call's effect
// and changes nothing:
//
//  1. an epoch below the highest seen → ErrStaleEpoch (the caller is a deposed leader);
//  2. a request that fails validation (invalid != nil) → ErrInvalidRequest;
//  3. an epoch above the highest seen passes only when announces is set (RequestReport, the new
//     leader's first call) or when a JobMaster names it as the established leader's epoch
//     (ClusterStatus); otherwise → ErrUnannouncedEpoch.
//
// The call then takes the task lock and accept adopts the epoch in the same critical section
// as the effect. So a refused request never raises the epoch, whatever number it carries.
func (f *fence) admit(ctx context.Context, epoch uint64, call string, invalid error, announces bool) error {
	f.mu.Lock()
	seen := f.epoch
	err := f.staleLocked(epoch, call)
	f.mu.Unlock()
	if err != nil {
		return err
	}
	if invalid != nil {
		f.log.Warn("refusing an invalid call", "call", call, "epoch", epoch, "error", invalid)
		return invalidRequest(invalid)
	}
	if epoch <= seen || announces {
		return nil
	}
	if werr := f.witnessEpoch(ctx, epoch); werr != nil {
		f.log.Warn("refusing a call with an unannounced epoch", "call", call, "epoch", epoch, "seen", seen, "why", werr)
		return &EpochError{Kind: ErrUnannouncedEpoch, Got: epoch, Seen: seen}
	}
	return nil
}

// staleLocked refuses an epoch below the highest seen (unless fencing is disabled).
func (f *fence) staleLocked(epoch uint64, call string) error {
	if epoch >= f.epoch {
		return nil
	}
	if failpoint.Enabled(failpoint.DisableFencing) {
		f.log.Warn("failpoint disable-fencing: accepting a call from a stale leader", "call", call, "epoch", epoch, "seen", f.epoch)
		return nil
	}
	f.log.Warn("refusing call from a stale leader", "call", call, "epoch", epoch, "seen", f.epoch)
	return &EpochError{Kind: ErrStaleEpoch, Got: epoch, Seen: f.epoch}
}

// accept runs after admit passed, under the task lock with the call's effect: it refuses an
// epoch that has become stale in between and adopts a higher one; an accepted call is leader
// contact. seen is the highest epoch seen once the call is accepted.
func (f *fence) accept(epoch uint64, call string) (seen uint64, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.staleLocked(epoch, call); err != nil {
		return 0, err
	}
	f.adoptLocked(epoch, call)
	f.lastContact = time.Now()
	return f.epoch, nil
}

// adoptLocked raises the highest seen epoch.
func (f *fence) adoptLocked(epoch uint64, via string) {
	if epoch > f.epoch {
		f.log.Info("adopting leader epoch", "old", f.epoch, "new", epoch, "via", via)
		f.epoch = epoch
	}
}

// current is the highest leader epoch seen.
func (f *fence) current() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.epoch
}

// contact is when the TM last heard from a leader it accepted.
func (f *fence) contact() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastContact
}

// started counts the leader grace from now (the TM starts).
func (f *fence) started() {
	f.mu.Lock()
	f.lastContact = time.Now()
	f.mu.Unlock()
}

// answered takes the leader's answer to a registration (reg) or heartbeat the TM sent at sent:
// a leader with an epoch below the highest seen is stale (ok false, with the epoch seen);
// otherwise its epoch is adopted, the answer is contact, and its pool view (and, for a
// registration, the rule's timings) are taken.
func (f *fence) answered(epoch uint64, sent time.Time, via string, reg *pb.RegisterTaskManagerResponse, pool *pb.PoolView) (seen uint64, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if epoch != 0 && epoch < f.epoch {
		return f.epoch, false
	}
	f.adoptLocked(epoch, via)
	f.answeredLocked(sent)
	if reg != nil {
		f.adoptRuleLocked(reg)
	}
	f.adoptPoolLocked(pool)
	return f.epoch, true
}

// witnessEpoch asks the JobMasters (the configured ones, those gossip knows, the leader this TM
// follows and the one the LeaderResolver names) whether epoch is the established leader's. Queries are
// serialised; the last named epoch is remembered, and after a query that did not name it, other
// unannounced epochs are refused for epochWitnessRetry without asking.
func (f *fence) witnessEpoch(ctx context.Context, epoch uint64) error {
	f.witnessMu.Lock()
	defer f.witnessMu.Unlock()
	if f.witness.named == epoch {
		return nil
	}
	if !f.witness.at.IsZero() && time.Since(f.witness.at) < epochWitnessRetry {
		return fmt.Errorf("%w (last asked %v ago; it named %d)", errNoEpochWitness, time.Since(f.witness.at).Round(time.Millisecond), f.witness.named)
	}
	ctx, cancel := context.WithTimeout(ctx, f.cfg.RPCTimeout)
	defer cancel()
	named, err := f.namedEpoch(ctx, epoch)
	f.witness.at = time.Now()
	if named > f.witness.named || named == epoch {
		f.witness.named = named
	}
	return err
}

// namedEpoch asks each candidate JobMaster for ClusterStatus until one names an established
// leader with epoch; it returns the highest epoch named.
func (f *fence) namedEpoch(ctx context.Context, epoch uint64) (uint64, error) {
	cands := f.jms.list()
	if leader := f.leader(); leader != "" {
		cands = append(cands, leader)
	}
	if addr := f.jms.resolved(ctx); addr != "" {
		cands = append(cands, addr)
	}
	var best uint64
	asked := map[string]bool{}
	for _, addr := range cands {
		if asked[addr] || ctx.Err() != nil {
			continue
		}
		asked[addr] = true
		resp, err := f.jms.status(ctx, addr)
		if err != nil || resp.GetLeaderGrpcAddress() == "" {
			continue
		}
		if resp.GetEpoch() == epoch {
			return epoch, nil
		}
		best = max(best, resp.GetEpoch())
	}
	return best, fmt.Errorf("%w: asked %d JobMaster(s), the highest established epoch named is %d", errNoEpochWitness, len(asked), best)
}

// Request validation: every check needs the request alone, so it runs before the task lock is
// taken and before any epoch is adopted.

func validateCancel(req *pb.CancelTaskRequest) error {
	if req.GetJobId() == "" || req.GetAttemptId() == "" {
		return errors.New("cancel: job_id and attempt_id are required")
	}
	return nil
}

func validatePartitionInfo(req *pb.UpdatePartitionInfoRequest) error {
	if req.GetJobId() == "" || req.GetConsumerAttemptId() == "" {
		return errors.New("update partition info: job_id and consumer_attempt_id are required")
	}
	for i, c := range req.GetChannels() {
		switch {
		case c == nil:
			return fmt.Errorf("update partition info: channels[%d] is missing", i)
		case c.GetResultId() == "":
			return fmt.Errorf("update partition info: channels[%d]: result_id is empty", i)
		case c.GetPartitionIndex() < 0 || c.GetSubpartitionIndex() < 0:
			return fmt.Errorf("update partition info: channels[%d]: negative partition or subpartition index", i)
		case (c.GetProducerAttemptId() == "") != (c.GetProducerDataAddress() == ""):
			return fmt.Errorf("update partition info: channels[%d]: producer attempt and data address must be given together", i)
		}
	}
	return nil
}

func validateAck(req *pb.AcknowledgeTerminalRequest) error {
	if len(req.GetAttemptIds()) == 0 {
		return errors.New("acknowledge terminal: attempt_ids is empty")
	}
	for i, id := range req.GetAttemptIds() {
		if id == "" {
			return fmt.Errorf("acknowledge terminal: attempt_ids[%d] is empty", i)
		}
	}
	return nil
}

func validateReport(req *pb.RequestReportRequest) error {
	if req.GetChunkSize() < 0 {
		return fmt.Errorf("request report: chunk_size %d < 0", req.GetChunkSize())
	}
	if addr := req.GetLeaderGrpcAddress(); addr != "" {
		if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
			return fmt.Errorf("request report: leader_grpc_address %q is not host:port", addr)
		}
	}
	return nil
}
